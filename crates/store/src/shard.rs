//! One shard: its segments, its part of the index, its counters. Every method runs under the
//! shard's mutex; memory is charged to the store-wide pool in `Global`.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::index::Index;
use crate::item::{self, Header, Layout, ACCESSED, DEAD, FETCHED};
use crate::segbuf::{SegBuf, ValueAt};
use crate::stats::Counters;

const OFF_BITS: u64 = 24;
const OFF_MASK: u64 = (1 << OFF_BITS) - 1;
/// Bookkeeping charged for a dedicated large-item buffer besides its bytes.
const LARGE_OVERHEAD: u64 = 64;
/// How many FIFO-oldest segments eviction looks at for one that is mostly dead bytes.
const VICTIM_WINDOW: usize = 4;
/// Index buckets a shard starts with (32 KiB; 16 shards together match memcached's initial
/// 2^16-bucket hash table).
const INDEX_START_BUCKETS: usize = 512;
/// Most live items a mostly dead segment may hold to be rewritten instead of growing memory.
const RECYCLE_MAX_ITEMS: usize = 64;

#[derive(Default)]
pub struct SegFigures {
    pub segments: u64,
    pub large_items: u64,
    pub large_bytes: u64,
    pub written: u64,
    pub live: u64,
    pub free: u64,
}

pub struct Global {
    pub used: AtomicU64,
    pub limit: AtomicU64,
    pub seg_size: usize,
    pub large_threshold: usize,
    pub oldest_live: AtomicU32,
    pub hasher: foldhash::fast::RandomState,
    /// Emptied segment buffers kept for reuse, still charged to `used`: a segment freed and
    /// another allocated moments later (overwrites of large values) then costs no
    /// munmap, fresh pages and page faults under a shard lock.
    pub spare: Mutex<Vec<Box<[u8]>>>,
    pub spare_max: usize,
    /// False (`-M`): items are never evicted to make room.
    pub evictions: bool,
}

impl Global {
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn try_reserve(&self, n: u64) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            if cur + n > limit {
                return false;
            }
            match self
                .used
                .compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }

    pub fn release(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Keeps an emptied segment buffer (charged) for reuse, or frees it when enough are kept.
    pub fn put_spare(&self, buf: Box<[u8]>) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < self.spare_max && !self.over_limit() {
            spare.push(buf);
        } else {
            drop(spare);
            self.release(buf.len() as u64);
        }
    }

    /// A kept segment buffer; its memory is already charged.
    pub fn take_spare(&self) -> Option<Box<[u8]>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Frees one kept buffer so its charge can go elsewhere. False when none is kept.
    pub fn drop_spare(&self) -> bool {
        let buf = self.take_spare();
        match buf {
            Some(b) => {
                self.release(b.len() as u64);
                true
            }
            None => false,
        }
    }

    pub fn over_limit(&self) -> bool {
        self.used.load(Ordering::Relaxed) > self.limit.load(Ordering::Relaxed)
    }

    /// memcached's item_is_flushed, with `time` the item's last update/access time.
    pub fn is_flushed(&self, time: u32, now: u32) -> bool {
        let ol = self.oldest_live.load(Ordering::Relaxed);
        ol != 0 && ol <= now && time <= ol
    }
}

fn expired(exptime: u32, now: u32) -> bool {
    exptime != 0 && exptime <= now
}

struct Seg {
    buf: SegBuf,
    used: usize,
    live_bytes: usize,
    live_items: usize,
    gen: u32,
    /// Bumped whenever items move or the segment is reset, so a saved walk position
    /// (the reclaim cursor) is known to be stale.
    layout: u32,
    active: bool,
}

impl Seg {
    /// A large item's own buffer (the only segments that are shared).
    fn large(&self) -> bool {
        self.buf.is_shared()
    }

    fn charge(&self) -> u64 {
        self.buf.len() as u64 + if self.large() { LARGE_OVERHEAD } else { 0 }
    }
}

/// A live item found by key.
#[derive(Clone, Copy)]
pub struct Found {
    pub slot: usize,
    pub seg: u32,
    pub off: usize,
    pub l: Layout,
}

/// Not enough memory in this shard; the caller frees some elsewhere and retries.
#[derive(Debug)]
pub struct NeedMem;

/// Why a live item is being removed, for the counters.
#[derive(Clone, Copy, PartialEq)]
pub enum Unlink {
    Deleted,
    Evicted,
    Expired,
    Flushed,
}

pub struct Shard {
    pub id: u64,
    segs: Vec<Seg>,
    free_ids: Vec<u32>,
    fifo: VecDeque<(u32, u32)>,
    head: Option<u32>,
    pub index: Index,
    /// Index buckets already charged to the limit: growing up to this costs no memory budget.
    index_reserved: usize,
    cas_counter: u64,
    pub stats: Counters,
    pub charged: u64,
    reclaim_seg: usize,
    reclaim_off: usize,
    reclaim_layout: u32,
    nshards_bits: u32,
    pending_release: u64,
    /// Emptied segment buffers (still charged) for `settle` to hand to `Global::put_spare`.
    pending_spare: Vec<Box<[u8]>>,
    active_segs: usize,
    /// Latest `now` seen, for eviction paths that are not handed one.
    now: u32,
}

pub fn loc_of(seg: u32, off: usize) -> u64 {
    ((seg as u64) << OFF_BITS) | off as u64
}
fn split_loc(loc: u64) -> (u32, usize) {
    ((loc >> OFF_BITS) as u32, (loc & OFF_MASK) as usize)
}

/// Hash of the key stored at `loc`, for index rebuilds and cuckoo kicks.
fn hash_at(segs: &[Seg], g: &Global, loc: u64) -> u64 {
    let (s, o) = split_loc(loc);
    let buf = &segs[s as usize].buf[o..];
    let l = item::parse(buf);
    g.hash(&buf[l.key..l.key + l.key_len])
}

impl Shard {
    /// `index_buckets` is the index size charged up front; the index itself starts small
    /// and doubles into that reservation as items arrive.
    pub fn new(id: u64, nshards_bits: u32, index_buckets: usize) -> Shard {
        Shard {
            id,
            segs: Vec::new(),
            free_ids: Vec::new(),
            fifo: VecDeque::new(),
            head: None,
            index: Index::new(index_buckets.min(INDEX_START_BUCKETS)),
            index_reserved: index_buckets,
            cas_counter: 0,
            stats: Counters::default(),
            charged: 0,
            reclaim_seg: 0,
            reclaim_off: 0,
            reclaim_layout: 0,
            nshards_bits,
            pending_release: 0,
            pending_spare: Vec::new(),
            active_segs: 0,
            now: 0,
        }
    }

    /// Unique across shards: the shard id sits in the low bits.
    pub fn next_cas(&mut self) -> u64 {
        self.cas_counter += 1;
        (self.cas_counter << self.nshards_bits) | self.id
    }

    pub fn buf(&self, seg: u32, off: usize) -> &[u8] {
        &self.segs[seg as usize].buf[off..]
    }
    /// The header and key of the item at `off` (what changes once an item is stored).
    fn header_mut(&mut self, seg: u32, off: usize, l: &Layout) -> &mut [u8] {
        self.segs[seg as usize].buf.header_mut(off, off + l.value)
    }

    pub fn index_reserved_bytes(&self) -> u64 {
        (self.index_reserved * crate::index::WAYS * 8) as u64
    }

    /// Last access time of the first live item of the oldest segment: about the oldest
    /// item's (memcached's per-class `age`).
    pub fn oldest_item_time(&self) -> Option<u32> {
        let &(seg, _) = self.fifo.iter().find(|&&(id, gen)| {
            self.segs[id as usize].active && self.segs[id as usize].gen == gen
        })?;
        let s = &self.segs[seg as usize];
        let mut off = 0;
        while off < s.used {
            let l = item::parse(&s.buf[off..]);
            if l.bits & DEAD == 0 {
                return Some(item::time(&s.buf[off..], &l));
            }
            off += l.total();
        }
        None
    }

    pub fn segment_count(&self) -> usize {
        self.active_segs
    }

    /// Index lookup without liveness checks.
    pub fn find(&self, h: u64, key: &[u8]) -> Option<Found> {
        let segs = &self.segs;
        let slot = self.index.find(h, |loc| {
            let (s, o) = split_loc(loc);
            let buf = &segs[s as usize].buf[o..];
            let kl = buf[1] as usize;
            if kl != key.len() {
                return false;
            }
            let l = item::parse(buf);
            &buf[l.key..l.key + kl] == key
        })?;
        let (seg, off) = split_loc(self.index.loc(slot));
        let l = item::parse(&self.segs[seg as usize].buf[off..]);
        Some(Found { slot, seg, off, l })
    }

    /// Lookup that lazily drops expired or flushed items, counted as get_expired /
    /// get_flushed whatever the command (as memcached's do_item_get does).
    pub fn find_live(&mut self, g: &Global, h: u64, key: &[u8], now: u32) -> Option<Found> {
        self.now = now;
        let f = self.find(h, key)?;
        let buf = self.buf(f.seg, f.off);
        if g.is_flushed(item::time(buf, &f.l), now) {
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

    fn mark_dead(&mut self, seg: u32, off: usize, l: &Layout, why: Unlink) {
        let total = l.total();
        let bits = self.buf(seg, off)[0];
        self.header_mut(seg, off, l)[0] = bits | DEAD;
        let s = &mut self.segs[seg as usize];
        s.live_bytes -= total;
        s.live_items -= 1;
        self.stats.curr_items -= 1;
        self.stats.bytes -= total as u64;
        match why {
            Unlink::Evicted => {
                self.stats.evictions += 1;
                let last_access = item::time(self.buf(seg, off), l);
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
            Unlink::Deleted | Unlink::Flushed => {}
        }
        let s = &mut self.segs[seg as usize];
        if s.live_items == 0 {
            if s.large() || Some(seg) != self.head {
                self.free_seg(seg);
            } else {
                // An empty head is kept for writes, from its start.
                s.used = 0;
                s.layout = s.layout.wrapping_add(1);
            }
        }
    }

    fn free_seg(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        debug_assert!(s.active);
        let charge = s.charge();
        let buf = std::mem::take(&mut s.buf);
        s.active = false;
        s.used = 0;
        s.gen = s.gen.wrapping_add(1);
        s.layout = s.layout.wrapping_add(1);
        self.free_ids.push(seg);
        self.active_segs -= 1;
        if self.head == Some(seg) {
            self.head = None;
        }
        self.charged -= charge;
        match buf {
            SegBuf::Owned(buf) => self.pending_spare.push(buf),
            // A large segment's memory goes when its last reader lets go of it.
            SegBuf::Shared(_) => self.pending_release += charge,
        }
    }

    /// Memory freed while the caller had no `Global` at hand; handed back by `settle`.
    pub fn settle(&mut self, g: &Global) {
        if self.pending_release > 0 {
            g.release(self.pending_release);
            self.pending_release = 0;
        }
        for buf in self.pending_spare.drain(..) {
            g.put_spare(buf);
        }
    }

    fn new_seg(&mut self, buf: Box<[u8]>, large: bool) -> u32 {
        let seg = Seg {
            buf: if large {
                SegBuf::shared(buf)
            } else {
                SegBuf::Owned(buf)
            },
            used: 0,
            live_bytes: 0,
            live_items: 0,
            gen: 0,
            layout: 0,
            active: true,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                let old = &self.segs[id as usize];
                let (gen, layout) = (old.gen, old.layout.wrapping_add(1));
                self.segs[id as usize] = Seg { gen, layout, ..seg };
                id
            }
            None => {
                self.segs.push(seg);
                (self.segs.len() - 1) as u32
            }
        };
        self.charged += self.segs[id as usize].charge();
        self.active_segs += 1;
        if self.fifo.len() > 2 * self.active_segs + 64 {
            // Drop entries of freed segments so the queue stays proportional to live ones.
            let segs = &self.segs;
            self.fifo
                .retain(|&(i, gen)| segs[i as usize].active && segs[i as usize].gen == gen);
        }
        self.fifo.push_back((id, self.segs[id as usize].gen));
        id
    }

    /// Oldest segment still in use, dropping stale FIFO entries on the way.
    fn oldest(&mut self) -> Option<u32> {
        while let Some(&(id, gen)) = self.fifo.front() {
            let s = &self.segs[id as usize];
            if s.active && s.gen == gen {
                return Some(id);
            }
            self.fifo.pop_front();
        }
        None
    }

    /// Drops every item of the oldest segment and gives its memory back.
    pub fn evict_oldest(&mut self, g: &Global) -> bool {
        if !g.evictions {
            return false;
        }
        let Some(seg) = self.oldest() else {
            return false;
        };
        self.fifo.pop_front();
        match self.head {
            // Second chance for recently read items while the head has room.
            Some(head) if head != seg && !self.segs[seg as usize].large() => {
                self.move_to_head(g, seg, head, true)
            }
            _ => {
                self.drop_items(seg, g, 0);
                if self.segs[seg as usize].active {
                    self.free_seg(seg);
                }
                self.settle(g);
            }
        }
        true
    }

    /// Walks a segment: live items are kept (moved to the front of the same buffer) when
    /// `keep` allows, else evicted. Returns the compacted length.
    fn drop_items(&mut self, seg: u32, g: &Global, keep_budget: usize) -> usize {
        let now = self.now;
        self.compact(seg, g, keep_budget, false, now)
    }

    fn compact(
        &mut self,
        seg: u32,
        g: &Global,
        keep_budget: usize,
        keep_all_live: bool,
        now: u32,
    ) -> usize {
        let used = self.segs[seg as usize].used;
        let mut off = 0;
        let mut write = 0;
        // Items are visited in order and only ever move left, so the walk stays valid.
        while off < used {
            let l = item::parse(&self.segs[seg as usize].buf[off..]);
            let total = l.total();
            let bits = l.bits;
            if bits & DEAD == 0 {
                let buf = &self.segs[seg as usize].buf[off..];
                let gone = if now != 0 && g.is_flushed(item::time(buf, &l), now) {
                    Some(Unlink::Flushed)
                } else if now != 0 && expired(item::exptime(buf, &l), now) {
                    Some(Unlink::Expired)
                } else {
                    None
                };
                let h = g.hash(&buf[l.key..l.key + l.key_len]);
                let slot = self
                    .index
                    .find_loc(h, loc_of(seg, off))
                    .expect("live item is indexed");
                let keep = gone.is_none()
                    && (keep_all_live || bits & ACCESSED != 0)
                    && write + total <= keep_budget;
                if keep {
                    let s = &mut self.segs[seg as usize];
                    if write != off {
                        s.buf.copy_within(off..off + total, write);
                    }
                    s.buf[write] &= !ACCESSED;
                    self.index.set_loc(slot, loc_of(seg, write));
                    write += total;
                } else {
                    let f = Found { slot, seg, off, l };
                    if gone.is_some() {
                        self.stats.reclaimed += 1;
                    }
                    // Keep the segment alive while we walk it.
                    self.segs[seg as usize].live_items += 1;
                    self.unlink(f, gone.unwrap_or(Unlink::Evicted));
                    self.segs[seg as usize].live_items -= 1;
                }
            }
            off += total;
        }
        let s = &mut self.segs[seg as usize];
        s.used = write;
        s.layout = s.layout.wrapping_add(1);
        write
    }

    /// Frees memory or space for a normal item of `size` bytes in the head segment.
    fn make_room(&mut self, g: &Global, size: usize, now: u32) -> Result<(), NeedMem> {
        for _ in 0..64 {
            if let Some(h) = self.head {
                let s = &self.segs[h as usize];
                if s.buf.len() - s.used >= size {
                    return Ok(());
                }
            }
            let spare = if g.over_limit() { None } else { g.take_spare() };
            if let Some(buf) = spare {
                let id = self.new_seg(buf, false);
                self.head = Some(id);
                continue;
            }
            if !g.over_limit() && self.recycle_dead(g, now) {
                continue;
            }
            if !g.over_limit() && g.try_reserve(g.seg_size as u64) {
                let id = self.new_seg(vec![0u8; g.seg_size].into_boxed_slice(), false);
                self.head = Some(id);
                continue;
            }
            if g.over_limit() {
                if !self.evict_oldest(g) {
                    return Err(NeedMem);
                }
                continue;
            }
            if !g.evictions || !self.recycle(g, now) {
                return Err(NeedMem);
            }
        }
        Err(NeedMem)
    }

    /// Segment-level second chance: the victim (FIFO-oldest, or among the few oldest one that
    /// is mostly dead bytes) is compacted in place keeping recently read items (up to 3/4 of a
    /// segment) and becomes the new head.
    fn recycle(&mut self, g: &Global, now: u32) -> bool {
        let Some(oldest) = self.oldest() else {
            return false;
        };
        let mut victim = oldest;
        let mut best_dead = 0;
        for &(id, gen) in self.fifo.iter().take(VICTIM_WINDOW) {
            let s = &self.segs[id as usize];
            if !s.active || s.gen != gen || s.large() {
                continue;
            }
            let dead = s.used - s.live_bytes;
            if dead * 2 >= s.used && dead > best_dead {
                best_dead = dead;
                victim = id;
            }
        }
        if self.segs[victim as usize].large() {
            return self.evict_oldest(g);
        }
        // Keeping at most 3/4 frees at least a quarter segment, room for any non-large item.
        // A mostly-dead segment keeps all its live items; the FIFO-oldest keeps only read ones.
        self.recycle_in_place(g, victim, g.seg_size * 3 / 4, victim != oldest, now);
        true
    }

    /// Under the limit, rewriting a mostly dead segment in place beats taking fresh memory
    /// when only a few items have to move: a fresh segment costs a page fault per 4 KiB
    /// written (values of 100 KB pay ~25 each), and memory would otherwise grow with dead
    /// bytes up to the limit. The item bound keeps the stall under the shard lock short.
    fn recycle_dead(&mut self, g: &Global, now: u32) -> bool {
        // Drops stale entries so the window sees live segments.
        if self.oldest().is_none() {
            return false;
        }
        let mut victim = None;
        let mut best_dead = 0;
        for &(id, gen) in self.fifo.iter().take(VICTIM_WINDOW) {
            let s = &self.segs[id as usize];
            if !s.active || s.gen != gen || s.large() || Some(id) == self.head {
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
        self.recycle_in_place(g, victim, g.seg_size, true, now);
        true
    }

    /// Compacts `victim` in place (see `compact`) and makes it the head, youngest in the FIFO.
    fn recycle_in_place(
        &mut self,
        g: &Global,
        victim: u32,
        keep_budget: usize,
        keep_all: bool,
        now: u32,
    ) {
        let pos = self
            .fifo
            .iter()
            .position(|&(id, gen)| id == victim && self.segs[id as usize].gen == gen)
            .expect("victim is queued");
        self.fifo.remove(pos);
        self.segs[victim as usize].live_items += 1;
        self.compact(victim, g, keep_budget, keep_all, now);
        self.segs[victim as usize].live_items -= 1;
        let s = &mut self.segs[victim as usize];
        s.gen = s.gen.wrapping_add(1);
        self.fifo.push_back((victim, s.gen));
        self.head = Some(victim);
        self.settle(g);
    }

    /// Room for an item of `size` bytes. Returns the segment to write it in.
    pub fn alloc(&mut self, g: &Global, size: usize, now: u32) -> Result<u32, NeedMem> {
        self.ensure_index_room(g)?;
        if size > g.large_threshold {
            self.reserve_large(g, size as u64 + LARGE_OVERHEAD)?;
            return Ok(self.new_seg(vec![0u8; size].into_boxed_slice(), true));
        }
        self.make_room(g, size, now)?;
        Ok(self.head.expect("make_room leaves a head"))
    }

    /// Makes the buffer in `owned` (taken only on success) a large segment of its own, for
    /// an item whose value was received straight into it (see `Store::store_owned`).
    pub fn adopt_large(
        &mut self,
        g: &Global,
        owned: &mut Option<Box<[u8]>>,
    ) -> Result<u32, NeedMem> {
        self.ensure_index_room(g)?;
        let len = owned.as_ref().map_or(0, |b| b.len());
        self.reserve_large(g, len as u64 + LARGE_OVERHEAD)?;
        let buf = owned.take().expect("adopt_large needs a buffer");
        Ok(self.new_seg(buf, true))
    }

    fn reserve_large(&mut self, g: &Global, charge: u64) -> Result<(), NeedMem> {
        let mut tries = 0;
        while !g.try_reserve(charge) {
            if g.drop_spare() {
                continue;
            }
            tries += 1;
            if tries > 100_000 || !self.evict_oldest(g) {
                return Err(NeedMem);
            }
        }
        Ok(())
    }

    /// Writes the header and key of an item whose value already sits in `seg` right after
    /// them, at `off`; the bytes before `off` become one dead filler item.
    pub fn write_in_place(
        &mut self,
        seg: u32,
        off: usize,
        h: &Header,
        key: &[u8],
        value_len: usize,
    ) -> Layout {
        let total = item::encoded_len(key.len(), value_len, h.flags);
        let s = &mut self.segs[seg as usize];
        item::write_filler(&mut s.buf[..off]);
        let l = item::write_header(&mut s.buf[off..off + total], h, key, value_len);
        s.used = off + total;
        s.live_bytes += total;
        s.live_items += 1;
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        self.stats.bytes += total as u64;
        l
    }

    /// Gives back a large segment that `alloc` returned but that was not written.
    pub fn unalloc(&mut self, g: &Global, seg: u32) {
        let s = &self.segs[seg as usize];
        if s.large() && s.used == 0 {
            self.free_seg(seg);
            self.settle(g);
        }
    }

    /// Writes an item at the end of `seg`; the value is produced by `fill` into a slice of
    /// exactly `value_len` bytes. Returns its offset.
    pub fn write(
        &mut self,
        seg: u32,
        h: &Header,
        key: &[u8],
        value_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> (usize, Layout) {
        let total = item::encoded_len(key.len(), value_len, h.flags);
        let s = &mut self.segs[seg as usize];
        let off = s.used;
        let l = item::write_header(&mut s.buf[off..off + total], h, key, value_len);
        fill(&mut s.buf[off + l.value..off + l.value + value_len]);
        s.used += total;
        s.live_bytes += total;
        s.live_items += 1;
        self.stats.curr_items += 1;
        self.stats.total_items += 1;
        self.stats.bytes += total as u64;
        (off, l)
    }

    /// Copies `len` bytes of an existing item's value into a freshly reserved destination.
    pub fn copy_value(&mut self, src: (u32, usize), len: usize, dst: (u32, usize)) {
        if len == 0 {
            return;
        }
        let (ss, so) = src;
        let (ds, d) = dst;
        if ss == ds {
            self.segs[ss as usize].buf.copy_within(so..so + len, d);
        } else {
            let (a, b) = if ss < ds {
                let (lo, hi) = self.segs.split_at_mut(ds as usize);
                (&lo[ss as usize], &mut hi[0])
            } else {
                let (lo, hi) = self.segs.split_at_mut(ss as usize);
                (&hi[0], &mut lo[ds as usize])
            };
            b.buf[d..d + len].copy_from_slice(&a.buf[so..so + len]);
        }
    }

    /// Points `slot` (or a new index entry) at the item just written, retiring the old one.
    pub fn link(&mut self, g: &Global, h: u64, old: Option<Found>, seg: u32, off: usize) {
        let loc = loc_of(seg, off);
        match old {
            Some(f) => {
                self.index.set_loc(f.slot, loc);
                self.mark_dead(f.seg, f.off, &f.l, Unlink::Deleted);
            }
            None => self.index_insert(g, h, loc),
        }
        self.settle(g);
    }

    /// Grows the index before it gets too full to insert cheaply, taking the memory from
    /// this shard's oldest segments if needed.
    pub fn ensure_index_room(&mut self, g: &Global) -> Result<(), NeedMem> {
        if (self.index.len() + 1) * 20 < self.index.capacity() * 19 {
            return Ok(());
        }
        if self.grow_index_within_reservation(g) {
            return Ok(());
        }
        let before = self.index.bytes() as u64;
        let mut n = self.index.nbuckets() * 3 / 2 + 1;
        let delta = (n * crate::index::WAYS * 8) as u64 - before;
        loop {
            if g.try_reserve(delta) {
                break;
            }
            if g.drop_spare() {
                continue;
            }
            if !self.evict_oldest(g) {
                return Err(NeedMem);
            }
            if (self.index.len() + 1) * 20 < self.index.capacity() * 19 {
                return Ok(());
            }
        }
        let segs = &self.segs;
        let hash_of = |l: u64| hash_at(segs, g, l);
        while !self.index.rebuild(n, &hash_of) {
            n = n * 3 / 2 + 1;
        }
        let after = self.index.bytes() as u64;
        self.charged += after - before;
        // A rebuild that had to go bigger than reserved (very rare) overshoots for a moment.
        if after > before + delta {
            g.used.fetch_add(after - before - delta, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Doubles an index still smaller than its charged size (at most up to that size). A
    /// small index keeps lookups in cache while the store holds few items: the full-size
    /// index of a 1 GB limit is 64 MiB of mostly empty buckets, one cache and TLB miss per
    /// lookup. False when the index already has its reserved size.
    fn grow_index_within_reservation(&mut self, g: &Global) -> bool {
        let mut n = self.index.nbuckets();
        if n >= self.index_reserved {
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
                    let segs = &self.segs;
                    let hash_of = |l: u64| hash_at(segs, g, l);
                    let before = self.index.bytes() as u64;
                    let mut n = self.index.nbuckets() * 3 / 2 + 1;
                    while !self.index.rebuild(n, &hash_of) {
                        n = n * 3 / 2 + 1;
                    }
                    // The index may overshoot the limit for a moment; the next allocation
                    // evicts back under it.
                    let after = self.index.bytes() as u64;
                    g.used.fetch_add(after - before, Ordering::AcqRel);
                    self.charged += after - before;
                }
            }
        }
    }

    /// Drops everything (flush_all) and gives all segment memory back.
    pub fn clear(&mut self, g: &Global) {
        for id in 0..self.segs.len() {
            if self.segs[id].active {
                self.free_seg(id as u32);
            }
        }
        self.fifo.clear();
        self.head = None;
        self.index.clear();
        self.stats.curr_items = 0;
        self.stats.bytes = 0;
        self.settle(g);
    }

    /// Bounded background work: drop expired/flushed items, free fully dead segments, compact
    /// mostly-dead ones, get back under a lowered limit. Returns items reclaimed.
    pub fn reclaim(&mut self, g: &Global, now: u32, budget: usize) -> usize {
        self.now = now;
        let before = self.stats.reclaimed;
        // A lowered limit: every shard gives back a few segments per call.
        while g.over_limit() && g.drop_spare() {}
        let mut evicted = 0;
        while g.over_limit() && evicted < 16 && self.evict_oldest(g) {
            evicted += 1;
        }
        let mut visited = 0;
        let nsegs = self.segs.len();
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
            let s = &self.segs[seg as usize];
            if s.layout != self.reclaim_layout {
                // Items moved since the cursor was saved: walk this segment from its start.
                self.reclaim_layout = s.layout;
                self.reclaim_off = 0;
            }
            if !s.active || self.reclaim_off >= s.used {
                let compactable = s.active && Some(seg) != self.head && !s.large() && s.used > 0;
                self.reclaim_seg += 1;
                self.reclaim_off = 0;
                segs_seen += 1;
                if compactable && move_budget > 0 {
                    move_budget = move_budget.saturating_sub(self.maybe_compact(g, seg));
                }
                continue;
            }
            let off = self.reclaim_off;
            let l = item::parse(&s.buf[off..]);
            self.reclaim_off += l.total();
            visited += 1;
            if l.bits & DEAD != 0 {
                continue;
            }
            let buf = &s.buf[off..];
            let why = if g.is_flushed(item::time(buf, &l), now) {
                Unlink::Flushed
            } else if expired(item::exptime(buf, &l), now) {
                Unlink::Expired
            } else {
                continue;
            };
            let h = g.hash(&buf[l.key..l.key + l.key_len]);
            if let Some(slot) = self.index.find_loc(h, loc_of(seg, off)) {
                self.stats.reclaimed += 1;
                self.unlink(Found { slot, seg, off, l }, why);
                if !self.segs[seg as usize].active {
                    self.reclaim_seg += 1;
                    self.reclaim_off = 0;
                }
            }
        }
        self.settle(g);
        (self.stats.reclaimed - before) as usize
    }

    /// A sealed segment that is at least 3/4 dead bytes has its live items moved to the head
    /// when the head has room, so the segment's memory goes back to the pool. Returns the
    /// bytes moved.
    fn maybe_compact(&mut self, g: &Global, seg: u32) -> usize {
        let s = &self.segs[seg as usize];
        if (s.used - s.live_bytes) * 4 < s.used * 3 {
            return 0;
        }
        let Some(head) = self.head else { return 0 };
        let hs = &self.segs[head as usize];
        let live = s.live_bytes;
        if hs.buf.len() - hs.used < live {
            return 0;
        }
        self.move_to_head(g, seg, head, false);
        live
    }

    /// Moves a sealed segment's live items into the head while they fit (only recently read
    /// ones if `only_accessed`), evicts the rest, and frees the segment.
    fn move_to_head(&mut self, g: &Global, seg: u32, head: u32, only_accessed: bool) {
        let used = self.segs[seg as usize].used;
        let now = self.now;
        let mut off = 0;
        // Keep the segment from being freed under us while items die.
        self.segs[seg as usize].live_items += 1;
        while off < used {
            let l = item::parse(&self.segs[seg as usize].buf[off..]);
            let total = l.total();
            if l.bits & DEAD == 0 {
                let buf = &self.segs[seg as usize].buf[off..];
                let gone = if now != 0 && g.is_flushed(item::time(buf, &l), now) {
                    Some(Unlink::Flushed)
                } else if now != 0 && expired(item::exptime(buf, &l), now) {
                    Some(Unlink::Expired)
                } else {
                    None
                };
                let h = g.hash(&buf[l.key..l.key + l.key_len]);
                let slot = self.index.find_loc(h, loc_of(seg, off)).expect("indexed");
                let hs = &self.segs[head as usize];
                let fits = hs.buf.len() - hs.used >= total;
                if gone.is_none() && fits && (!only_accessed || l.bits & ACCESSED != 0) {
                    let dst = hs.used;
                    self.copy_value((seg, off), total, (head, dst));
                    let hs = &mut self.segs[head as usize];
                    if only_accessed {
                        hs.buf[dst] &= !ACCESSED;
                    }
                    hs.used += total;
                    hs.live_bytes += total;
                    hs.live_items += 1;
                    self.index.set_loc(slot, loc_of(head, dst));
                    let s = &mut self.segs[seg as usize];
                    s.buf[off] |= DEAD;
                    s.live_bytes -= total;
                    s.live_items -= 1;
                } else {
                    if gone.is_some() {
                        self.stats.reclaimed += 1;
                    }
                    let f = Found { slot, seg, off, l };
                    self.unlink(f, gone.unwrap_or(Unlink::Evicted));
                }
            }
            off += total;
        }
        self.segs[seg as usize].live_items -= 1;
        self.free_seg(seg);
        self.settle(g);
    }

    /// Per-shard figures for `stats slabs` / `stats items`.
    pub fn segment_figures(&self) -> SegFigures {
        let mut f = SegFigures::default();
        for s in self.segs.iter().filter(|s| s.active) {
            if s.large() {
                f.large_items += 1;
                f.large_bytes += s.buf.len() as u64;
            } else {
                f.segments += 1;
                f.free += (s.buf.len() - s.used) as u64;
            }
            f.written += s.used as u64;
            f.live += s.live_bytes as u64;
        }
        f
    }

    pub fn bump(&mut self, f: &Found, now: u32) {
        let buf = self.header_mut(f.seg, f.off, &f.l);
        buf[0] |= FETCHED | ACCESSED;
        item::set_time(buf, &f.l, now);
    }

    pub fn set_bits(&mut self, f: &Found, set: u8, clear: u8) {
        let b = &mut self.header_mut(f.seg, f.off, &f.l)[0];
        *b = (*b | set) & !clear;
    }

    pub fn set_exptime(&mut self, f: &Found, e: u32) {
        item::set_exptime(self.header_mut(f.seg, f.off, &f.l), &f.l, e);
    }

    pub fn set_cas(&mut self, f: &Found, c: u64) {
        item::set_cas(self.header_mut(f.seg, f.off, &f.l), &f.l, c);
    }

    /// The item's value for a rewrite in place; None while a reply may be reading it
    /// (the caller then stores a new item, as memcached does for an item it is sending).
    pub fn value_mut(&mut self, f: &Found) -> Option<&mut [u8]> {
        if self.segs[f.seg as usize].buf.is_pinned() {
            return None;
        }
        let v = f.off + f.l.value;
        Some(&mut self.segs[f.seg as usize].buf[v..v + f.l.value_len])
    }

    /// Where the item's value lives, for `ValueAt::pin`.
    pub fn value_at(&self, f: &Found) -> ValueAt<'_> {
        ValueAt::new(
            &self.segs[f.seg as usize].buf,
            f.off + f.l.value,
            f.l.value_len,
        )
    }
}
