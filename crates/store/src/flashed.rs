//! A shard's items on flash: eviction writes an item out instead of dropping it, and a
//! lookup that misses memory but finds the key's hash in the shard's `FlashIndex` reads the
//! item back and writes it into memory again before the command runs, so every command sees
//! flash items as it sees memory ones. Any new item for a key forgets its flash copy
//! (`Shard::link`), so a flash copy is never older than what memory says.

use crate::flash::{self, Loc, ReadOutcome};

/// Where a get found its key on flash (`Store::get_or_locate`): to be read off the worker
/// thread (`Store::read_located`), with no lock held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashLoc(pub(crate) Loc);

impl FlashLoc {
    /// Bytes the read takes (the item's frame).
    pub fn read_bytes(self) -> usize {
        self.0.frame_len() as usize
    }
}

/// A flash read made without the shard lock (`Store::read_located`, or before a command
/// brings the item back), for `Store::get_prefetched` or `Shard::bring_back` to use once
/// locked.
pub struct Prefetched {
    pub(crate) loc: Loc,
    pub(crate) read: ReadOutcome,
    pub(crate) bytes: Vec<u8>,
}

impl Prefetched {
    /// Bytes held.
    pub fn held(&self) -> usize {
        self.bytes.capacity()
    }
}

use crate::item::{self, Header, FETCHED, IDLE_CAP, STALE, TOKEN_SENT};
use crate::segments::Queue;
use crate::shard::{loc_of, Found, Global, NeedMem, Shard, Unlink};

/// Whether an item last read or written at `time` is past `ext_item_age` at `now`: idle
/// more than `age` seconds, as memcached's flusher tests it, or any item when `age` is 0.
/// Idle times read exactly only up to `IDLE_CAP`, so a longer age acts as that.
pub(crate) fn idle_past_age(time: u32, now: u32, age: u32) -> bool {
    age == 0 || now.saturating_sub(time) > age.min(IDLE_CAP)
}

impl Shard {
    /// Writes evicted item `f` to flash when the tier takes it; true if it did (the item is
    /// then out of memory, not counted as evicted).
    pub(crate) fn evict_to_flash(&mut self, g: &Global, f: &Found, h: u64) -> bool {
        let Some(fl) = g.flash.as_ref() else {
            return false;
        };
        let buf = self.buf(f.seg, f.off);
        let exptime = item::exptime(buf, &f.l);
        let ttl = (exptime != 0).then(|| exptime.saturating_sub(self.now));
        if !fl.wants(f.l.value_len, ttl) {
            return false;
        }
        let Some(loc) = fl.append(&buf[..f.l.total()]) else {
            return false;
        };
        self.flash_link(g, h, loc);
        self.index.remove(f.slot);
        self.mark_dead(f.seg, f.off, &f.l, Unlink::ToFlash);
        true
    }

    /// `ext_item_age`: whether the live item at `seg`/`off` is idle past `age` at `now` and
    /// one that flash takes (value size, `ext_low_ttl`).
    pub(crate) fn idle_for_flash(
        &self,
        g: &Global,
        seg: u32,
        off: usize,
        l: &item::Layout,
        now: u32,
        age: u32,
    ) -> bool {
        let Some(fl) = g.flash.as_ref() else {
            return false;
        };
        let buf = self.buf(seg, off);
        if !idle_past_age(item::time(buf, l, now), now, age) {
            return false;
        }
        let exptime = item::exptime(buf, l);
        fl.wants(
            l.value_len,
            (exptime != 0).then(|| exptime.saturating_sub(now)),
        )
    }

    /// Writes the live item at `seg`/`off` to flash ahead of eviction (`ext_item_age`), by
    /// the road evicted items take; false if flash did not take it.
    pub(crate) fn age_to_flash(
        &mut self,
        g: &Global,
        seg: u32,
        off: usize,
        l: item::Layout,
    ) -> bool {
        let buf = self.buf(seg, off);
        let h = g.hash(&buf[l.key..l.key + l.key_len]);
        let Some(slot) = self.index.find_loc(h, loc_of(seg, off)) else {
            return false;
        };
        self.evict_to_flash(g, &Found { slot, seg, off, l }, h)
    }

    /// Takes a flash item restored after a restart into the index, unless memory or the
    /// index already has its key.
    pub(crate) fn adopt_flash(&mut self, g: &Global, h: u64, key: &[u8], loc: Loc) -> bool {
        if self.flash_index.contains_key(&h) || self.find(h, key).is_some() {
            return false;
        }
        self.flash_link(g, h, loc);
        true
    }

    pub(crate) fn flash_link(&mut self, g: &Global, h: u64, loc: Loc) {
        match self.flash_index.insert(h, loc) {
            Some(old) => g.flash.as_ref().expect("flash on").forget(old),
            None => self.stats.flash_items += 1,
        }
        self.charge_flash_index(g);
    }

    /// Drops the flash copy of the key with hash `h`, if any (a newer item replaces it, or
    /// it was found bad or gone). `forget`: its bytes are counted dead on the page.
    #[inline]
    pub(crate) fn flash_unlink(&mut self, g: &Global, h: u64, forget: bool) {
        // Every link comes here: without flash items, one branch.
        if !self.flash_index.is_empty() {
            self.flash_unlink_entry(g, h, forget);
        }
    }

    #[cold]
    #[inline(never)]
    fn flash_unlink_entry(&mut self, g: &Global, h: u64, forget: bool) {
        if let Some(loc) = self.flash_index.remove(&h) {
            self.stats.flash_items -= 1;
            if forget {
                if let Some(fl) = g.flash.as_ref() {
                    fl.forget(loc);
                }
            }
        }
    }

    /// Charges the flash index's memory to the limit as it grows (the next allocation
    /// evicts back under it).
    fn charge_flash_index(&mut self, g: &Global) {
        let want = flash::index_bytes(self.flash_index.capacity());
        if want > self.flash_index_charged {
            g.mem.charge_over(want - self.flash_index_charged);
            self.flash_index_charged = want;
        }
    }

    /// Brings the key's item back from flash into memory when memory does not have it, so
    /// that the command about to run finds it. `pre` is the read made before the shard was
    /// locked (`prefetch`); read again here only if the item moved since. A copy that is gone,
    /// bad, expired or flushed is dropped (a miss). Err only when memory must first be found
    /// elsewhere.
    pub(crate) fn bring_back(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        now: u32,
        pre: Option<&Prefetched>,
    ) -> Result<(), NeedMem> {
        let Some(fl) = g.flash.as_ref() else {
            return Ok(());
        };
        let Some(&loc) = self.flash_index.get(&h) else {
            return Ok(());
        };
        if self.find(h, key).is_some() {
            return Ok(());
        }
        match pre.filter(|p| p.loc == loc) {
            Some(p) => self.recache(g, h, key, now, p),
            None => {
                let mut bytes = Vec::new();
                let read = fl.read(loc, &mut bytes);
                self.recache(g, h, key, now, &Prefetched { loc, read, bytes })
            }
        }
    }

    /// Writes the item read from flash in `p` back into memory, if its place is still the
    /// key's flash copy and memory does not hold the key (the read may have been made without
    /// the shard's lock).
    pub(crate) fn recache(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        now: u32,
        p: &Prefetched,
    ) -> Result<(), NeedMem> {
        if self.flash_loc(h) != Some(p.loc) || self.find(h, key).is_some() {
            return Ok(());
        }
        let Some(l) = self.flash_checked(g, h, key, now, p) else {
            return Ok(());
        };
        let bytes = &p.bytes;
        let hdr = Header {
            bits: l.bits & (FETCHED | STALE | TOKEN_SENT),
            cas: item::cas(bytes, &l),
            exptime: item::exptime(bytes, &l),
            time: item::time(bytes, &l, now),
            flags: item::flags(bytes, &l),
            force_exptime: g.force_exptime(),
        };
        let size = hdr.encoded_len(key.len(), l.value_len);
        let seg = self.alloc(g, size, now, Queue::Main)?;
        let value = &bytes[l.value..l.value + l.value_len];
        let (off, _) = self.write(seg, &hdr, key, l.value_len, |v| v.copy_from_slice(value));
        // Linking forgets the flash copy.
        self.link(g, h, None, seg, off);
        self.stats.recache_from_extstore += 1;
        Ok(())
    }

    /// The flash place of the key with hash `h`, when memory does not hold the key.
    pub(crate) fn flash_loc(&self, h: u64) -> Option<Loc> {
        self.flash_index.get(&h).copied()
    }

    /// Whether this get from flash should also bring the item back (`ext_recache_rate`).
    pub(crate) fn recache_due(&mut self, g: &Global) -> bool {
        let rate = g.flash.as_ref().map_or(0, |f| f.cfg.recache_rate);
        if rate == 0 {
            return false;
        }
        self.flash_reads += 1;
        if self.flash_reads >= rate {
            self.flash_reads = 0;
            return true;
        }
        false
    }

    /// Checks what the flash read `p` for `key` gave: the item's layout in its bytes if it is
    /// that key's live item, which is then marked read. Anything else is a miss; a copy that
    /// is gone, bad, expired or flushed is dropped from the index (if it still points there)
    /// and counted.
    pub(crate) fn flash_checked(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        now: u32,
        p: &Prefetched,
    ) -> Option<item::Layout> {
        let bytes = &p.bytes;
        // Looked up only on a miss: a hit marks the entry through one lookup below.
        let still = |s: &Self| s.flash_loc(h) == Some(p.loc);
        let l = match p.read {
            ReadOutcome::Item => item::parse_checked(bytes),
            ReadOutcome::Gone => {
                self.stats.miss_from_extstore += 1;
                if still(self) {
                    self.flash_unlink(g, h, false);
                }
                return None;
            }
            ReadOutcome::Bad => None,
        };
        let Some(l) = l else {
            self.stats.badcrc_from_extstore += 1;
            if still(self) {
                self.flash_unlink(g, h, true);
            }
            return None;
        };
        if &bytes[l.key..l.key + l.key_len] != key {
            // Another key with the same 64-bit hash: this one is not on flash.
            return None;
        }
        if let Some(why) = g.gone(bytes, &l, now) {
            match why {
                Unlink::Flushed => self.stats.get_flushed += 1,
                _ => self.stats.get_expired += 1,
            }
            if still(self) {
                self.flash_unlink(g, h, true);
            }
            return None;
        }
        self.stats.get_extstore += 1;
        // Every read of a flash item comes here: `ext_drop_unread` keeps it.
        if let Some(loc) = self.flash_index.get_mut(&h).filter(|loc| **loc == p.loc) {
            loc.mark_read();
        }
        Some(l)
    }

    /// Drops flash entries whose page was dropped since the last sweep (once a second).
    pub(crate) fn sweep_flash(&mut self, g: &Global) {
        let Some(fl) = g.flash.as_ref() else {
            return;
        };
        let drops = fl.drops.load(std::sync::atomic::Ordering::Relaxed);
        if drops == self.flash_drops_seen || self.flash_index.is_empty() {
            self.flash_drops_seen = drops;
            return;
        }
        self.flash_drops_seen = drops;
        let before = self.flash_index.len();
        let current = fl.current_epochs();
        self.flash_index.retain(|_, loc| current(*loc));
        self.stats.flash_items -= (before - self.flash_index.len()) as u64;
    }

    /// flush_all: every flash copy is dropped.
    pub(crate) fn clear_flash(&mut self) {
        self.stats.flash_items = 0;
        self.flash_index.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_past_age_is_more_than_the_age_and_at_most_the_readable_idle_time() {
        let t = 1_700_000_000;
        assert!(!idle_past_age(t, t + 60, 60));
        assert!(idle_past_age(t, t + 61, 60));
        assert!(idle_past_age(t, t, 0));
        // Idle times read exactly up to 12 hours: a longer age acts as 12 hours.
        assert!(!idle_past_age(t, t + IDLE_CAP, 86_400));
        assert!(idle_past_age(t, t + IDLE_CAP + 1, 86_400));
        assert!(idle_past_age(t, t + IDLE_CAP + 1, u32::MAX - 1));
    }
}
