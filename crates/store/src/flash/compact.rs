//! Compaction: the log's next page to be reused is scanned ahead of the head, and items in it
//! that are still current are written again at the head (by the shards, which know what is
//! current), so that a page mostly made of dead frames is freed without dropping its live
//! items. Only pages under `ext_max_frag` live are compacted; fuller ones are dropped whole
//! when the head reaches them, as without compaction, unless `ext_drop_unread` applies: then,
//! as memcached, such a page is compacted once fewer than `ext_drop_under` pages are free,
//! its items that were not read since they were written dropped rather than written again.

use std::io;
use std::ops::Range;
use std::sync::atomic::Ordering;

use super::{checked_len, Flash, Loc, Log, ALIGN, FRAME_HEADER, MAX_FRAME};

/// Bytes read from the device per compaction step (a larger frame is read whole).
pub(crate) const CHUNK: u64 = 1 << 20;

/// The page being compacted and how far the scan has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cursor {
    page: usize,
    epoch: u8,
    /// The end of the frames written in the page's epoch.
    fill: u64,
    /// The next frame's offset within the page.
    next: u64,
    /// Items not read since they were written are dropped, not written again.
    drop_unread: bool,
}

/// One step's frames: where each item was, and its bytes in the step's buffer.
pub(crate) type Frames = Vec<(Loc, Range<usize>)>;

impl Flash {
    /// The page to compact now, if one is due: the oldest written page when fewer than
    /// `ext_compact_under` pages are free ahead of the head and it is under `ext_max_frag`
    /// live, or (dropping its unread items) with `ext_drop_unread` when fewer than
    /// `ext_drop_under` are free.
    fn due(&self, log: &Log) -> Option<Cursor> {
        let n = log.pages.len();
        let free_ahead = (1..n)
            .map(|i| &log.pages[(log.head + i) % n])
            .take_while(|p| !p.written)
            .count();
        let under = self.cfg.compact_under_of(n as u64);
        if free_ahead as u64 >= under || free_ahead + 1 >= n {
            return None;
        }
        let page = (log.head + 1 + free_ahead) % n;
        let p = &log.pages[page];
        let limit = self.cfg.page_size * u64::from(self.cfg.max_frag_permille) / 1000;
        let too_full = p.live_bytes >= limit;
        if too_full && !self.cfg.drops_unread(free_ahead as u64, n as u64) {
            return None;
        }
        Some(Cursor {
            page,
            epoch: p.epoch,
            fill: p.fill,
            // Nothing live: freed without reading it.
            next: if p.live_items == 0 { p.fill } else { 0 },
            drop_unread: too_full,
        })
    }

    /// Reads the next frames of the page being compacted (starting one if due) into `buf`,
    /// and whether its unread items are to be dropped. None when nothing is to be compacted.
    /// A page whose scan is done, or that was dropped under the scan, is finished here
    /// (`finish`); one that cannot be read is given up (its items are dropped with it,
    /// counted lost).
    pub(crate) fn compact_step(&self, buf: &mut Vec<u8>) -> Option<(Frames, bool)> {
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let cursor = {
            let mut log = self.lock();
            let mut c = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
            match c.filter(|c| log.pages[c.page].epoch == c.epoch) {
                Some(cur) if cur.next < cur.fill => cur,
                still => {
                    if let Some(done) = still {
                        self.finish(&mut log, done);
                    }
                    *c = self.due(&log);
                    (*c)?
                }
            }
        };
        let (frames, scanned) = self.scan(cursor, buf).unwrap_or_default();
        let mut c = self.compacting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cur) = c.as_mut().filter(|cur| **cur == cursor) {
            cur.next = scanned.map_or(cur.fill, |n| cur.next + n);
        }
        Some((frames, cursor.drop_unread))
    }

    /// The whole frames from `cursor.next` on, read into `buf`, and how many bytes they take
    /// (None: the page's scan is over).
    fn scan(&self, cursor: Cursor, buf: &mut Vec<u8>) -> io::Result<(Frames, Option<u64>)> {
        let base = cursor.page as u64 * self.cfg.page_size;
        let len = CHUNK.min(cursor.fill - cursor.next);
        read_into(self, buf, base + cursor.next, len)?;
        let mut frames = Frames::new();
        let mut at = 0usize;
        let mut end_of_page = false;
        while at + FRAME_HEADER <= buf.len() {
            let item_len = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) as u64;
            let frame_len = (FRAME_HEADER as u64 + item_len).next_multiple_of(ALIGN);
            if frame_len > MAX_FRAME || cursor.next + at as u64 + frame_len > cursor.fill {
                // Not a frame of this epoch: nothing after it can be trusted either.
                end_of_page = true;
                break;
            }
            if at as u64 + frame_len > buf.len() as u64 {
                if at == 0 {
                    // A frame larger than a chunk: read it whole.
                    read_into(self, buf, base + cursor.next, frame_len)?;
                    continue;
                }
                break;
            }
            let off = base + cursor.next + at as u64;
            let frame = &buf[at..at + frame_len as usize];
            if checked_len(frame).is_none() {
                end_of_page = true;
                break;
            }
            let item = at + FRAME_HEADER..at + FRAME_HEADER + item_len as usize;
            frames.push((Loc::new(off, frame_len, cursor.epoch), item));
            at += frame_len as usize;
        }
        let done = end_of_page || at == 0;
        Ok((frames, (!done).then_some(at as u64)))
    }

    /// Frees the compacted page: what is left in it (items that could not be written again)
    /// is dropped, as a wrap would, and counted lost.
    fn finish(&self, log: &mut Log, c: Cursor) {
        if c.page == log.head {
            return;
        }
        let p = &mut log.pages[c.page];
        if p.epoch != c.epoch || !p.written {
            return;
        }
        self.compact_lost.fetch_add(p.live_items, Ordering::Relaxed);
        p.empty();
        self.compacted_pages.fetch_add(1, Ordering::Relaxed);
        // Shards sweep their entries into the page, as after a drop.
        self.drops.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an item written again (`rescued`) or dropped (expired, flushed or unread).
    pub(crate) fn count_compacted(&self, rescued: bool) {
        let c = if rescued {
            &self.compact_rescues
        } else {
            &self.compact_skipped
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

fn read_into(fl: &Flash, buf: &mut Vec<u8>, off: u64, len: u64) -> io::Result<()> {
    buf.clear();
    buf.resize(len as usize, 0);
    fl.dev.read_at(buf, off)
}
