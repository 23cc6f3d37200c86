//! One shard: its segments, its part of the index, its counters, and the glue between them
//! (look a key up, link a new item in, unlink an old one). Every method runs under the
//! shard's mutex; memory is charged to the store-wide budget in `Global`. Finding memory
//! (allocation, eviction) is in `eviction`, background expiry in `reclaim`.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::budget::Budget;
use crate::exptime::expired;
use crate::flash::{Flash, FlashIndex};
use crate::ghost::Ghost;
use crate::index::{self, Index, WAYS};
use crate::item::{self, Header, Layout, ACCESSED, DEAD, FETCHED};
use crate::segbuf::ValueAt;
use crate::segments::{SegFigures, Segments};
use crate::stats::Counters;

/// Offsets within a segment (at most 1 MiB) or within a large item's own buffer (the item
/// starts within its first ~17 KB); the segment id takes the bits above.
const OFF_BITS: u64 = 20;
const OFF_MASK: u64 = (1 << OFF_BITS) - 1;
/// Index buckets a shard starts with (25 KiB, 4,000 entries; 16 shards together about match
/// memcached's initial 2^16-bucket hash table).
const INDEX_START_BUCKETS: usize = 400;

/// What all shards share: the memory budget and store-wide settings.
pub(crate) struct Global {
    pub mem: Budget,
    pub seg_size: usize,
    /// Items larger than this get a buffer of their own.
    pub large_threshold: usize,
    /// flush_all's cutoff (memcached's settings.oldest_live), 0 = none.
    pub oldest_live: AtomicU32,
    pub hasher: foldhash::fast::RandomState,
    /// False (`-M`): items are never evicted to make room.
    pub evictions: bool,
    /// The flash tier evicted items go to, when configured.
    pub flash: Option<Flash>,
}

impl Global {
    /// Writes evict as they go (see `drain` and `Budget::full`). Read at every write, since
    /// other shards fill the memory this one could take.
    #[inline]
    pub fn full(&self) -> bool {
        self.evictions && self.mem.full(self.seg_size as u64)
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Items written with exptime 0 still get an exptime field. Only under `-M`: giving an
    /// item a TTL later (`touch`, `gat`, `mg T`) then never needs memory, which `-M` could
    /// refuse where memcached's touch never fails.
    pub fn force_exptime(&self) -> bool {
        !self.evictions
    }

    /// memcached's item_is_flushed for the item at `buf`: last updated or read at or before
    /// flush_all's cutoff, once that has come.
    pub fn is_flushed(&self, buf: &[u8], l: &Layout, now: u32) -> bool {
        let ol = self.oldest_live.load(Ordering::Relaxed);
        ol != 0 && ol <= now && item::time(buf, l, now) <= ol
    }

    /// Why a live item stored at `buf` is gone at `now` (flushed or expired), if it is.
    /// `now == 0` means "not known": nothing is gone.
    pub fn gone(&self, buf: &[u8], l: &Layout, now: u32) -> Option<Unlink> {
        if now != 0 && self.is_flushed(buf, l, now) {
            Some(Unlink::Flushed)
        } else if now != 0 && expired(item::exptime(buf, l), now) {
            Some(Unlink::Expired)
        } else {
            None
        }
    }
}

/// A live item found by key.
#[derive(Clone, Copy)]
pub(crate) struct Found {
    pub slot: usize,
    pub seg: u32,
    pub off: usize,
    pub l: Layout,
}

/// Not enough memory in this shard; the caller frees some elsewhere and retries.
#[derive(Debug)]
pub(crate) struct NeedMem;

/// Why a live item is being removed, for the counters.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Unlink {
    Deleted,
    Evicted,
    Expired,
    Flushed,
    /// Moved to flash: still an item, no longer in memory.
    ToFlash,
}

pub(crate) struct Shard {
    pub id: u64,
    pub segs: Segments,
    pub index: Index,
    /// Index buckets already charged to the limit: growing up to this costs no memory budget.
    pub index_reserved: usize,
    /// Bytes charged for the index.
    pub index_charged: u64,
    /// Of those, what the old table of a resize under way holds beyond the reservation
    /// (only the last doubling into it has both tables past it); given back when it ends.
    pub index_move_charged: u64,
    cas_counter: u64,
    pub stats: Counters,
    /// Where `reclaim` continues: segment, offset, and the segment's layout when saved.
    pub reclaim_seg: usize,
    pub reclaim_off: usize,
    pub reclaim_layout: u32,
    nshards_bits: u32,
    /// Latest `now` seen, for eviction paths that are not handed one.
    pub now: u32,
    /// Keys lately evicted from the small queue unread (charged to the limit up front).
    pub ghost: Ghost,
    /// Items on flash, by key hash (empty without a flash tier).
    pub flash_index: FlashIndex,
    /// Bytes charged for `flash_index`.
    pub flash_index_charged: u64,
    /// `Flash::drops` when stale flash entries were last swept.
    pub flash_drops_seen: u64,
    /// Gets served from flash since one last brought its item back.
    pub flash_reads: u32,
    /// Told of every item that leaves (`Store::set_events`).
    pub events: Option<crate::events::Events>,
    /// At the limit, writes evict item by item (see `drain`).
    pub drain: crate::drain_cursor::Drain,
}

pub(crate) fn loc_of(seg: u32, off: usize) -> u64 {
    debug_assert!((off as u64) <= OFF_MASK);
    ((seg as u64) << OFF_BITS) | off as u64
}
fn split_loc(loc: u64) -> (u32, usize) {
    ((loc >> OFF_BITS) as u32, (loc & OFF_MASK) as usize)
}

/// Index buckets after one growth past the charged reservation. Every index byte is taken
/// from items, so the step is small: growing by half left a full cache's index at ~70% load
/// (11.5 bytes per 100-byte item instead of ~8.9); by an eighth it stays at 84-95%. A shard
/// rehashes its items on each step, ~9 times their number in all instead of ~3.
pub(crate) fn grown_past_reservation(nbuckets: usize) -> usize {
    nbuckets + nbuckets / 8 + 1
}

/// Whether the item at `loc` has key `key`; its place and layout if so.
#[inline(always)]
fn is_key(segs: &Segments, loc: u64, key: &[u8]) -> Option<(u32, usize, Layout)> {
    let (s, o) = split_loc(loc);
    let buf = segs.buf(s, o);
    let kl = buf[1] as usize;
    if kl != key.len() {
        return None;
    }
    let l = item::parse(buf);
    (&buf[l.key..l.key + kl] == key).then_some((s, o, l))
}

/// Hash of the key stored at `loc`, for index rebuilds and cuckoo kicks.
pub(crate) fn hash_at(segs: &Segments, g: &Global, loc: u64) -> u64 {
    let (s, o) = split_loc(loc);
    let buf = segs.buf(s, o);
    let l = item::parse(buf);
    g.hash(&buf[l.key..l.key + l.key_len])
}

impl Shard {
    /// `index_buckets` is the index size charged up front; the index itself starts small
    /// and doubles into that reservation as items arrive. The ghost has `ghost_slots`.
    pub fn new(id: u64, nshards_bits: u32, index_buckets: usize, ghost_slots: usize) -> Shard {
        Shard {
            id,
            segs: Segments::default(),
            index: Index::new(index_buckets.min(INDEX_START_BUCKETS)),
            index_reserved: index_buckets,
            index_charged: index::bytes_for(index_buckets) as u64,
            index_move_charged: 0,
            cas_counter: 0,
            stats: Counters::default(),
            reclaim_seg: 0,
            reclaim_off: 0,
            reclaim_layout: 0,
            nshards_bits,
            now: 0,
            ghost: Ghost::new(ghost_slots),
            flash_index: FlashIndex::default(),
            flash_index_charged: 0,
            flash_drops_seen: 0,
            flash_reads: 0,
            events: None,
            drain: Default::default(),
        }
    }

    /// Moves the cas counter (tests reach cas values past 2^32 without 2^28 writes).
    #[cfg(test)]
    pub fn set_cas_counter(&mut self, n: u64) {
        self.cas_counter = n;
    }

    /// Makes the next cas values of this shard larger than any with counter `floor`
    /// (items restored from a warm-restart file keep their cas).
    pub fn raise_cas_counter(&mut self, floor: u64) {
        self.cas_counter = self.cas_counter.max(floor);
    }

    /// What `next_cas` will return, to size an item before it is written.
    pub fn peek_cas(&self) -> u64 {
        ((self.cas_counter + 1) << self.nshards_bits) | self.id
    }

    /// Unique across shards: the shard id sits in the low bits.
    pub fn next_cas(&mut self) -> u64 {
        self.cas_counter += 1;
        (self.cas_counter << self.nshards_bits) | self.id
    }

    /// Bytes this shard holds against the limit (segments, index and ghost).
    pub fn charged(&self) -> u64 {
        self.segs.charged() + self.index_charged + self.ghost.bytes() as u64
    }

    pub fn buf(&self, seg: u32, off: usize) -> &[u8] {
        self.segs.buf(seg, off)
    }

    pub fn segment_count(&self) -> usize {
        self.segs.count()
    }

    /// Index bytes charged to the limit up front (the index grows into them).
    pub fn index_reserved_bytes(&self) -> u64 {
        index::bytes_for(self.index_reserved) as u64
    }

    /// Last access time of the first live item of the oldest segment: about the oldest
    /// item's (memcached's per-class `age`).
    pub fn oldest_item_time(&self) -> Option<u32> {
        let seg = self.segs.by_age().next()?;
        let s = &self.segs[seg];
        let mut off = 0;
        while off < s.used {
            let l = item::parse(&s.buf[off..]);
            if l.bits & DEAD == 0 {
                return Some(item::time(&s.buf[off..], &l, self.now));
            }
            off += l.total();
        }
        None
    }

    /// Index lookup without liveness checks.
    pub fn find(&self, h: u64, key: &[u8]) -> Option<Found> {
        let segs = &self.segs;
        // The matching item's layout comes back with it rather than being parsed again.
        let Some((slot, (seg, off, l))) = self.index.find_current(h, |loc| is_key(segs, loc, key))
        else {
            return self.find_in_old_index(h, key);
        };
        Some(Found { slot, seg, off, l })
    }

    /// `find`'s rest while the index is being resized; out of line so the common lookup
    /// stays as small as it was before resizes were incremental.
    #[cold]
    #[inline(never)]
    fn find_in_old_index(&self, h: u64, key: &[u8]) -> Option<Found> {
        let segs = &self.segs;
        let (slot, (seg, off, l)) = self.index.find_old(h, |loc| is_key(segs, loc, key))?;
        Some(Found { slot, seg, off, l })
    }

    /// Lookup that lazily drops expired or flushed items, counted as get_expired /
    /// get_flushed whatever the command (as memcached's do_item_get does).
    pub fn find_live(&mut self, g: &Global, h: u64, key: &[u8], now: u32) -> Option<Found> {
        self.now = now;
        let f = self.find(h, key)?;
        let buf = self.buf(f.seg, f.off);
        if g.is_flushed(buf, &f.l, now) {
            self.stats.get_flushed += 1;
            self.unlink(f, Unlink::Flushed);
            return None;
        }
        if expired(item::exptime(buf, &f.l), now) {
            self.stats.get_expired += 1;
            self.unlink(f, Unlink::Expired);
            return None;
        }
        Some(f)
    }

    /// Removes a live item from the index and marks its bytes dead.
    pub fn unlink(&mut self, f: Found, why: Unlink) {
        self.index.remove(f.slot);
        self.mark_dead(f.seg, f.off, &f.l, why);
    }

    pub(crate) fn mark_dead(&mut self, seg: u32, off: usize, l: &Layout, why: Unlink) {
        let total = l.total();
        let bits = self.buf(seg, off)[0];
        if why != Unlink::ToFlash {
            if let Some(ev) = self
                .events
                .as_ref()
                .filter(|e| e.gate.is_open() && e.to.wanted())
            {
                self.tell_departure(ev.to.as_ref(), seg, off, l, bits, why);
            }
        }
        self.segs.header_mut(seg, off, l)[0] = bits | DEAD;
        let s = &mut self.segs[seg];
        s.live_bytes -= total;
        s.live_items -= 1;
        self.stats.curr_items -= 1;
        self.stats.bytes -= total as u64;
        match why {
            Unlink::Evicted => {
                self.stats.evictions += 1;
                let last_access = item::time(self.buf(seg, off), l, self.now);
                self.stats.evicted_time = u64::from(self.now.saturating_sub(last_access));
                if bits & FETCHED == 0 {
                    self.stats.evicted_unfetched += 1;
                }
            }
            Unlink::Expired => {
                if bits & FETCHED == 0 {
                    self.stats.expired_unfetched += 1;
                }
            }
            Unlink::Deleted | Unlink::Flushed | Unlink::ToFlash => {}
        }
        if self.segs[seg].live_items == 0 {
            self.segs.emptied(seg);
        }
    }

    #[cold]
    fn tell_departure(
        &self,
        ev: &dyn crate::events::KeyEvents,
        seg: u32,
        off: usize,
        l: &Layout,
        bits: u8,
        why: Unlink,
    ) {
        use crate::events::Departure;
        let buf = self.buf(seg, off);
        let d = match why {
            Unlink::Evicted => {
                let exptime = item::exptime(buf, l);
                Departure::Evicted {
                    fetched: bits & FETCHED != 0,
                    idle: self.now.saturating_sub(item::time(buf, l, self.now)),
                    ttl: if exptime == 0 {
                        -1
                    } else {
                        i64::from(exptime) - i64::from(self.now)
                    },
                    value_len: l.value_len,
                }
            }
            Unlink::Expired => Departure::Expired,
            Unlink::Flushed => Departure::Flushed,
            Unlink::Deleted | Unlink::ToFlash => Departure::Replaced,
        };
        ev.departed(&buf[l.key..l.key + l.key_len], d);
    }

    /// Memory freed while the caller had no `Global` at hand; handed back here.
    pub fn settle(&mut self, g: &Global) {
        self.segs.settle(&g.mem);
    }

    fn count_written(&mut self, total: usize) {
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        self.stats.bytes += total as u64;
    }

    /// Writes an item at the end of `seg` (see `Segments::write`). Returns its offset.
    pub fn write(
        &mut self,
        seg: u32,
        h: &Header,
        key: &[u8],
        value_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> (usize, Layout) {
        let (off, l) = self.segs.write(seg, h, key, value_len, fill);
        self.count_written(l.total());
        (off, l)
    }

    /// Writes an item around a value already in `seg` (see `Segments::write_in_place`).
    pub fn write_in_place(
        &mut self,
        seg: u32,
        off: usize,
        h: &Header,
        key: &[u8],
        value_len: usize,
    ) -> (usize, Layout) {
        let (off, l) = self.segs.write_in_place(seg, off, h, key, value_len);
        self.count_written(l.total());
        (off, l)
    }

    /// Copies `len` bytes of an existing item's value into a freshly reserved destination.
    pub fn copy_value(&mut self, src: (u32, usize), len: usize, dst: (u32, usize)) {
        self.segs.copy(src, len, dst);
    }

    /// Gives back a large segment that `alloc` returned but that was not written.
    pub fn unalloc(&mut self, g: &Global, seg: u32) {
        let s = &self.segs[seg];
        if s.large() && s.used == 0 {
            self.segs.free(seg);
            self.settle(g);
        }
    }

    /// Points `slot` (or a new index entry) at the item just written, retiring the old one.
    pub fn link(&mut self, g: &Global, h: u64, old: Option<Found>, seg: u32, off: usize) {
        let loc = loc_of(seg, off);
        self.flash_unlink(g, h, true);
        match old {
            Some(f) => {
                self.index.set_loc(f.slot, loc);
                self.mark_dead(f.seg, f.off, &f.l, Unlink::Deleted);
            }
            None => self.index_insert(g, h, loc),
        }
        self.settle(g);
        if g.full() {
            self.drain_for_write(g, seg, off);
        }
    }

    /// Doubles an index still smaller than its charged size (at most up to that size). A
    /// small index keeps lookups in cache while the store holds few items: the full-size
    /// index of a 1 GB limit is 64 MiB of mostly empty buckets, one cache and TLB miss per
    /// lookup. False when the index already has its reserved size.
    ///
    /// The doubled table takes new entries at once; the old entries move over a few
    /// buckets per allocation (`step_index_move`). Rehashing them all here held the shard
    /// lock for ~0.5 ms per 4,000 items (4 ms at 30,000, a 1 GB cache's fourth doubling),
    /// stalling every connection that wrote to the shard meanwhile. The move ends
    /// well before the new table fills: a doubled table takes ~0.9x the old capacity in new
    /// items before it is 95% full, while moving takes 1/`INDEX_MOVE_STEP` allocations per
    /// old bucket, 0.05x its capacity.
    pub fn grow_index_within_reservation(&mut self, g: &Global) -> bool {
        let n = self.index.nbuckets();
        if n >= self.index_reserved {
            return false;
        }
        let segs = &self.segs;
        if !self
            .index
            .migrate(usize::MAX, &|l: u64| hash_at(segs, g, l))
        {
            let grown = self.rebuild_index_within_reservation(g);
            self.release_index_move(g);
            return grown;
        }
        self.release_index_move(g);
        self.index.start_resize((n * 2).min(self.index_reserved));
        // Both tables exist until the move ends: charge what they hold past the charge,
        // as `grow_index` does, so `-m` bounds the index mid-move too.
        let held = (self.index.bytes() + self.index.old_bytes()) as u64;
        let over = held.saturating_sub(self.index_charged);
        if over > 0 {
            g.mem.charge_over(over);
            self.index_charged += over;
            self.index_move_charged += over;
        }
        true
    }

    /// Gives back what a finished resize's old table was charged.
    fn release_index_move(&mut self, g: &Global) {
        if self.index_move_charged > 0 && !self.index.resizing() {
            g.mem.release(self.index_move_charged);
            self.index_charged -= self.index_move_charged;
            self.index_move_charged = 0;
        }
    }

    /// Moves up to `buckets` buckets of an index being resized (see
    /// `grow_index_within_reservation`). When an entry finds no place in the new table (a
    /// cuckoo cycle: not seen at the loads a doubled table has), rebuilds it all at once,
    /// bigger.
    pub fn step_index_move(&mut self, g: &Global, buckets: usize) {
        if !self.index.resizing() {
            return;
        }
        let segs = &self.segs;
        if !self.index.migrate(buckets, &|l: u64| hash_at(segs, g, l))
            && !self.rebuild_index_within_reservation(g)
        {
            self.grow_index(g, 0);
        }
        self.release_index_move(g);
    }

    /// Rebuilds the index all at once at twice its size (at most the reserved size), then
    /// bigger until everything fits. False when it did not fit at the reserved size.
    fn rebuild_index_within_reservation(&mut self, g: &Global) -> bool {
        let mut n = self.index.nbuckets();
        if n > self.index_reserved {
            return false;
        }
        let segs = &self.segs;
        let hash_of = |l: u64| hash_at(segs, g, l);
        loop {
            n = (n * 2).min(self.index_reserved);
            if self.index.rebuild(n, &hash_of) {
                return true;
            }
            if n == self.index_reserved {
                return false;
            }
        }
    }

    /// Sizes the index of an empty shard for `items` (within its reservation), so a bulk load
    /// (warm restart) does not rebuild it again and again as it fills.
    pub fn presize_index(&mut self, g: &Global, items: usize) {
        let want = (items * 10 / 9 / WAYS + 1).min(self.index_reserved);
        if self.stats.curr_items == 0 && want > self.index.nbuckets() {
            let segs = &self.segs;
            self.index.rebuild(want, &|l: u64| hash_at(segs, g, l));
        }
    }

    /// Rebuilds the index at least 1/8 bigger (`grown_past_reservation`), charging what it grew by (`reserved`
    /// bytes of which the caller already charged). Returns the growth.
    pub fn grow_index(&mut self, g: &Global, reserved: u64) -> u64 {
        let segs = &self.segs;
        let hash_of = |l: u64| hash_at(segs, g, l);
        let before = self.index.bytes() as u64;
        let mut n = grown_past_reservation(self.index.nbuckets());
        while !self.index.rebuild(n, &hash_of) {
            n = grown_past_reservation(n);
        }
        let after = self.index.bytes() as u64;
        self.index_charged += after - before;
        // The index may overshoot the limit for a moment; the next allocation evicts back
        // under it.
        if after > before + reserved {
            g.mem.charge_over(after - before - reserved);
        }
        self.release_index_move(g);
        after - before
    }

    fn index_insert(&mut self, g: &Global, h: u64, loc: u64) {
        let mut pending = (h, loc);
        loop {
            let segs = &self.segs;
            let hash_of = |l: u64| hash_at(segs, g, l);
            match self.index.insert(pending.0, pending.1, &hash_of) {
                Ok(()) => return,
                Err(homeless) => {
                    pending = homeless;
                    if self.grow_index_within_reservation(g) {
                        continue;
                    }
                    self.grow_index(g, 0);
                }
            }
        }
    }

    /// Drops everything (flush_all) and gives all segment memory back.
    pub fn clear(&mut self, g: &Global) {
        self.segs.free_all();
        self.index.clear();
        self.ghost.clear();
        self.clear_flash();
        self.stats.curr_items = 0;
        self.stats.bytes = 0;
        self.settle(g);
    }

    /// Per-shard figures for `stats slabs` / `stats items`.
    pub fn segment_figures(&self) -> SegFigures {
        self.segs.figures()
    }

    pub fn bump(&mut self, f: &Found, now: u32) {
        let buf = self.segs.header_mut(f.seg, f.off, &f.l);
        buf[0] |= FETCHED | ACCESSED;
        item::set_time(buf, &f.l, now);
    }

    pub fn set_bits(&mut self, f: &Found, set: u8, clear: u8) {
        let b = &mut self.segs.header_mut(f.seg, f.off, &f.l)[0];
        *b = (*b | set) & !clear;
    }

    pub fn set_exptime(&mut self, f: &Found, e: u32) {
        item::set_exptime(self.segs.header_mut(f.seg, f.off, &f.l), &f.l, e);
    }

    /// Replaces the live item with a copy whose cas takes 8 bytes, so that a cas update that
    /// does not fit in 4 can then be made in place. None if the item is gone.
    pub fn widen_cas(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        now: u32,
    ) -> Result<Option<Found>, NeedMem> {
        self.widen(g, h, key, now, true)
    }

    /// Sets the item's exptime, first copying it to one with an exptime field if it has none
    /// and `e` is not 0. Returns the item as it now is; None if it is gone.
    pub fn set_exptime_widening(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        f: Found,
        e: u32,
        now: u32,
    ) -> Result<Option<Found>, NeedMem> {
        let f = if item::exptime_fits(&f.l, e) {
            f
        } else {
            match self.widen(g, h, key, now, false)? {
                Some(f) => f,
                None => return Ok(None),
            }
        };
        self.set_exptime(&f, e);
        Ok(Some(f))
    }

    /// Replaces the live item with a copy that has an exptime field and, when `wide_cas`, an
    /// 8-byte cas (like memcached's item copy when an update does not fit). None if the item
    /// is gone.
    fn widen(
        &mut self,
        g: &Global,
        h: u64,
        key: &[u8],
        now: u32,
        wide_cas: bool,
    ) -> Result<Option<Found>, NeedMem> {
        let Some(f) = self.find_live(g, h, key, now) else {
            return Ok(None);
        };
        let buf = self.buf(f.seg, f.off);
        let flags = item::flags(buf, &f.l);
        let keep_wide = wide_cas || f.l.bits & item::CAS_WIDE != 0;
        let cas_for_size = if keep_wide { u64::MAX } else { 0 };
        let size = item::encoded_len(key.len(), f.l.value_len, flags, cas_for_size, true);
        let q = self.queue_for(Some(&f));
        let seg = self.alloc(g, size, now, q)?;
        // Allocation may have moved the item, or evicted it (to flash, say): with memory
        // found elsewhere, the caller's retry finds it again.
        let Some(f) = self.find_live(g, h, key, now) else {
            self.unalloc(g, seg);
            return Err(NeedMem);
        };
        let buf = self.buf(f.seg, f.off);
        let cas = item::cas(buf, &f.l);
        let hdr = Header {
            bits: f.l.bits,
            // Any value above u32::MAX makes the field wide; the real one is set below.
            cas: cas_for_size,
            exptime: item::exptime(buf, &f.l),
            time: item::time(buf, &f.l, now),
            flags,
            force_exptime: true,
        };
        let (off, l) = self.write(seg, &hdr, key, f.l.value_len, |_| {});
        self.copy_value(
            (f.seg, f.off + f.l.value),
            f.l.value_len,
            (seg, off + l.value),
        );
        self.link(g, h, Some(f), seg, off);
        let f = self.find(h, key).expect("just linked");
        self.set_cas(&f, cas);
        Ok(Some(f))
    }

    pub fn set_cas(&mut self, f: &Found, c: u64) {
        item::set_cas(self.segs.header_mut(f.seg, f.off, &f.l), &f.l, c);
    }

    /// The item's value for a rewrite in place; None while a reply may be reading it
    /// (the caller then stores a new item, as memcached does for an item it is sending).
    pub fn value_mut(&mut self, f: &Found) -> Option<&mut [u8]> {
        if self.segs[f.seg].buf.is_pinned() {
            return None;
        }
        let v = f.off + f.l.value;
        Some(&mut self.segs[f.seg].buf[v..v + f.l.value_len])
    }

    /// Where the item's value lives, for `ValueAt::pin`.
    pub fn value_at(&self, f: &Found) -> ValueAt<'_> {
        ValueAt::new(&self.segs[f.seg].buf, f.off + f.l.value, f.l.value_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segments::Queue;
    use crate::test_util::{set, store_mb, val, T0};

    fn global(limit: u64) -> Global {
        Global {
            mem: Budget::new(limit, 0, 0),
            seg_size: 4096,
            large_threshold: 1024,
            oldest_live: AtomicU32::new(0),
            hasher: foldhash::fast::RandomState::default(),
            evictions: true,
            flash: None,
        }
    }

    fn hdr(exptime: u32, time: u32) -> Header {
        Header {
            bits: 0,
            cas: 1,
            exptime,
            time,
            flags: 0,
            force_exptime: false,
        }
    }

    /// A shard with one charged head segment of 4 KiB.
    fn shard(g: &Global) -> (Shard, u32) {
        let mut s = Shard::new(3, 4, 64, 1);
        assert!(g.mem.try_reserve(4096));
        let seg = s
            .segs
            .add(vec![0u8; 4096].into_boxed_slice(), false, Queue::Main);
        s.segs.head = Some(seg);
        (s, seg)
    }

    fn put(s: &mut Shard, g: &Global, seg: u32, key: &[u8], value: &[u8], exptime: u32) {
        let h = g.hash(key);
        let old = s.find(h, key);
        let (off, _) = s.write(seg, &hdr(exptime, T0), key, value.len(), |v| {
            v.copy_from_slice(value)
        });
        s.link(g, h, old, seg, off);
    }

    fn value_of(s: &mut Shard, g: &Global, key: &[u8], now: u32) -> Option<Vec<u8>> {
        let f = s.find_live(g, g.hash(key), key, now)?;
        let buf = s.buf(f.seg, f.off);
        Some(buf[f.l.value..f.l.value + f.l.value_len].to_vec())
    }

    #[test]
    fn linking_replaces_the_old_item_and_counts_live_bytes() {
        let g = global(1 << 20);
        let (mut s, seg) = shard(&g);
        put(&mut s, &g, seg, b"a", b"one", 0);
        put(&mut s, &g, seg, b"b", b"two", 0);
        put(&mut s, &g, seg, b"a", b"three", 0);
        assert_eq!(
            value_of(&mut s, &g, b"a", T0).as_deref(),
            Some(&b"three"[..])
        );
        assert_eq!(value_of(&mut s, &g, b"b", T0).as_deref(), Some(&b"two"[..]));
        assert_eq!(s.stats.curr_items, 2);
        assert_eq!(s.stats.total_items, 3);
        assert_eq!(s.index.len(), 2);
        let sg = &s.segs[seg];
        assert_eq!(sg.live_items, 2);
        assert_eq!(s.stats.bytes, sg.live_bytes as u64);
        assert!(
            sg.used > sg.live_bytes,
            "the overwritten item's bytes are dead"
        );
    }

    #[test]
    fn lookups_drop_expired_and_flushed_items_and_count_them() {
        let g = global(1 << 20);
        let (mut s, seg) = shard(&g);
        put(&mut s, &g, seg, b"soon", b"v", T0 + 5);
        put(&mut s, &g, seg, b"old", b"v", 0);
        assert!(value_of(&mut s, &g, b"soon", T0 + 4).is_some());
        assert!(value_of(&mut s, &g, b"soon", T0 + 5).is_none());
        assert_eq!(s.stats.get_expired, 1);
        assert_eq!(
            s.stats.expired_unfetched, 1,
            "never bumped, so never fetched"
        );
        // A flush cutoff at or after the item's time hides it.
        g.oldest_live.store(T0, Ordering::Relaxed);
        assert!(value_of(&mut s, &g, b"old", T0 + 1).is_none());
        assert_eq!(s.stats.get_flushed, 1);
        assert_eq!(s.stats.curr_items, 0);
        assert_eq!(s.index.len(), 0);
    }

    #[test]
    fn the_last_item_of_a_sealed_segment_frees_it_but_the_head_is_kept() {
        let g = global(1 << 20);
        let (mut s, first) = shard(&g);
        put(&mut s, &g, first, b"a", b"v", 0);
        assert!(g.mem.try_reserve(4096));
        let second = s
            .segs
            .add(vec![0u8; 4096].into_boxed_slice(), false, Queue::Main);
        s.segs.head = Some(second);
        put(&mut s, &g, second, b"b", b"v", 0);
        let used = g.mem.used();
        let f = s.find(g.hash(b"a"), b"a").unwrap();
        s.unlink(f, Unlink::Deleted);
        s.settle(&g);
        assert!(!s.segs[first].active);
        assert_eq!(
            g.mem.used(),
            used - 4096,
            "no spares kept: the memory is released"
        );
        let f = s.find(g.hash(b"b"), b"b").unwrap();
        s.unlink(f, Unlink::Evicted);
        assert!(s.segs[second].active, "the emptied head stays for writes");
        assert_eq!(s.segs[second].used, 0);
        assert_eq!((s.stats.evictions, s.stats.evicted_unfetched), (1, 1));
        assert_eq!(s.segment_count(), 1);
    }

    #[test]
    fn cas_values_are_unique_across_shards() {
        let mut a = Shard::new(3, 4, 4, 1);
        let mut b = Shard::new(4, 4, 4, 1);
        let (a1, a2, b1) = (a.next_cas(), a.next_cas(), b.next_cas());
        assert!(a1 < a2);
        assert_eq!(a1 & 15, 3);
        assert_eq!(b1 & 15, 4);
        assert_ne!(a1, b1);
    }

    #[test]
    fn an_index_outgrowing_its_reservation_is_charged() {
        let g = global(1 << 30);
        let mut s = Shard::new(0, 4, 1, 1);
        let ghost = s.ghost.bytes() as u64;
        assert_eq!(s.charged(), index::bytes_for(1) as u64 + ghost);
        let mut segs = Vec::new();
        for i in 0..100u32 {
            if i % 50 == 0 {
                assert!(g.mem.try_reserve(4096));
                let seg = s
                    .segs
                    .add(vec![0u8; 4096].into_boxed_slice(), false, Queue::Main);
                s.segs.head = Some(seg);
                segs.push(seg);
            }
            let key = format!("key:{i}");
            put(&mut s, &g, *segs.last().unwrap(), key.as_bytes(), b"v", 0);
        }
        let index_growth = s.index.bytes() as u64 - index::bytes_for(1) as u64;
        assert!(index_growth > 0);
        assert_eq!(g.mem.used(), 2 * 4096 + index_growth);
        assert_eq!(s.charged(), 2 * 4096 + s.index.bytes() as u64 + ghost);
        for i in 0..100u32 {
            let key = format!("key:{i}");
            assert!(value_of(&mut s, &g, key.as_bytes(), T0).is_some(), "{key}");
        }
    }

    #[test]
    fn index_starts_small_and_grows_into_its_charge() {
        // At -m 128 the index is charged for 560K slots up front but allocated small, so a
        // store with few items looks keys up in a few cache-resident buckets.
        let s = store_mb(128);
        let charged = s.mem_used();
        let start = s.stats();
        assert!(
            start.index_bytes <= charged / 8,
            "{} of {charged}",
            start.index_bytes
        );
        let n = 300_000u32;
        for i in 0..n {
            set(&s, &format!("key:{i}"), "v", T0);
        }
        let st = s.stats();
        assert_eq!(st.counters.curr_items, n as u64);
        assert!(st.index_slots > n as u64);
        assert!(st.index_bytes > start.index_bytes);
        // Growing within the reservation charged nothing beyond the segments' memory.
        assert_eq!(st.mem_used, charged + st.segments * (128 << 10));
        assert!((0..n)
            .step_by(97)
            .all(|i| val(&s, &format!("key:{i}"), T0).is_some()));
    }
}
