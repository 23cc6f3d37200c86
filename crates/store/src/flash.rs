//! The flash tier: a log of pages on a device (files, see the server's `flash` module) that
//! items evicted from memory are appended to instead of being dropped. Memory keeps one
//! packed `Loc` per flash item in its shard (`FlashIndex`); the item's header, key and value
//! live on the device in a checksummed frame, so a read checks it is the right key and
//! intact data before anything is answered. Writes go through one write buffer flushed in
//! large sequential writes; when the log wraps, its oldest page is dropped and the items
//! still in it become misses (a page's epoch moves on, so every `Loc` into it goes stale at
//! once, without visiting them).
//!
//! The store has no I/O of its own: the device is a trait object the server hands in.

mod compact;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Where flash pages are stored: positioned reads and writes on a fixed-size space.
pub trait Device: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `off`.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Writes all of `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// `read_at` only if it needs no wait for the disk (the bytes are in the page cache):
    /// Ok(false) when it would wait. By default it always would.
    fn read_at_nowait(&self, _buf: &mut [u8], _off: u64) -> io::Result<bool> {
        Ok(false)
    }
    /// Bytes available.
    fn size(&self) -> u64;
}

/// Flash settings under memcached's `ext_*` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashConfig {
    /// `ext_page_size`: bytes per page, the unit dropped when the log wraps.
    pub page_size: u64,
    /// `ext_wbuf_size`: bytes gathered before one write to the device.
    pub wbuf_size: usize,
    /// `ext_item_size`: values shorter than this are evicted as without flash.
    pub item_size: usize,
    /// `ext_low_ttl`: items with less time to live than this (seconds) are not written.
    pub low_ttl: u32,
    /// `ext_recache_rate`: one get in this many served from flash also brings the item back
    /// into memory (0: never; other commands always do).
    pub recache_rate: u32,
    /// `ext_compact_under`: the oldest page is compacted once fewer pages than this are free
    /// ahead of the one being written (None: a quarter of the pages).
    pub compact_under: Option<u64>,
    /// `ext_max_frag` in thousandths: a page is compacted only while its live bytes are under
    /// this share of it; fuller pages are dropped whole when their turn comes.
    pub max_frag_permille: u32,
    /// `ext_drop_unread`: when fewer than `ext_drop_under` pages are free, a page too full to
    /// compact is compacted anyway, dropping the items not read since they were written.
    pub drop_unread: bool,
    /// `ext_drop_under` (None: 1% of the pages, at least 1, as memcached).
    pub drop_under: Option<u64>,
    /// `ext_item_age`: items not read or written for more than this many seconds (0: any)
    /// are written to flash by the background pass though memory is not full, if flash
    /// takes them when evicted. `NO_ITEM_AGE` (memcached's default): only eviction does.
    pub item_age: u32,
}

/// `ext_item_age` not given: memcached's UINT_MAX.
pub const NO_ITEM_AGE: u32 = u32::MAX;

impl FlashConfig {
    /// `ext_compact_under` for a log of `pages` pages.
    pub fn compact_under_of(&self, pages: u64) -> u64 {
        self.compact_under.unwrap_or(pages / 4).max(1)
    }

    /// `ext_drop_under` for a log of `pages` pages.
    pub fn drop_under_of(&self, pages: u64) -> u64 {
        self.drop_under.unwrap_or((pages / 100).max(1))
    }

    /// Whether a page due for compaction but too full to compact (live bytes past
    /// `ext_max_frag`) may have its unread items dropped instead, with `free` free pages
    /// ahead in a log of `pages` (as memcached: only under `ext_drop_unread`, and only once
    /// free pages fall under `ext_drop_under`).
    pub fn drops_unread(&self, free: u64, pages: u64) -> bool {
        self.drop_unread && free < self.drop_under_of(pages)
    }
}

impl Default for FlashConfig {
    fn default() -> FlashConfig {
        FlashConfig {
            page_size: 64 << 20,
            wbuf_size: 4 << 20,
            item_size: 512,
            low_ttl: 0,
            recache_rate: 2000,
            compact_under: None,
            max_frag_permille: 800,
            drop_unread: false,
            drop_under: None,
            item_age: NO_ITEM_AGE,
        }
    }
}

/// Frame header: item length (u32) and CRC-32 of length and item (u32).
const FRAME_HEADER: usize = 8;
/// Frames start on 8-byte boundaries, so a `Loc` counts in 8-byte units.
const ALIGN: u64 = 8;
const OFF_UNITS_BITS: u32 = 36;
const LEN_UNITS_BITS: u32 = 20;
/// The largest frame a `Loc` can describe (8 MiB).
const MAX_FRAME: u64 = ((1 << LEN_UNITS_BITS) - 1) * ALIGN;
/// Page epochs count modulo 128: the eighth bit of a `Loc`'s last byte is its read mark.
/// A stale `Loc` would need its page rewritten 128 times between two sweeps (a second) to
/// pass for current, and even then a read checks the frame's key.
const EPOCH_MASK: u8 = 0x7f;
const READ: u64 = 0x80;

/// A flash item's place: offset and length of its frame, the epoch of its page when it was
/// written, and whether it was read since (36 + 20 + 7 + 1 bits): 8 bytes of memory per
/// item plus the map's slot. Equality is of the place only, not the read mark.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc(u64);

impl PartialEq for Loc {
    fn eq(&self, other: &Loc) -> bool {
        self.0 & !READ == other.0 & !READ
    }
}

impl Eq for Loc {}

impl Loc {
    /// Offset and frame length, as a saved index keeps them.
    pub fn place(self) -> (u64, u64) {
        (self.off(), self.frame_len())
    }

    fn new(off: u64, frame_len: u64, epoch: u8) -> Loc {
        debug_assert!(
            off.is_multiple_of(ALIGN)
                && frame_len.is_multiple_of(ALIGN)
                && frame_len <= MAX_FRAME
                && epoch <= EPOCH_MASK
        );
        Loc((off / ALIGN) << (LEN_UNITS_BITS + 8)
            | (frame_len / ALIGN) << 8
            | u64::from(epoch & EPOCH_MASK))
    }
    /// Whether the item was read since it was written here (`ext_drop_unread`).
    pub(crate) fn was_read(self) -> bool {
        self.0 & READ != 0
    }
    pub(crate) fn mark_read(&mut self) {
        self.0 |= READ;
    }
    fn off(self) -> u64 {
        (self.0 >> (LEN_UNITS_BITS + 8)) * ALIGN
    }
    pub(crate) fn frame_len(self) -> u64 {
        ((self.0 >> 8) & ((1 << LEN_UNITS_BITS) - 1)) * ALIGN
    }
    fn epoch(self) -> u8 {
        self.0 as u8 & EPOCH_MASK
    }
}

/// The item length of a frame (at least its header) whose length and checksum check out.
fn checked_len(frame: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(frame[0..4].try_into().unwrap());
    let want = u32::from_le_bytes(frame[4..8].try_into().unwrap());
    let item = frame.get(FRAME_HEADER..FRAME_HEADER + len as usize)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len.to_le_bytes());
    crc.update(item);
    (crc.finalize() == want).then_some(len as usize)
}

/// Hashes are already random: the map uses them as they are.
#[derive(Default)]
pub(crate) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A shard's flash items: key hash to `Loc`.
pub(crate) type FlashIndex = HashMap<u64, Loc, BuildHasherDefault<PassThrough>>;

/// Memory a `FlashIndex` of this capacity takes: a slot (hash, `Loc`) and a control byte per
/// bucket, at most 7/8 of the buckets used.
pub(crate) fn index_bytes(capacity: usize) -> u64 {
    if capacity == 0 {
        0
    } else {
        ((capacity * 8 / 7).next_power_of_two() * 17) as u64
    }
}

#[derive(Clone, Copy, Default)]
struct Page {
    epoch: u8,
    live_items: u64,
    live_bytes: u64,
    /// Bytes of frames written in this epoch, from the page's start.
    fill: u64,
    written: bool,
}

impl Page {
    /// Empties the page for writing again: a new epoch makes every `Loc` into it stale.
    fn empty(&mut self) {
        *self = Page {
            epoch: self.epoch.wrapping_add(1) & EPOCH_MASK,
            ..Page::default()
        };
    }
}

struct Log {
    pages: Vec<Page>,
    /// The page being written.
    head: usize,
    /// Next frame's offset within the head page.
    head_off: u64,
    /// Frames not yet written to the device; they belong at `wbuf_start`.
    wbuf: Vec<u8>,
    wbuf_start: u64,
}

/// Flash-wide counters, memcached's `extstore_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Bytes per page.
    pub page_size: u64,
    /// Pages the device holds.
    pub pages: u64,
    /// Pages holding items.
    pub pages_used: u64,
    /// Pages not written since the start or since they were dropped.
    pub pages_free: u64,
    /// Pages opened for writing.
    pub page_allocs: u64,
    /// Pages dropped to make room, with the items still in them.
    pub page_evictions: u64,
    /// Items dropped with their pages.
    pub objects_evicted: u64,
    /// Frame bytes dropped with their pages.
    pub bytes_evicted: u64,
    /// Items written.
    pub objects_written: u64,
    /// Bytes written to the device.
    pub bytes_written: u64,
    /// Items read and checked.
    pub objects_read: u64,
    /// Item bytes read.
    pub bytes_read: u64,
    /// Items on flash that are still current.
    pub objects_used: u64,
    /// Frame bytes of those.
    pub bytes_used: u64,
    /// Bytes written to pages in use that no current item holds.
    pub bytes_fragmented: u64,
    /// Bytes of all pages.
    pub limit_maxbytes: u64,
    /// Bytes of the write buffer (allocated on the first write).
    pub write_buffer_bytes: u64,
    /// Items compaction wrote again.
    pub compact_rescues: u64,
    /// Items compaction dropped: expired, flushed, or unread (`ext_drop_unread`).
    pub compact_skipped: u64,
    /// Items still in a compacted page that could not be written again.
    pub compact_lost: u64,
    /// Pages freed by compaction.
    pub compacted_pages: u64,
    /// Writes stopped after a device error (disk full, file gone).
    pub failed: bool,
}

/// What a flash read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadOutcome {
    /// The frame's item bytes are in the buffer.
    Item,
    /// Its page was dropped (or writes failed): a miss.
    Gone,
    /// I/O error or a frame that does not check out: a miss, counted as bad.
    Bad,
}

pub(crate) struct Flash {
    dev: Box<dyn Device>,
    pub cfg: FlashConfig,
    log: Mutex<Log>,
    /// Set once a device write fails: nothing more is written and every flash item is gone.
    failed: AtomicBool,
    /// The first device error, for the server to log once.
    error: Mutex<Option<String>>,
    /// Pages dropped or compacted so far; a shard sweeps its stale `Loc`s when this moves.
    pub drops: AtomicU64,
    /// The page being compacted.
    compacting: Mutex<Option<compact::Cursor>>,
    compact_rescues: AtomicU64,
    compact_skipped: AtomicU64,
    compact_lost: AtomicU64,
    compacted_pages: AtomicU64,
    page_allocs: AtomicU64,
    page_evictions: AtomicU64,
    objects_evicted: AtomicU64,
    bytes_evicted: AtomicU64,
    objects_written: AtomicU64,
    bytes_written: AtomicU64,
    objects_read: AtomicU64,
    bytes_read: AtomicU64,
}

impl Flash {
    /// A log over `dev`: its size in whole pages (at least two).
    pub fn new(dev: Box<dyn Device>, cfg: FlashConfig) -> Result<Flash, String> {
        let npages = dev.size() / cfg.page_size.max(1);
        if npages < 2 {
            return Err(format!(
                "flash space of {} bytes holds fewer than two pages of {} bytes",
                dev.size(),
                cfg.page_size
            ));
        }
        if dev.size() > (1 << OFF_UNITS_BITS) * ALIGN {
            return Err(format!(
                "flash space of {} bytes is over the {} bytes one server can address",
                dev.size(),
                (1u64 << OFF_UNITS_BITS) * ALIGN
            ));
        }
        if cfg.wbuf_size == 0 || cfg.wbuf_size as u64 > cfg.page_size {
            return Err("ext_wbuf_size must be between 1 and ext_page_size".into());
        }
        let log = Log {
            pages: vec![Page::default(); npages as usize],
            head: 0,
            head_off: 0,
            wbuf: Vec::new(),
            wbuf_start: 0,
        };
        Ok(Flash {
            dev,
            cfg,
            log: Mutex::new(log),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            drops: AtomicU64::new(0),
            compacting: Mutex::new(None),
            compact_rescues: AtomicU64::new(0),
            compact_skipped: AtomicU64::new(0),
            compact_lost: AtomicU64::new(0),
            compacted_pages: AtomicU64::new(0),
            page_allocs: AtomicU64::new(1),
            page_evictions: AtomicU64::new(0),
            objects_evicted: AtomicU64::new(0),
            bytes_evicted: AtomicU64::new(0),
            objects_written: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            objects_read: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an item of this value length and remaining TTL (None: no expiry) is written
    /// to flash when evicted.
    pub fn wants(&self, value_len: usize, ttl: Option<u32>) -> bool {
        value_len >= self.cfg.item_size
            && ttl.is_none_or(|t| t >= self.cfg.low_ttl)
            && !self.failed.load(Ordering::Relaxed)
    }

    /// Appends `item` (header, key and value as stored in memory) in a frame. None when it
    /// cannot be written (too large for a frame, or the device failed).
    pub fn append(&self, item: &[u8]) -> Option<Loc> {
        let frame_len = (FRAME_HEADER + item.len()) as u64;
        let frame_len = frame_len.next_multiple_of(ALIGN);
        if frame_len > MAX_FRAME || frame_len > self.cfg.page_size {
            return None;
        }
        let mut log = self.lock();
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        if log.head_off + frame_len > self.cfg.page_size {
            self.flush(&mut log);
            self.next_page(&mut log);
        }
        if log.wbuf.len() as u64 + frame_len > self.cfg.wbuf_size as u64 {
            self.flush(&mut log);
        }
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        if log.wbuf.capacity() == 0 {
            log.wbuf.reserve_exact(self.cfg.wbuf_size);
        }
        let off = log.wbuf_start + log.wbuf.len() as u64;
        let len = item.len() as u32;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&len.to_le_bytes());
        crc.update(item);
        log.wbuf.extend_from_slice(&len.to_le_bytes());
        log.wbuf.extend_from_slice(&crc.finalize().to_le_bytes());
        log.wbuf.extend_from_slice(item);
        let padded = off + frame_len - log.wbuf_start;
        log.wbuf.resize(padded as usize, 0);
        log.head_off += frame_len;
        let head = log.head;
        let fill = log.head_off;
        let p = &mut log.pages[head];
        p.fill = fill;
        p.live_items += 1;
        p.live_bytes += frame_len;
        p.written = true;
        let epoch = p.epoch;
        self.objects_written.fetch_add(1, Ordering::Relaxed);
        Some(Loc::new(off, frame_len, epoch))
    }

    /// Writes the buffer to the device and starts the next one after it.
    fn flush(&self, log: &mut Log) {
        if log.wbuf.is_empty() {
            return;
        }
        match self.dev.write_at(&log.wbuf, log.wbuf_start) {
            Ok(()) => {
                self.bytes_written
                    .fetch_add(log.wbuf.len() as u64, Ordering::Relaxed);
            }
            Err(e) => self.fail(format!("writing {} bytes: {e}", log.wbuf.len())),
        }
        log.wbuf_start += log.wbuf.len() as u64;
        log.wbuf.clear();
    }

    /// Stops writes; every flash item is gone from now on. The first reason is kept.
    pub fn fail(&self, why: String) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
    }

    /// Moves writes to the next page, dropping what it still holds.
    fn next_page(&self, log: &mut Log) {
        let next = (log.head + 1) % log.pages.len();
        let p = &mut log.pages[next];
        if p.written {
            self.page_evictions.fetch_add(1, Ordering::Relaxed);
            self.objects_evicted
                .fetch_add(p.live_items, Ordering::Relaxed);
            self.bytes_evicted
                .fetch_add(p.live_bytes, Ordering::Relaxed);
            p.empty();
            self.drops.fetch_add(1, Ordering::Relaxed);
        }
        self.page_allocs.fetch_add(1, Ordering::Relaxed);
        log.head = next;
        log.head_off = 0;
        log.wbuf_start = next as u64 * self.cfg.page_size;
    }

    fn page_of(&self, loc: Loc) -> usize {
        (loc.off() / self.cfg.page_size) as usize
    }

    fn current(&self, log: &Log, loc: Loc) -> bool {
        !self.failed.load(Ordering::Relaxed)
            && log
                .pages
                .get(self.page_of(loc))
                .is_some_and(|p| p.epoch == loc.epoch())
    }

    /// A check of `Loc`s against the pages' epochs as they are now, for sweeping many.
    pub fn current_epochs(&self) -> impl Fn(Loc) -> bool {
        let log = self.lock();
        let epochs: Vec<u8> = log.pages.iter().map(|p| p.epoch).collect();
        let failed = self.failed.load(Ordering::Relaxed);
        let page = self.cfg.page_size;
        move |loc| !failed && epochs.get((loc.off() / page) as usize) == Some(&loc.epoch())
    }

    /// Whether `loc` still points at its item (its page was not dropped since).
    pub fn is_current(&self, loc: Loc) -> bool {
        self.current(&self.lock(), loc)
    }

    /// Reads the item at `loc` into `out` (resized to the item) and checks its frame.
    pub fn read(&self, loc: Loc, out: &mut Vec<u8>) -> ReadOutcome {
        self.read_with(loc, out, |buf, off| {
            self.dev.read_at(buf, off).map(|()| true)
        })
        .expect("a blocking read always reads")
    }

    /// `read` when it needs no wait for the disk; None when it would wait.
    pub fn read_cached(&self, loc: Loc, out: &mut Vec<u8>) -> Option<ReadOutcome> {
        self.read_with(loc, out, |buf, off| self.dev.read_at_nowait(buf, off))
    }

    fn read_with(
        &self,
        loc: Loc,
        out: &mut Vec<u8>,
        read_at: impl FnOnce(&mut [u8], u64) -> io::Result<bool>,
    ) -> Option<ReadOutcome> {
        let len = loc.frame_len() as usize;
        out.clear();
        out.resize(len, 0);
        {
            let log = self.lock();
            if !self.current(&log, loc) {
                return Some(ReadOutcome::Gone);
            }
            let start = loc.off();
            if start >= log.wbuf_start && start < log.wbuf_start + log.wbuf.len() as u64 {
                let at = (start - log.wbuf_start) as usize;
                match log.wbuf.get(at..at + len) {
                    Some(b) => out.copy_from_slice(b),
                    None => return Some(ReadOutcome::Bad),
                }
                return Some(self.check(out));
            }
        }
        match read_at(out, loc.off()) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(_) => return Some(ReadOutcome::Bad),
        }
        // The page may have been dropped and rewritten while the lock was not held.
        if !self.is_current(loc) {
            return Some(ReadOutcome::Gone);
        }
        Some(self.check(out))
    }

    fn check(&self, frame: &mut Vec<u8>) -> ReadOutcome {
        let Some(len) = checked_len(frame) else {
            return ReadOutcome::Bad;
        };
        frame.truncate(FRAME_HEADER + len);
        frame.drain(..FRAME_HEADER);
        self.objects_read.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
        ReadOutcome::Item
    }

    /// The item at `loc` was replaced, deleted or brought back to memory: its bytes are dead.
    pub fn forget(&self, loc: Loc) {
        let mut log = self.lock();
        if self.current(&log, loc) {
            let p = self.page_of(loc);
            let page = &mut log.pages[p];
            page.live_items = page.live_items.saturating_sub(1);
            page.live_bytes = page.live_bytes.saturating_sub(loc.frame_len());
        }
    }

    /// Writes out the write buffer (a graceful stop saves the index of what is on flash).
    pub fn sync(&self) {
        let mut log = self.lock();
        self.flush(&mut log);
    }

    /// Where writes go next: the head page and the offset in it.
    pub fn head(&self) -> (u64, u64) {
        let log = self.lock();
        (log.head as u64, log.head_off)
    }

    /// Resumes writing at `head`/`head_off` (a restart that keeps the flash items); false if
    /// that is not a place in this log.
    pub fn resume_at(&self, head: u64, head_off: u64) -> bool {
        let mut log = self.lock();
        if head >= log.pages.len() as u64
            || head_off > self.cfg.page_size
            || !head_off.is_multiple_of(ALIGN)
        {
            return false;
        }
        log.head = head as usize;
        log.head_off = head_off;
        log.wbuf_start = head * self.cfg.page_size + head_off;
        let p = &mut log.pages[head as usize];
        p.written = true;
        p.fill = head_off;
        true
    }

    /// Takes the frame at `off` of `frame_len` bytes, written before a restart, as live.
    pub fn adopt(&self, off: u64, frame_len: u64) -> Option<Loc> {
        let mut log = self.lock();
        let page = (off / self.cfg.page_size) as usize;
        if !off.is_multiple_of(ALIGN)
            || !frame_len.is_multiple_of(ALIGN)
            || frame_len == 0
            || frame_len > MAX_FRAME
            || page >= log.pages.len()
            || (off % self.cfg.page_size) + frame_len > self.cfg.page_size
        {
            return None;
        }
        let p = &mut log.pages[page];
        p.written = true;
        p.live_items += 1;
        p.live_bytes += frame_len;
        p.fill = p.fill.max(off % self.cfg.page_size + frame_len);
        Some(Loc::new(off, frame_len, p.epoch))
    }

    /// The device's size and the page size, which a saved index must match.
    pub fn shape(&self) -> (u64, u64) {
        (self.dev.size(), self.cfg.page_size)
    }

    /// Forgets every item: `flush_all`.
    pub fn clear(&self) {
        let mut log = self.lock();
        for p in &mut log.pages {
            p.live_items = 0;
            p.live_bytes = 0;
        }
    }

    /// The device error that stopped writes, once.
    pub fn take_error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Pages in the log (fixed at start).
    pub fn page_count(&self) -> u64 {
        self.lock().pages.len() as u64
    }

    pub fn stats(&self) -> FlashStats {
        let log = self.lock();
        let used = log.pages.iter().filter(|p| p.written).count() as u64;
        let objects_used: u64 = log.pages.iter().map(|p| p.live_items).sum();
        let bytes_used: u64 = log.pages.iter().map(|p| p.live_bytes).sum();
        let written_bytes: u64 = log
            .pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.written)
            .map(|(i, _)| {
                if i == log.head {
                    log.head_off
                } else {
                    self.cfg.page_size
                }
            })
            .sum();
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FlashStats {
            page_size: self.cfg.page_size,
            pages: log.pages.len() as u64,
            pages_used: used,
            pages_free: log.pages.len() as u64 - used,
            page_allocs: r(&self.page_allocs),
            page_evictions: r(&self.page_evictions),
            objects_evicted: r(&self.objects_evicted),
            bytes_evicted: r(&self.bytes_evicted),
            objects_written: r(&self.objects_written),
            bytes_written: r(&self.bytes_written),
            objects_read: r(&self.objects_read),
            bytes_read: r(&self.bytes_read),
            objects_used,
            bytes_used,
            bytes_fragmented: written_bytes.saturating_sub(bytes_used),
            limit_maxbytes: log.pages.len() as u64 * self.cfg.page_size,
            write_buffer_bytes: log.wbuf.capacity() as u64,
            compact_rescues: r(&self.compact_rescues),
            compact_skipped: r(&self.compact_skipped),
            compact_lost: r(&self.compact_lost),
            compacted_pages: r(&self.compacted_pages),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    /// A device in memory that tests can corrupt or make fail.
    #[derive(Clone)]
    pub struct MemDevice {
        pub bytes: Arc<Mutex<Vec<u8>>>,
        pub fail_writes: Arc<AtomicBool>,
    }

    impl MemDevice {
        pub fn new(size: usize) -> MemDevice {
            MemDevice {
                bytes: Arc::new(Mutex::new(vec![0; size])),
                fail_writes: Arc::new(AtomicBool::new(false)),
            }
        }
    }

    impl Device for MemDevice {
        fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
            let b = self.bytes.lock().unwrap();
            let off = off as usize;
            match b.get(off..off + buf.len()) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    Ok(())
                }
                None => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            }
        }
        fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
            if self.fail_writes.load(Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(28));
            }
            let mut b = self.bytes.lock().unwrap();
            let off = off as usize;
            b[off..off + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn size(&self) -> u64 {
            self.bytes.lock().unwrap().len() as u64
        }
    }

    fn cfg(page: u64, wbuf: usize) -> FlashConfig {
        FlashConfig {
            page_size: page,
            wbuf_size: wbuf,
            item_size: 1,
            low_ttl: 0,
            recache_rate: 0,
            ..FlashConfig::default()
        }
    }

    fn item(n: u8, len: usize) -> Vec<u8> {
        vec![n; len]
    }

    #[test]
    fn items_read_back_from_the_buffer_and_from_the_device() {
        let dev = MemDevice::new(4096);
        let f = Flash::new(Box::new(dev.clone()), cfg(1024, 256)).unwrap();
        let locs: Vec<Loc> = (0..6).map(|i| f.append(&item(i, 100)).unwrap()).collect();
        let mut out = Vec::new();
        for (i, &l) in locs.iter().enumerate() {
            assert_eq!(f.read(l, &mut out), ReadOutcome::Item);
            assert_eq!(out, item(i as u8, 100));
        }
        // Two frames of 112 bytes fit a 256-byte buffer: the first four went to the device.
        assert_eq!(f.stats().bytes_written, 448);
        // Without waiting: the buffer's frames, not the device's (this one cannot tell).
        assert_eq!(f.read_cached(locs[5], &mut out), Some(ReadOutcome::Item));
        assert_eq!(out, item(5, 100));
        assert_eq!(f.read_cached(locs[0], &mut out), None);
        assert_eq!(f.stats().objects_used, 6);
    }

    #[test]
    fn a_wrapped_log_drops_its_oldest_page() {
        let dev = MemDevice::new(2048);
        let f = Flash::new(Box::new(dev), cfg(1024, 1024)).unwrap();
        // 9 frames of 112 bytes fill a page; the 19th lands back in page 0.
        let locs: Vec<Loc> = (0..19).map(|i| f.append(&item(i, 100)).unwrap()).collect();
        let mut out = Vec::new();
        assert_eq!(f.read(locs[0], &mut out), ReadOutcome::Gone);
        assert_eq!(f.read(locs[9], &mut out), ReadOutcome::Item);
        assert_eq!(f.read(locs[18], &mut out), ReadOutcome::Item);
        assert_eq!(out, item(18, 100));
        let st = f.stats();
        assert_eq!((st.page_evictions, st.objects_evicted), (1, 9));
        assert_eq!(f.drops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn corrupt_bytes_and_failed_writes_never_return_data() {
        let dev = MemDevice::new(4096);
        let f = Flash::new(Box::new(dev.clone()), cfg(1024, 128)).unwrap();
        let a = f.append(&item(1, 100)).unwrap();
        let b = f.append(&item(2, 100)).unwrap();
        dev.bytes.lock().unwrap()[a.off() as usize + 50] ^= 1;
        let mut out = Vec::new();
        assert_eq!(f.read(a, &mut out), ReadOutcome::Bad);
        dev.fail_writes.store(true, Ordering::Relaxed);
        assert!(f.append(&item(3, 100)).is_none() || f.append(&item(4, 100)).is_none());
        assert_eq!(f.read(b, &mut out), ReadOutcome::Gone);
        assert!(f.append(&item(5, 100)).is_none());
        assert!(f.take_error().unwrap().contains("writing"));
        assert!(f.stats().failed);
    }

    #[test]
    fn locs_pack_and_unpack() {
        let mut l = Loc::new((123 * 8) << 20, 4096 + 8, 100);
        assert_eq!(
            (l.off(), l.frame_len(), l.epoch(), l.was_read()),
            ((123 * 8) << 20, 4104, 100, false)
        );
        let unread = l;
        l.mark_read();
        assert_eq!(
            (l.off(), l.frame_len(), l.epoch(), l.was_read()),
            ((123 * 8) << 20, 4104, 100, true)
        );
        assert_eq!(l, unread);
        // The mark costs no memory: an index entry is still 8 bytes.
        assert_eq!(std::mem::size_of::<Loc>(), 8);
        // Epochs wrap at 128, as pages' do.
        let mut p = Page {
            epoch: EPOCH_MASK,
            ..Page::default()
        };
        p.empty();
        assert_eq!(p.epoch, 0);
        assert!(Flash::new(Box::new(MemDevice::new(1024)), cfg(1024, 128)).is_err());
    }
}
