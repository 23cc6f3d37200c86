//! Keeping flash items across a warm restart: at a graceful stop the places of the live
//! items on flash are saved (offset and length, sorted, with the log's write position and
//! shape, checksummed); at the next start each frame is read back, checked (CRC and layout),
//! its key hashed with this process's hasher and put in its shard's flash index. The memory
//! items are restored after it: storing them drops the flash copies of their keys (memory's
//! are newer), and what they evict is written after the kept flash items, not over them.

use std::io::{self, Read, Write};

use crate::flash::ReadOutcome;
use crate::item;
use crate::Store;

const MAGIC: &[u8; 8] = b"MFFLIDX1";
/// magic, device size, page size, head page, head offset, count.
const HEADER: usize = 8 + 8 * 5;
const ENTRY: usize = 12;

/// What a restore of the flash index did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FlashRestore {
    /// Items back in the flash index.
    pub restored: u64,
    /// Frames that did not check out, had expired, or whose key memory holds.
    pub dropped: u64,
}

impl Store {
    /// Writes the index of the items on flash to `w` (the write buffer is written out first).
    /// Returns the number of items. Nothing is written without a flash tier.
    pub fn save_flash_index(&self, mut w: impl Write) -> io::Result<u64> {
        let Some(fl) = &self.g.flash else {
            return Ok(0);
        };
        fl.sync();
        let current = fl.current_epochs();
        let mut places: Vec<(u64, u64)> = Vec::new();
        for i in 0..self.shards.len() {
            let s = self.lock(i);
            places.extend(
                s.flash_index
                    .values()
                    .filter(|&&loc| current(loc))
                    .map(|loc| loc.place()),
            );
        }
        places.sort_unstable();
        let (size, page) = fl.shape();
        let (head, head_off) = fl.head();
        let mut buf = Vec::with_capacity(HEADER + places.len() * ENTRY + 4);
        buf.extend_from_slice(MAGIC);
        for v in [size, page, head, head_off, places.len() as u64] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        for &(off, len) in &places {
            buf.extend_from_slice(&off.to_le_bytes());
            buf.extend_from_slice(&(len as u32).to_le_bytes());
        }
        let crc = crc32fast::hash(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        w.write_all(&buf)?;
        Ok(places.len() as u64)
    }

    /// Reads back what `save_flash_index` wrote, for the same flash files, into an empty
    /// store; restore the memory items after it (see the module's comment).
    pub fn load_flash_index(&self, mut r: impl Read, now: u32) -> Result<FlashRestore, String> {
        let fl = self.g.flash.as_ref().ok_or("no flash tier")?;
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).map_err(|e| e.to_string())?;
        if buf.len() < HEADER + 4 || &buf[..8] != MAGIC {
            return Err("not a flash index".into());
        }
        let (body, crc) = buf.split_at(buf.len() - 4);
        if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("checksum mismatch".into());
        }
        let word = |i: usize| u64::from_le_bytes(body[8 + i * 8..16 + i * 8].try_into().unwrap());
        let (size, page, head, head_off, count) = (word(0), word(1), word(2), word(3), word(4));
        if (size, page) != fl.shape() {
            return Err(format!(
                "saved for {size} bytes of flash in {page}-byte pages, not {} in {}",
                fl.shape().0,
                fl.shape().1
            ));
        }
        if body.len() != HEADER + count as usize * ENTRY {
            return Err("truncated".into());
        }
        if !fl.resume_at(head, head_off) {
            return Err("write position outside the flash space".into());
        }
        let mut report = FlashRestore::default();
        let mut bytes = Vec::new();
        for e in body[HEADER..].chunks_exact(ENTRY) {
            let off = u64::from_le_bytes(e[..8].try_into().unwrap());
            let len = u64::from(u32::from_le_bytes(e[8..].try_into().unwrap()));
            let Some(loc) = fl.adopt(off, len) else {
                report.dropped += 1;
                continue;
            };
            let kept = fl.read(loc, &mut bytes) == ReadOutcome::Item
                && item::parse_checked(&bytes).is_some_and(|l| {
                    let key = &bytes[l.key..l.key + l.key_len];
                    let (h, si) = self.route(key);
                    self.g.gone(&bytes, &l, now).is_none()
                        && self.lock(si).adopt_flash(&self.g, h, key, loc)
                });
            if kept {
                report.restored += 1;
            } else {
                fl.forget(loc);
                report.dropped += 1;
            }
        }
        Ok(report)
    }
}
