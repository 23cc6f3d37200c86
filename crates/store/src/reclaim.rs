//! Background maintenance of one shard (`Store::reclaim`, about once a second): take back
//! expired and flushed items without waiting for a read, free fully dead segments, move the
//! live rest out of mostly dead ones, give memory back after the limit was lowered, and
//! (`ext_item_age`) write idle items to flash ahead of eviction.

use crate::eviction::Rest;
use crate::exptime::expired;
use crate::flash::NO_ITEM_AGE;
use crate::item::{self, DEAD};
use crate::shard::{loc_of, Found, Global, Shard, Unlink};

/// Index buckets a call moves of a resize under way (~0.1 ms of work).
const RECLAIM_INDEX_MOVE: usize = 64;
/// Items a call looks at while `ext_item_age` is set, so that an idle item is found within
/// seconds of passing the age, not the half hour expiry can wait.
const AGE_VISITS: usize = 8192;
/// Item bytes a call writes to flash for `ext_item_age` (one item more at most): the copy
/// into the write buffer, and its writes to the device, happen under the shard's lock.
const AGE_FLASH_BYTES: usize = 1 << 20;

impl Shard {
    /// Bounded background work: drop expired/flushed items, free fully dead segments, compact
    /// mostly-dead ones, get back under a lowered limit. Returns items reclaimed.
    pub fn reclaim(&mut self, g: &Global, now: u32, budget: usize) -> usize {
        self.now = now;
        // An index resize left unfinished (writes stopped) ends within a few calls.
        self.step_index_move(g, RECLAIM_INDEX_MOVE);
        self.sweep_flash(g);
        // At one call a second, every item is visited within ~2,048 s (more if many are dead
        // bytes): well within what an item's 16-bit time stamp needs (`item::cap_idle`).
        let mut budget = budget.max((self.stats.curr_items / 2048) as usize);
        let age = g.flash.as_ref().map_or(NO_ITEM_AGE, |f| f.cfg.item_age);
        if age != NO_ITEM_AGE {
            budget = budget.max(AGE_VISITS);
        }
        let mut to_flash = AGE_FLASH_BYTES;
        let before = self.stats.reclaimed;
        // A lowered limit: every shard gives back a few segments per call.
        while g.mem.over_limit() && g.mem.drop_spare() {}
        let mut evicted = 0;
        while g.mem.over_limit() && evicted < 16 && self.evict_oldest(g) {
            evicted += 1;
        }
        let mut visited = 0;
        let nsegs = self.segs.table_len();
        let mut segs_seen = 0;
        // Compaction copies live items under this shard's lock: bound the bytes per call so a
        // pass over large items never stalls the workers waiting for the lock.
        let mut move_budget = g.seg_size;
        while visited < budget && segs_seen <= nsegs && nsegs > 0 {
            if self.reclaim_seg >= nsegs {
                self.reclaim_seg = 0;
                self.reclaim_off = 0;
            }
            let seg = self.reclaim_seg as u32;
            let s = &self.segs[seg];
            if s.layout != self.reclaim_layout {
                // Items moved since the cursor was saved: walk this segment from its start.
                self.reclaim_layout = s.layout;
                self.reclaim_off = 0;
            }
            if !s.active || self.reclaim_off >= s.used {
                // A segment the drain walked into is dead with evictions made ahead of its
                // recycle: freeing it here would hand a full cache room to stop evicting in.
                let compactable = s.active
                    && !self.segs.is_head(seg)
                    && !s.large()
                    && s.used > 0
                    && !(g.full() && self.drained(seg));
                self.reclaim_seg += 1;
                self.reclaim_off = 0;
                segs_seen += 1;
                if compactable && move_budget > 0 {
                    move_budget = move_budget.saturating_sub(self.maybe_compact(g, seg));
                }
                continue;
            }
            let off = self.reclaim_off;
            let l = item::parse(self.segs.buf(seg, off));
            self.reclaim_off += l.total();
            visited += 1;
            if l.bits & DEAD != 0 {
                continue;
            }
            let buf = self.segs.buf(seg, off);
            let why = if g.is_flushed(buf, &l, now) {
                Unlink::Flushed
            } else if expired(item::exptime(buf, &l), now) {
                Unlink::Expired
            } else {
                if age != NO_ITEM_AGE && self.idle_for_flash(g, seg, off, &l, now, age) {
                    if to_flash == 0 {
                        // This call's share is written: the next one goes on from here.
                        self.reclaim_off = off;
                        break;
                    }
                    if self.age_to_flash(g, seg, off, l) {
                        to_flash = to_flash.saturating_sub(l.total());
                        if !self.segs[seg].active {
                            self.reclaim_seg += 1;
                            self.reclaim_off = 0;
                        }
                        continue;
                    }
                }
                // Live: keep its idle time readable (see `item::cap_idle`).
                let buf = self.segs.buf(seg, off);
                if item::idle_past_cap(buf, &l, now) {
                    item::cap_idle(self.segs.header_mut(seg, off, &l), &l, now);
                }
                continue;
            };
            let h = g.hash(&buf[l.key..l.key + l.key_len]);
            if let Some(slot) = self.index.find_loc(h, loc_of(seg, off)) {
                self.stats.reclaimed += 1;
                self.unlink(Found { slot, seg, off, l }, why);
                if !self.segs[seg].active {
                    self.reclaim_seg += 1;
                    self.reclaim_off = 0;
                }
            }
        }
        self.settle(g);
        (self.stats.reclaimed - before) as usize
    }

    /// A sealed segment that is at least 3/4 dead bytes has its live items moved to the head
    /// of its queue when that has room, so the segment's memory goes back to the pool.
    /// Returns the bytes moved.
    fn maybe_compact(&mut self, g: &Global, seg: u32) -> usize {
        let s = &self.segs[seg];
        if (s.used - s.live_bytes) * 4 < s.used * 3 {
            return 0;
        }
        let Some(head) = self.segs.head_of(s.queue) else {
            return 0;
        };
        let hs = &self.segs[head];
        let live = s.live_bytes;
        if hs.buf.len() - hs.used < live {
            return 0;
        }
        self.move_to_head(g, seg, self.segs[seg].queue, false, Rest::Evict);
        live
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;

    #[test]
    fn flush_immediate_and_delayed() {
        let s = store_mb(8);
        for i in 0..100 {
            set(&s, &format!("k{i}"), "v", T0);
        }
        s.flush_all(0, T0);
        assert_eq!(s.len(), 0);
        assert_eq!(val(&s, "k1", T0), None);
        set(&s, "after", "v", T0);
        assert_eq!(val(&s, "after", T0).as_deref(), Some("v"));

        // Observed on memcached 1.6.18: `flush_all 2` at T, then at T+1 both old items and items
        // set at T+1 are gone; an item set at T+2 survives.
        let s = store_mb(8);
        set(&s, "a", "x", T0);
        s.flush_all(2, T0);
        set(&s, "b", "y", T0);
        assert!(val(&s, "a", T0).is_some() && val(&s, "b", T0).is_some());
        set(&s, "c", "z", T0 + 1);
        assert!(val(&s, "a", T0 + 1).is_none());
        assert!(val(&s, "b", T0 + 1).is_none());
        assert!(val(&s, "c", T0 + 1).is_none());
        set(&s, "d", "w", T0 + 2);
        assert!(val(&s, "d", T0 + 3).is_some());
        assert_eq!(s.stats().counters.get_flushed, 3);

        // An absolute time in the past makes oldest_live 0: memcached then flushes nothing.
        let s = store_mb(8);
        set(&s, "a", "x", T0);
        s.flush_all(START as i64 - 5, T0);
        assert!(val(&s, "a", T0 + 5).is_some());
    }

    #[test]
    fn delayed_flush_is_reclaimed_in_background() {
        let s = store_mb(8);
        for i in 0..500 {
            set(&s, &format!("k{i}"), "v", T0);
        }
        s.flush_all(10, T0);
        assert_eq!(s.reclaim(T0 + 5, 10_000), 0);
        assert_eq!(s.reclaim(T0 + 10, 10_000), 500);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn expired_items_reclaimed_without_reads() {
        let s = store_mb(8);
        let v = vec![b'v'; 500];
        for i in 0..5_000 {
            s.store(
                StoreRequest::new(StoreMode::Set, format!("t{i}").as_bytes(), &v).exptime(T0 + 10),
                T0,
            );
        }
        let before = s.stats();
        assert_eq!(s.reclaim(T0 + 5, 100_000), 0);
        let mut total = 0;
        for _ in 0..10 {
            total += s.reclaim(T0 + 10, 1_000);
        }
        assert!(total > 0);
        while !s.is_empty() {
            s.reclaim(T0 + 11, 1_000);
        }
        let after = s.stats();
        assert_eq!(after.counters.curr_items, 0);
        assert_eq!(after.counters.expired_unfetched, 5_000);
        assert!(after.mem_used < before.mem_used, "segments freed");
    }

    #[test]
    fn overwrites_leave_dead_bytes_that_get_compacted() {
        let s = store_mb(8);
        let v = vec![b'x'; 200];
        for round in 0..5 {
            for i in 0..20_000 {
                s.store(
                    StoreRequest::new(StoreMode::Set, format!("k{i}").as_bytes(), &v),
                    T0 + round,
                );
            }
        }
        let st = s.stats();
        assert_eq!(st.counters.curr_items, 20_000);
        assert!(st.live_bytes <= st.written_bytes);
        for i in (0..20_000).step_by(997) {
            assert!(val(&s, &format!("k{i}"), T0 + 5).is_some());
        }
        // Delete most keys: reclaim compacts or frees the mostly dead segments.
        for i in 0..20_000 {
            if i % 10 != 0 {
                s.delete(format!("k{i}").as_bytes(), T0 + 5, &DeleteOpts::default());
            }
        }
        let used = s.mem_used();
        for _ in 0..50 {
            s.reclaim(T0 + 5, 100_000);
        }
        assert!(s.mem_used() < used);
        for i in (0..20_000).step_by(10) {
            assert!(val(&s, &format!("k{i}"), T0 + 5).is_some(), "k{i}");
        }
    }

    #[test]
    fn set_mem_limit_shrinks_via_reclaim() {
        let s = store_mb(8);
        let v = vec![b'x'; 1000];
        for i in 0..20_000 {
            s.store(
                StoreRequest::new(StoreMode::Set, format!("k{i}").as_bytes(), &v),
                T0,
            );
        }
        s.set_mem_limit(4 << 20);
        for _ in 0..10 {
            s.reclaim(T0, 10);
        }
        assert!(s.mem_used() <= 4 << 20);
        assert_eq!(
            s.store(StoreRequest::new(StoreMode::Set, b"more", &v), T0)
                .result,
            StoreResult::Stored
        );
    }
}
