//! Finding memory for a write, under the shard lock: room in the index and in the head
//! segment of the item's queue, or a buffer of its own for a large item. Under the limit a
//! shard takes fresh memory or rewrites a mostly dead segment; at the limit it evicts from
//! its small queue (new items; those read meanwhile move to the main queue) or from its main
//! queue (segment-level second chance for items read since their last pass), keeping the
//! small queue at about a tenth of the shard (see docs/storage.md, "Eviction").

use crate::index;
use crate::item::{self, ACCESSED, DEAD};
use crate::segments::{Queue, LARGE_OVERHEAD};
use crate::shard::{grown_past_reservation, loc_of, Found, Global, NeedMem, Shard, Unlink};

/// How many FIFO-oldest segments eviction looks at for one that is mostly dead bytes.
const VICTIM_WINDOW: usize = 4;
/// Most live items a mostly dead segment may hold to be rewritten instead of growing memory.
const RECYCLE_MAX_ITEMS: usize = 64;
/// What `move_to_head` does with items that do not fit in the head.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rest {
    Evict,
    /// The main queue recycles its oldest segment to make room, then evicts what still does
    /// not fit.
    RecycleMain,
    /// They stay where they are.
    Stay,
}

/// Buckets of an index being resized moved per allocation: ~2 µs of work each with 100-byte
/// items (each entry's key is read back to rehash it).
const INDEX_MOVE_STEP: usize = 2;

/// The small queue's aim: one segment in this many of the shard's (at least one).
const SMALL_SHARE: usize = 8;

impl Shard {
    /// The queue a new item for a key starts in: a rewrite of an item that was read, or that
    /// is in the main queue already, goes to the main queue; anything else to the small one.
    pub fn queue_for(&self, old: Option<&Found>) -> Queue {
        match old {
            Some(f) if f.l.bits & ACCESSED != 0 || self.segs[f.seg].queue == Queue::Main => {
                Queue::Main
            }
            _ => Queue::Small,
        }
    }

    /// `queue_for` a key of hash `h` being stored: a new key that the ghost remembers
    /// (evicted from the small queue unread, lately) goes to the main queue.
    pub fn queue_for_store(&mut self, h: u64, old: Option<&Found>) -> Queue {
        if old.is_none() && self.ghost.take(h) {
            return Queue::Main;
        }
        self.queue_for(old)
    }

    /// Room for an item of `size` bytes in queue `q`. Returns the segment to write it in.
    pub fn alloc(&mut self, g: &Global, size: usize, now: u32, q: Queue) -> Result<u32, NeedMem> {
        self.ensure_index_room(g)?;
        if size > g.large_threshold {
            self.reserve_large(g, size as u64 + LARGE_OVERHEAD)?;
            return Ok(self
                .segs
                .add(vec![0u8; size].into_boxed_slice(), true, Queue::Main));
        }
        self.make_room(g, size, now, q)?;
        Ok(self.segs.head_of(q).expect("make_room leaves a head"))
    }

    /// Makes the buffer in `owned` (taken only on success) a large segment of its own, for
    /// an item whose value was received straight into it (see `Value::Received`).
    pub fn adopt_large(
        &mut self,
        g: &Global,
        owned: &mut Option<Box<[u8]>>,
        still_wanted: impl FnOnce(&mut Shard, &Global) -> bool,
    ) -> Result<u32, NeedMem> {
        self.ensure_index_room(g)?;
        let len = owned.as_ref().map_or(0, |b| b.len());
        let charge = len as u64 + LARGE_OVERHEAD;
        self.reserve_large(g, charge)?;
        // Making room may have evicted the item the command needs (to flash, say): the
        // buffer stays the caller's, for its retry once memory is found elsewhere.
        if !still_wanted(self, g) {
            g.mem.release(charge);
            return Err(NeedMem);
        }
        let buf = owned.take().expect("adopt_large needs a buffer");
        Ok(self.segs.add(buf, true, Queue::Main))
    }

    fn reserve_large(&mut self, g: &Global, charge: u64) -> Result<(), NeedMem> {
        let mut tries = 0;
        while !g.mem.try_reserve(charge) {
            if g.mem.drop_spare() {
                continue;
            }
            tries += 1;
            if tries > 100_000 || !self.evict_oldest(g) {
                return Err(NeedMem);
            }
        }
        Ok(())
    }

    /// Grows the index before it gets too full to insert cheaply, taking the memory from
    /// this shard's oldest segments if needed.
    fn ensure_index_room(&mut self, g: &Global) -> Result<(), NeedMem> {
        self.step_index_move(g, INDEX_MOVE_STEP);
        if self.index.has_room_for_one() {
            return Ok(());
        }
        if self.grow_index_within_reservation(g) {
            return Ok(());
        }
        let n = grown_past_reservation(self.index.nbuckets());
        let delta = (index::bytes_for(n) - self.index.bytes()) as u64;
        loop {
            if g.mem.try_reserve(delta) {
                break;
            }
            if g.mem.drop_spare() {
                continue;
            }
            if !self.evict_oldest(g) {
                return Err(NeedMem);
            }
            if self.index.has_room_for_one() {
                return Ok(());
            }
        }
        self.grow_index(g, delta);
        Ok(())
    }

    /// Frees memory or space for a normal item of `size` bytes in the head segment of `q`.
    fn make_room(&mut self, g: &Global, size: usize, now: u32, q: Queue) -> Result<(), NeedMem> {
        for _ in 0..64 {
            if let Some(h) = self.segs.head_of(q) {
                let s = &self.segs[h];
                if s.buf.len() - s.used >= size {
                    return Ok(());
                }
            }
            let spare = if g.mem.over_limit() {
                None
            } else {
                g.mem.take_spare()
            };
            if let Some(buf) = spare {
                let id = self.segs.add(buf, false, q);
                self.segs.set_head(q, id);
                continue;
            }
            if !g.mem.over_limit() && self.recycle_dead(g, now, q) {
                continue;
            }
            if !g.mem.over_limit() && g.mem.try_reserve(g.seg_size as u64) {
                let id = self
                    .segs
                    .add(vec![0u8; g.seg_size].into_boxed_slice(), false, q);
                self.segs.set_head(q, id);
                continue;
            }
            if g.mem.over_limit() {
                if !self.evict_oldest(g) {
                    return Err(NeedMem);
                }
                continue;
            }
            if !g.evictions || !self.recycle(g, now, q, size) {
                return Err(NeedMem);
            }
        }
        Err(NeedMem)
    }

    /// Segments the small queue aims at.
    pub(crate) fn small_target(&self) -> usize {
        ((self.segs.queued(Queue::Small) + self.segs.queued(Queue::Main)) / SMALL_SHARE).max(1)
    }

    /// Drops every item of the oldest segment (of the small queue while it is over its aim,
    /// else of the main queue) and gives its memory back; items read since their last pass
    /// move to the main queue's head while it has room.
    pub fn evict_oldest(&mut self, g: &Global) -> bool {
        if !g.evictions {
            return false;
        }
        let q = if self.segs.queued(Queue::Small) > self.small_target()
            || self.segs.oldest(Queue::Main).is_none()
        {
            Queue::Small
        } else {
            Queue::Main
        };
        let Some(seg) = self.segs.oldest(q) else {
            return false;
        };
        self.segs.dequeue_oldest(q);
        self.evict_segment(g, seg);
        true
    }

    /// Empties and frees `seg` (already out of its FIFO), giving recently read items a second
    /// chance in the main queue's head while it has room. A small-queue segment whose read
    /// items do not all fit there keeps the rest and becomes the main head instead (the
    /// caller's next eviction then frees memory).
    fn evict_segment(&mut self, g: &Global, seg: u32) {
        let large = self.segs[seg].large();
        let small = self.segs[seg].queue == Queue::Small;
        let rest = if small { Rest::Stay } else { Rest::Evict };
        match self.segs.head {
            Some(head) if head != seg && !large => {
                if !self.move_to_head(g, seg, Queue::Main, true, rest) {
                    let now = self.now;
                    self.recycle_in_place(g, seg, g.seg_size, false, now, Queue::Main);
                }
            }
            None if small => {
                let now = self.now;
                self.recycle_in_place(g, seg, g.seg_size, false, now, Queue::Main);
            }
            _ => {
                let now = self.now;
                self.compact(seg, g, 0, false, now);
                if self.segs[seg].active {
                    self.segs.free(seg);
                }
                self.settle(g);
            }
        }
    }

    /// At the limit, makes room for a head of queue `q` (for an item of `size` bytes).
    ///
    /// The small queue makes room by evicting its oldest segment: items read while there
    /// move to the main queue, the rest are evicted. The main queue grows only by those
    /// moves: while the small queue holds more than its share, a victim whose read items do
    /// not fit in the main head becomes the main head itself. Once the small queue is down to
    /// its share, the main queue makes room by recycling its oldest segment (second chance
    /// for items read since their last pass), and gives a segment back if the small queue
    /// falls below its share.
    fn recycle(&mut self, g: &Global, now: u32, q: Queue, size: usize) -> bool {
        let small = self.segs.queued(Queue::Small);
        let target = self.small_target();
        let main_empty = self.segs.oldest(Queue::Main).is_none();
        let small_over = small > target || main_empty;
        match q {
            Queue::Main if !small_over => return self.recycle_main(g, now, size),
            Queue::Small if small < target && !main_empty => {
                return self.main_gives_segment(g, now)
            }
            _ => {}
        }
        let Some(victim) = self.segs.oldest(Queue::Small) else {
            return false;
        };
        // Keep the read items (their ACCESSED bit cleared: they start the main queue afresh).
        self.segs[victim].live_items += 1;
        let kept = self.compact(victim, g, g.seg_size, false, now);
        self.segs[victim].live_items -= 1;
        if kept == 0 {
            self.segs.requeue_as_head(victim, q);
        } else if q == Queue::Main {
            self.segs.requeue_as_head(victim, Queue::Main);
        } else {
            // Emptied, the victim's buffer comes back as a spare for the small queue's head.
            // While the main queue may grow, what does not fit in its head stays, and the
            // victim (compacted again) becomes the new main head.
            self.segs.dequeue_oldest(Queue::Small);
            let rest = if small_over {
                Rest::Stay
            } else {
                Rest::RecycleMain
            };
            if !self.move_to_head(g, victim, Queue::Main, false, rest) {
                self.recycle_in_place(g, victim, g.seg_size, true, now, Queue::Main);
            }
        }
        self.settle(g);
        true
    }

    fn main_head_has_room(&self, bytes: usize) -> bool {
        self.segs.head.is_some_and(|h| {
            let s = &self.segs[h];
            s.buf.len() - s.used >= bytes
        })
    }

    /// The small queue is under its share: the main queue's oldest segment is freed for it,
    /// its read items moved to the main head (recycled in place first if it has no room).
    fn main_gives_segment(&mut self, g: &Global, now: u32) -> bool {
        let Some(victim) = self.segs.oldest(Queue::Main) else {
            return false;
        };
        match self.segs.head {
            Some(head) if head != victim && self.main_head_has_room(g.seg_size / 4) => {
                self.segs.dequeue_oldest(Queue::Main);
                self.evict_segment(g, victim);
                true
            }
            _ => self.recycle_main(g, now, g.seg_size / 4),
        }
    }

    /// Segment-level second chance in the main queue: the victim (FIFO-oldest, or among the
    /// few oldest one that is mostly dead bytes) is compacted in place keeping recently read
    /// items (up to 3/4 of a segment) and becomes the main head.
    fn recycle_main(&mut self, g: &Global, now: u32, need: usize) -> bool {
        let Some(oldest) = self.segs.oldest(Queue::Main) else {
            return false;
        };
        let mut victim = oldest;
        let mut best_dead = 0;
        for id in self.segs.oldest_few(Queue::Main, VICTIM_WINDOW) {
            let s = &self.segs[id];
            if s.large() {
                continue;
            }
            let dead = s.used - s.live_bytes;
            if dead * 2 >= s.used && dead > best_dead {
                best_dead = dead;
                victim = id;
            }
        }
        if self.segs[victim].large() {
            self.segs.dequeue_oldest(Queue::Main);
            self.evict_segment(g, victim);
            return true;
        }
        // Keeping at most 3/4 frees at least a quarter segment, room for any non-large item.
        // A mostly-dead segment keeps all its live items; the FIFO-oldest keeps only read ones.
        let budget = g.seg_size - need;
        self.recycle_in_place(g, victim, budget, victim != oldest, now, Queue::Main);
        true
    }

    /// Under the limit, rewriting a mostly dead segment of queue `q` in place beats taking
    /// fresh memory when only a few items have to move: a fresh segment costs a page fault
    /// per 4 KiB written (values of 100 KB pay ~25 each), and memory would otherwise grow
    /// with dead bytes up to the limit. The item bound keeps the stall under the shard lock
    /// short.
    fn recycle_dead(&mut self, g: &Global, now: u32, q: Queue) -> bool {
        // Drops stale entries so the window sees live segments.
        if self.segs.oldest(q).is_none() {
            return false;
        }
        let mut victim = None;
        let mut best_dead = 0;
        for id in self.segs.oldest_few(q, VICTIM_WINDOW) {
            let s = &self.segs[id];
            // A drained segment's dead bytes are the drain's doing: it is left for `recycle`,
            // which moves its read items to the main queue.
            if s.large() || self.segs.is_head(id) || self.drained(id) {
                continue;
            }
            let dead = s.used - s.live_bytes;
            if dead * 2 >= s.used && s.live_items <= RECYCLE_MAX_ITEMS && dead > best_dead {
                best_dead = dead;
                victim = Some(id);
            }
        }
        let Some(victim) = victim else {
            return false;
        };
        self.recycle_in_place(g, victim, g.seg_size, true, now, q);
        true
    }

    /// Compacts `victim` in place (see `compact`) and makes it the head of `q`, youngest in
    /// that FIFO.
    fn recycle_in_place(
        &mut self,
        g: &Global,
        victim: u32,
        keep_budget: usize,
        keep_all: bool,
        now: u32,
        q: Queue,
    ) {
        self.segs[victim].live_items += 1;
        self.compact(victim, g, keep_budget, keep_all, now);
        self.segs[victim].live_items -= 1;
        self.segs.requeue_as_head(victim, q);
        self.settle(g);
    }

    /// Walks a segment: live items are kept (moved to the front of the same buffer) while
    /// they fit in `keep_budget` bytes and are recently read (or `keep_all_live`), else
    /// evicted; expired and flushed ones are reclaimed. Returns the compacted length.
    fn compact(
        &mut self,
        seg: u32,
        g: &Global,
        keep_budget: usize,
        keep_all_live: bool,
        now: u32,
    ) -> usize {
        let used = self.segs[seg].used;
        let mut off = 0;
        let mut write = 0;
        // Items are visited in order and only ever move left, so the walk stays valid.
        while off < used {
            let l = item::parse(self.segs.buf(seg, off));
            let total = l.total();
            let bits = l.bits;
            if bits & DEAD == 0 {
                let buf = self.segs.buf(seg, off);
                let gone = g.gone(buf, &l, now);
                let h = g.hash(&buf[l.key..l.key + l.key_len]);
                let slot = self
                    .index
                    .find_loc(h, loc_of(seg, off))
                    .expect("live item is indexed");
                let keep = gone.is_none()
                    && (keep_all_live || bits & ACCESSED != 0)
                    && write + total <= keep_budget;
                if keep {
                    let s = &mut self.segs[seg];
                    if write != off {
                        s.buf.copy_within(off..off + total, write);
                    }
                    s.buf[write] &= !ACCESSED;
                    self.index.set_loc(slot, loc_of(seg, write));
                    write += total;
                } else {
                    // Keep the segment alive while we walk it.
                    self.segs[seg].live_items += 1;
                    self.drop_item(g, Found { slot, seg, off, l }, h, gone);
                    self.segs[seg].live_items -= 1;
                }
            }
            off += total;
        }
        let s = &mut self.segs[seg];
        s.used = write;
        s.layout = s.layout.wrapping_add(1);
        write
    }

    /// Unlinks an item that eviction does not keep: reclaimed if expired or flushed, else
    /// evicted, and remembered in the ghost if it leaves the small queue unread.
    pub(crate) fn drop_item(&mut self, g: &Global, f: Found, h: u64, gone: Option<Unlink>) {
        if gone.is_none() && self.evict_to_flash(g, &f, h) {
            return;
        }
        if gone.is_some() {
            self.stats.reclaimed += 1;
        } else if f.l.bits & ACCESSED == 0 && self.segs[f.seg].queue == Queue::Small {
            self.ghost.remember(h);
        }
        self.unlink(f, gone.unwrap_or(Unlink::Evicted));
    }

    /// Moves a sealed segment's live items into the head of queue `q` while they fit (only
    /// recently read ones if `only_accessed`), does with the rest as `rest` says, and frees
    /// the segment if no item is left in it. Returns whether it was freed.
    pub fn move_to_head(
        &mut self,
        g: &Global,
        seg: u32,
        q: Queue,
        only_accessed: bool,
        rest: Rest,
    ) -> bool {
        let used = self.segs[seg].used;
        let now = self.now;
        let mut off = 0;
        // Keep the segment from being freed under us while items die.
        self.segs[seg].live_items += 1;
        while off < used {
            let l = item::parse(self.segs.buf(seg, off));
            let total = l.total();
            if l.bits & DEAD == 0 {
                let gone = g.gone(self.segs.buf(seg, off), &l, now);
                let wanted = gone.is_none() && (!only_accessed || l.bits & ACCESSED != 0);
                let room = |s: &Self| {
                    s.segs
                        .head_of(q)
                        .filter(|&h| h != seg && s.segs[h].buf.len() - s.segs[h].used >= total)
                };
                if wanted && rest == Rest::RecycleMain && room(self).is_none() {
                    self.recycle_main(g, now, total);
                }
                let buf = self.segs.buf(seg, off);
                let h = g.hash(&buf[l.key..l.key + l.key_len]);
                let slot = self.index.find_loc(h, loc_of(seg, off)).expect("indexed");
                let room = room(self);
                if wanted && room.is_none() && rest == Rest::Stay {
                    off += total;
                    continue;
                }
                match room.filter(|_| wanted) {
                    Some(head) => {
                        let dst = self.segs[head].used;
                        self.segs.copy((seg, off), total, (head, dst));
                        let hs = &mut self.segs[head];
                        if only_accessed {
                            hs.buf[dst] &= !ACCESSED;
                        }
                        hs.used += total;
                        hs.live_bytes += total;
                        hs.live_items += 1;
                        self.index.set_loc(slot, loc_of(head, dst));
                        let s = &mut self.segs[seg];
                        s.buf[off] |= DEAD;
                        s.live_bytes -= total;
                        s.live_items -= 1;
                    }
                    None => self.drop_item(g, Found { slot, seg, off, l }, h, gone),
                }
            }
            off += total;
        }
        self.segs[seg].live_items -= 1;
        let freed = self.segs[seg].live_items == 0;
        if freed {
            self.segs.free(seg);
        }
        self.settle(g);
        freed
    }
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::*;
    use std::sync::Arc;

    #[test]
    fn eviction_never_exceeds_limit_nor_fails() {
        let s = store_mb(2);
        let limit = s.mem_limit();
        let mut rng = 12345u64;
        for i in 0..200_000u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = if i % 1000 == 0 {
                60_000
            } else {
                (rng >> 33) as usize % 400
            };
            let v = vec![b'v'; len];
            let r = s.store(
                StoreRequest::new(StoreMode::Set, format!("key:{i}").as_bytes(), &v),
                T0,
            );
            assert_eq!(r.result, StoreResult::Stored, "set {i} failed");
            assert!(s.mem_used() <= limit, "used {} > {}", s.mem_used(), limit);
            if i % 10_000 == 0 {
                assert_eq!(val(&s, &format!("key:{i}"), T0).map(|v| v.len()), Some(len));
            }
        }
        let st = s.stats();
        assert!(st.counters.evictions > 100_000);
        assert_eq!(st.counters.curr_items, s.len());
    }

    #[test]
    fn hot_keys_survive_a_scan() {
        let s = store_mb(4);
        let hot: Vec<String> = (0..100).map(|i| format!("hot:{i}")).collect();
        let v = vec![b'h'; 100];
        for k in &hot {
            s.store(StoreRequest::new(StoreMode::Set, k.as_bytes(), &v), T0);
        }
        // Scan 10x the cache size of cold keys, reading the hot set now and then (as LRU would
        // need to keep them).
        for i in 0..300_000u64 {
            s.store(
                StoreRequest::new(StoreMode::Set, format!("cold:{i}").as_bytes(), &v),
                T0,
            );
            if i % 2_000 == 0 {
                for k in &hot {
                    assert!(
                        get(&s, k, T0).is_some(),
                        "hot key {k} evicted after {i} cold sets"
                    );
                }
            }
        }
        assert!(s.stats().counters.evictions > 200_000);
        assert!(val(&s, "cold:0", T0).is_none());
    }

    /// A one-off scan of never-read keys, 3x what the cache holds, with no read of the hot
    /// set meanwhile: the hot set (read once after being stored) survives whole, the scan's
    /// keys are evicted and counted as evictions of unfetched items.
    #[test]
    fn hot_set_survives_a_one_off_scan_larger_than_the_cache() {
        let s = store_mb(4);
        let v = vec![b'h'; 100];
        let hot: Vec<String> = (0..3_000).map(|i| format!("hot:{i}")).collect();
        for k in &hot {
            s.store(StoreRequest::new(StoreMode::Set, k.as_bytes(), &v), T0);
        }
        for k in &hot {
            assert!(get(&s, k, T0).is_some());
        }
        // Learn the capacity in items.
        let probe = store_mb(4);
        for i in 0..100_000u64 {
            probe.store(
                StoreRequest::new(StoreMode::Set, format!("scan:{i}").as_bytes(), &v),
                T0,
            );
        }
        let cap = probe.len();
        let scan = cap * 3;
        for i in 0..scan {
            s.store(
                StoreRequest::new(StoreMode::Set, format!("scan:{i}").as_bytes(), &v),
                T0,
            );
        }
        let lost: Vec<&String> = hot.iter().filter(|k| val(&s, k, T0).is_none()).collect();
        assert!(
            lost.is_empty(),
            "{} of 3000 hot keys lost to the scan",
            lost.len()
        );
        let st = s.stats().counters;
        assert!(
            st.evictions >= scan + 3_000 - cap,
            "{} evictions",
            st.evictions
        );
        assert_eq!(
            st.evicted_unfetched, st.evictions,
            "only scan keys were evicted"
        );
        assert!(val(&s, "scan:0", T0).is_none());
    }

    /// A key evicted from the small queue unread and stored again soon after (a cache-aside
    /// refill) starts in the main queue, so a later one-off scan does not evict it; a key
    /// stored for the first time just before the scan is evicted by it.
    #[test]
    fn key_stored_again_after_eviction_from_small_survives_a_scan() {
        // Values of 1 KB: the eviction of a segment remembers only a few keys at once, and
        // each shard has ~32 segments, so moving memory between shards while the scan runs
        // does not take a shard's small queue down to its share (which would evict from main).
        let s = store_mb(8);
        let v = vec![b'g'; 1_000];
        let set = |k: &str| {
            let r = s.store(StoreRequest::new(StoreMode::Set, k.as_bytes(), &v), T0);
            assert_eq!(r.result, StoreResult::Stored);
        };
        let present = |k: &str| s.peek(k.as_bytes(), T0, |x| x.is_some());
        set("back");
        let mut i = 0u64;
        while present("back") {
            set(&format!("fill:{i}"));
            i += 1;
        }
        // A few more evictions from the small queue, fewer than the ghost remembers.
        for j in 0..100 {
            set(&format!("more:{j}"));
        }
        set("back");
        set("fresh");
        for j in 0..3 * i {
            set(&format!("scan:{j}"));
        }
        assert!(!present("fresh"), "a new key is evicted by the scan");
        assert!(present("back"), "the returning key went to the main queue");
    }

    #[test]
    fn large_item_churn_keeps_bookkeeping_bounded() {
        let s = store_mb(8);
        let v = vec![b'L'; 50_000];
        for i in 0..5_000 {
            s.store(StoreRequest::new(StoreMode::Set, b"big", &v), T0);
            if i % 2 == 0 {
                s.delete(b"big", T0, &DeleteOpts::default());
            }
        }
        let st = s.stats();
        assert!(st.large_items <= 1);
        assert!(
            st.mem_used < 1 << 20,
            "large buffers given back: {}",
            st.mem_used
        );
    }

    #[test]
    fn overwrites_under_the_limit_reuse_dead_space() {
        // 2000 keys x 2 KB = ~4 MB live, overwritten at random 40 times (~160 MB written) at
        // -m 64: mostly dead segments are rewritten in place instead of filling the budget.
        let s = store_mb(64);
        let mut rng = 12345u64;
        for round in 0..40u32 {
            for i in 0..2000u32 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = (rng >> 33) % 2000;
                let v = vec![b'a' + (round % 26) as u8; 2_000 + (i as usize % 7)];
                let r = s.store(
                    StoreRequest::new(StoreMode::Set, format!("k{k}").as_bytes(), &v),
                    T0,
                );
                assert_eq!(r.result, StoreResult::Stored);
            }
        }
        let st = s.stats();
        assert_eq!(st.counters.evictions, 0);
        // ~4 MiB of index plus under 2x the live bytes (growing instead reaches ~21 MiB).
        assert!(
            st.mem_used < 15 << 20,
            "memory grew with dead bytes: {}",
            st.mem_used
        );
        let live = (0..2000)
            .filter(|k| val(&s, &format!("k{k}"), T0).is_some())
            .count();
        assert_eq!(live as u64, st.counters.curr_items);
    }

    #[test]
    fn emptied_segments_are_reused_and_given_back_when_the_limit_drops() {
        let s = store_mb(16);
        // A hot set of keys: whole segments die and their (dirty) buffers are reused; every
        // value read back must be the last one written, never stale bytes of a reused buffer.
        for round in 0..400u32 {
            let v = vec![b'a' + (round % 26) as u8; 1000 + (round as usize % 13)];
            for i in 0..50 {
                s.store(
                    StoreRequest::new(StoreMode::Set, format!("k{i}").as_bytes(), &v),
                    T0,
                );
            }
        }
        let last = vec![b'a' + (399 % 26) as u8; 1000 + 399 % 13];
        for i in 0..50 {
            assert_eq!(
                get(&s, &format!("k{i}"), T0).map(|g| g.0),
                Some(last.clone())
            );
        }
        let st = s.stats();
        assert_eq!(st.counters.curr_items, 50);
        assert_eq!(st.counters.evictions, 0);
        // Kept buffers stay charged; a lower limit makes reclaim hand them back.
        let used = s.mem_used();
        s.set_mem_limit(used - 1);
        s.reclaim(T0, 1000);
        assert!(s.mem_used() < used);
        assert_eq!(
            s.stats().counters.curr_items,
            50,
            "spare buffers go before items"
        );
    }

    /// Under heavy eviction the cache may forget keys but must never return a wrong value, and
    /// its counters must agree with what it serves.
    #[test]
    fn eviction_stress_never_corrupts() {
        use std::collections::HashMap;
        let s = store_mb(1);
        let limit = s.mem_limit();
        let mut model: HashMap<String, Vec<u8>> = HashMap::new();
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = T0;
        for step in 0..60_000u64 {
            let r = next();
            let key = format!("k{}", r % 3000);
            let op = (r >> 20) % 10;
            let len = match (r >> 30) % 50 {
                0 => 20_000 + (r >> 40) as usize % 40_000,
                _ => (r >> 40) as usize % 300,
            };
            let byte = b'a' + (step % 26) as u8;
            match op {
                0..=3 => {
                    let v = vec![byte; len];
                    let o = s.store(StoreRequest::new(StoreMode::Set, key.as_bytes(), &v), now);
                    assert_eq!(o.result, StoreResult::Stored);
                    model.insert(key, v);
                }
                4 => {
                    let v = vec![byte; len % 50];
                    let o = s.store(
                        StoreRequest::new(StoreMode::Append, key.as_bytes(), &v),
                        now,
                    );
                    if o.result == StoreResult::Stored {
                        model.get_mut(&key).unwrap().extend_from_slice(&v);
                    }
                }
                5 => {
                    let v = vec![byte; len % 50];
                    let o = s.store(
                        StoreRequest::new(StoreMode::Prepend, key.as_bytes(), &v),
                        now,
                    );
                    if o.result == StoreResult::Stored {
                        let m = model.get_mut(&key).unwrap();
                        *m = [v, m.clone()].concat();
                    }
                }
                6 => {
                    s.delete(key.as_bytes(), now, &DeleteOpts::default());
                    model.remove(&key);
                }
                7 => {
                    let v = (r % 1000).to_string().into_bytes();
                    s.store(StoreRequest::new(StoreMode::Set, key.as_bytes(), &v), now);
                    model.insert(key.clone(), v);
                    if let ArithResult::Ok { value, .. } =
                        s.incr_decr(key.as_bytes(), true, 12345, now, &ArithOpts::default())
                    {
                        assert_eq!(value, r % 1000 + 12345);
                        model.insert(key, value.to_string().into_bytes());
                    }
                }
                _ => {
                    let got = s.get(key.as_bytes(), now, |v| v.map(|v| v.value.to_vec()));
                    if let Some(g) = got {
                        assert_eq!(Some(&g), model.get(&key), "step {step} key {key}");
                    }
                }
            }
            assert!(s.mem_used() <= limit);
            if step % 5_000 == 0 {
                now += 1;
                s.reclaim(now, 2_000);
            }
        }
        let mut present = 0;
        for (k, v) in &model {
            if let Some(g) = s.peek(k.as_bytes(), now, |x| x.map(|x| x.value.to_vec())) {
                assert_eq!(&g, v);
                present += 1;
            }
        }
        assert!(present > 0);
        assert_eq!(s.len(), present);
        let st = s.stats();
        assert_eq!(st.live_bytes, st.counters.bytes);
    }

    /// Several writers, readers and a maintenance thread on a tiny cache: values always belong to
    /// their key, the limit holds, no set of an allowed size fails.
    #[test]
    fn concurrent_eviction_with_reclaim() {
        let s = Arc::new(store_mb(2));
        let limit = s.mem_limit();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let maint = {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut now = T0;
                while !stop.load(Ordering::Relaxed) {
                    s.reclaim(now, 1_000);
                    now += 1;
                    std::thread::yield_now();
                }
            })
        };
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut rng = 0x9E37_79B9u64 * (t + 1);
                    for i in 0..40_000u64 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let k = format!("c{}", rng % 20_000);
                        let len = if i % 500 == 0 {
                            30_000
                        } else {
                            (rng >> 32) as usize % 500
                        };
                        let exp = if rng % 7 < 1 { T0 + 2 } else { 0 };
                        if rng % 3 < 1 {
                            let tag = k.as_bytes()[1];
                            let ok = s.get(k.as_bytes(), T0, |v| match v {
                                None => true,
                                Some(v) => v.value.iter().all(|&b| b == tag),
                            });
                            assert!(ok, "value of {k} does not belong to it");
                        } else {
                            let v = vec![k.as_bytes()[1]; len];
                            let r = s.store(
                                StoreRequest::new(StoreMode::Set, k.as_bytes(), &v).exptime(exp),
                                T0,
                            );
                            assert_eq!(r.result, StoreResult::Stored);
                        }
                        assert!(s.mem_used() <= limit);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        maint.join().unwrap();
        assert!(s.mem_used() <= limit);
        assert_eq!(s.stats().counters.curr_items, s.len());
    }

    /// Hot/cold read-through workload: the small/main queue policy's hit ratio is at least
    /// about an exact LRU's holding the same number of items (the cold keys pass through the
    /// small queue; the hot ones stay in the main queue).
    #[test]
    fn hit_ratio_at_least_lru() {
        use std::collections::{HashMap, VecDeque};
        let s = store_mb(2);
        let v = vec![b'x'; 100];
        let mut rng = 42u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Fill to learn the capacity in items.
        for i in 0..40_000 {
            s.store(
                StoreRequest::new(StoreMode::Set, format!("fill{i}").as_bytes(), &v),
                T0,
            );
        }
        let cap = s.len() as usize;
        let keyspace = cap * 4;
        let hot = cap / 4;
        let mut keys = Vec::with_capacity(200_000);
        for _ in 0..200_000 {
            let r = next();
            let k = if r % 100 < 80 {
                (r >> 8) as usize % hot
            } else {
                hot + (r >> 8) as usize % (keyspace - hot)
            };
            keys.push(k);
        }
        let mut store_hits = 0;
        for &k in &keys {
            let key = format!("w{k}");
            if s.get(key.as_bytes(), T0, |x| x.is_some()) {
                store_hits += 1;
            } else {
                s.store(StoreRequest::new(StoreMode::Set, key.as_bytes(), &v), T0);
            }
        }
        // Exact LRU with `cap` items: recency stamps plus a queue with lazy deletion.
        let mut stamp: HashMap<usize, u64> = HashMap::new();
        let mut queue: VecDeque<(usize, u64)> = VecDeque::new();
        let mut lru_hits = 0;
        for (t, &k) in keys.iter().enumerate() {
            let t = t as u64;
            if stamp.contains_key(&k) {
                lru_hits += 1;
            } else if stamp.len() == cap {
                while let Some((old, st)) = queue.pop_front() {
                    if stamp.get(&old) == Some(&st) {
                        stamp.remove(&old);
                        break;
                    }
                }
            }
            stamp.insert(k, t);
            queue.push_back((k, t));
        }
        let (a, b) = (store_hits as f64 / 2e5, lru_hits as f64 / 2e5);
        println!("hit ratio: store {a:.3}, exact LRU {b:.3} ({cap} items)");
        // The shards' hash seeds vary per run, and with them the ratio by about 0.5%.
        assert!(a >= b * 0.98, "store hit ratio {a:.3} vs LRU {b:.3}");
    }

    /// Items kept at -m 64 after 1,000,000 sets of ~11-byte keys and 100-byte values.
    pub fn items_retained_at_64mib() -> u64 {
        let s = store_mb(64);
        let v = [b'v'; 100];
        for i in 0..1_000_000u64 {
            let k = format!("key:{:07}", i);
            let r = s.store(StoreRequest::new(StoreMode::Set, k.as_bytes(), &v), T0);
            assert_eq!(r.result, StoreResult::Stored);
        }
        assert!(s.mem_used() <= 64 << 20);
        s.len()
    }

    #[test]
    #[ignore = "slow in debug builds; run with --release -- --ignored"]
    fn items_per_64mib() {
        let n = items_retained_at_64mib();
        println!("items retained at 64 MiB: {n}");
        assert!(n >= 500_000, "{n}");
    }
}
