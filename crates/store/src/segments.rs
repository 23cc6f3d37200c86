//! One shard's segments and their lifecycle: buffers items are written into back to back
//! (plus one dedicated, shared buffer per large item), the two FIFOs of segments by age that
//! eviction takes victims from (small: new items; main: items read while in small, and
//! large items), each queue's open head segment writes go to, and the memory each segment
//! is charged for. What happens to the items inside a victim is `eviction`'s business.

use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

use crate::budget::Budget;
use crate::item::{self, Header, Layout};
use crate::segbuf::SegBuf;

/// Bookkeeping charged for a dedicated large-item buffer besides its bytes.
pub(crate) const LARGE_OVERHEAD: u64 = 64;

/// The FIFO a segment belongs to (S3-FIFO's small and main queues, see docs/storage.md,
/// "Eviction").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Queue {
    /// Newly stored keys: a one-off key leaves from here without touching the main queue.
    Small = 0,
    /// Items read while in the small queue, rewrites of read items, and large items.
    Main = 1,
}

/// One segment: a buffer filled from the front, with the live share of what was written.
pub(crate) struct Seg {
    pub buf: SegBuf,
    /// Bytes written (live or dead); writes go here.
    pub used: usize,
    pub live_bytes: usize,
    pub live_items: usize,
    /// Bumped when the segment is freed or requeued, so older FIFO entries are known stale.
    pub gen: u32,
    /// Bumped whenever items move or the segment is reset, so a saved walk position
    /// (the reclaim cursor) is known to be stale.
    pub layout: u32,
    pub active: bool,
    pub queue: Queue,
}

impl Seg {
    /// A large item's own buffer (the only segments that are shared).
    pub fn large(&self) -> bool {
        self.buf.is_shared()
    }

    /// Bytes charged to the budget for this segment.
    pub fn charge(&self) -> u64 {
        self.buf.len() as u64 + if self.large() { LARGE_OVERHEAD } else { 0 }
    }
}

/// Per-shard figures for `stats slabs` / `stats items`.
#[derive(Default)]
pub(crate) struct SegFigures {
    pub segments: u64,
    pub large_items: u64,
    pub large_bytes: u64,
    pub written: u64,
    pub live: u64,
    pub free: u64,
}

/// A shard's segment table. Ids are reused after a segment is freed.
#[derive(Default)]
pub(crate) struct Segments {
    segs: Vec<Seg>,
    free_ids: Vec<u32>,
    /// Per queue, (id, gen) by age, oldest first; entries whose gen no longer matches are stale.
    fifos: [VecDeque<(u32, u32)>; 2],
    /// The open segment of the main queue that items are written to.
    pub head: Option<u32>,
    /// The open segment of the small queue.
    pub small_head: Option<u32>,
    active: usize,
    /// Segments (not large ones) in use per queue.
    queued: [usize; 2],
    charged: u64,
    /// Memory freed while no budget was at hand; handed back by `settle`.
    pending_release: u64,
    /// Emptied segment buffers (still charged) for `settle` to hand to `Budget::put_spare`.
    pending_spare: Vec<Box<[u8]>>,
}

impl Index<u32> for Segments {
    type Output = Seg;
    fn index(&self, id: u32) -> &Seg {
        &self.segs[id as usize]
    }
}

impl IndexMut<u32> for Segments {
    fn index_mut(&mut self, id: u32) -> &mut Seg {
        &mut self.segs[id as usize]
    }
}

impl Segments {
    /// Segments in use.
    pub fn count(&self) -> usize {
        self.active
    }

    /// Segments (large ones apart) in queue `q`.
    pub fn queued(&self, q: Queue) -> usize {
        self.queued[q as usize]
    }

    /// The open segment of queue `q`.
    pub fn head_of(&self, q: Queue) -> Option<u32> {
        match q {
            Queue::Small => self.small_head,
            Queue::Main => self.head,
        }
    }

    /// Makes `seg`, already in queue `q`, that queue's open segment.
    pub fn set_head(&mut self, q: Queue, seg: u32) {
        debug_assert_eq!(self.segs[seg as usize].queue, q);
        match q {
            Queue::Small => self.small_head = Some(seg),
            Queue::Main => self.head = Some(seg),
        }
    }

    /// Whether `seg` is the open segment of its queue.
    pub fn is_head(&self, seg: u32) -> bool {
        self.head == Some(seg) || self.small_head == Some(seg)
    }

    /// Size of the table (ids in use or free), for walks over it.
    pub fn table_len(&self) -> usize {
        self.segs.len()
    }

    /// Bytes charged for the segments in use.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// The bytes of segment `seg` from `off`.
    pub fn buf(&self, seg: u32, off: usize) -> &[u8] {
        &self.segs[seg as usize].buf[off..]
    }

    /// The header and key of the item at `off` (what changes once an item is stored).
    pub fn header_mut(&mut self, seg: u32, off: usize, l: &Layout) -> &mut [u8] {
        self.segs[seg as usize].buf.header_mut(off, off + l.value)
    }

    /// Puts `buf` (already charged to the budget) in use as the youngest segment of queue
    /// `q` (large items always go to the main queue).
    pub fn add(&mut self, buf: Box<[u8]>, large: bool, q: Queue) -> u32 {
        let q = if large { Queue::Main } else { q };
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
            queue: q,
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
        self.active += 1;
        if !large {
            self.queued[q as usize] += 1;
        }
        let fifo = &mut self.fifos[q as usize];
        if fifo.len() > 2 * self.active + 64 {
            // Drop entries of freed segments so the queue stays proportional to live ones.
            let segs = &self.segs;
            fifo.retain(|&(i, gen)| segs[i as usize].active && segs[i as usize].gen == gen);
        }
        fifo.push_back((id, self.segs[id as usize].gen));
        id
    }

    /// Takes a segment out of use; its memory goes back at the next `settle`.
    pub fn free(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        debug_assert!(s.active);
        let charge = s.charge();
        let queue = s.queue;
        let buf = std::mem::take(&mut s.buf);
        s.active = false;
        s.used = 0;
        s.gen = s.gen.wrapping_add(1);
        s.layout = s.layout.wrapping_add(1);
        if !buf.is_shared() {
            self.queued[queue as usize] -= 1;
        }
        self.free_ids.push(seg);
        self.active -= 1;
        if self.head == Some(seg) {
            self.head = None;
        }
        if self.small_head == Some(seg) {
            self.small_head = None;
        }
        self.charged -= charge;
        match buf {
            SegBuf::Owned(buf) => self.pending_spare.push(buf),
            // A large segment's memory goes when its last reader lets go of it.
            SegBuf::Shared(_) => self.pending_release += charge,
        }
    }

    /// A segment whose last live item just died: freed, except that an empty head is kept
    /// for writes, from its start.
    pub fn emptied(&mut self, seg: u32) {
        if self.segs[seg as usize].large() || !self.is_head(seg) {
            self.free(seg);
        } else {
            let s = &mut self.segs[seg as usize];
            s.used = 0;
            s.layout = s.layout.wrapping_add(1);
        }
    }

    /// Frees every segment (flush_all).
    pub fn free_all(&mut self) {
        for id in 0..self.segs.len() as u32 {
            if self.segs[id as usize].active {
                self.free(id);
            }
        }
        self.fifos.iter_mut().for_each(VecDeque::clear);
        self.head = None;
        self.small_head = None;
    }

    /// Hands memory freed since the last call back to the budget. Inlined: every write
    /// settles, and an outlined call costs ~20 instructions where the inlined checks cost ~4.
    #[inline]
    pub fn settle(&mut self, mem: &Budget) {
        if self.pending_release > 0 {
            mem.release(self.pending_release);
            self.pending_release = 0;
        }
        // Every operation settles; skipping an empty drain saves a get ~20 instructions.
        if !self.pending_spare.is_empty() {
            for buf in self.pending_spare.drain(..) {
                mem.put_spare(buf);
            }
        }
    }

    /// Whether segment `id` is in use.
    pub fn is_active(&self, id: u32) -> bool {
        self.segs.get(id as usize).is_some_and(|s| s.active)
    }

    fn is_current(&self, id: u32, gen: u32) -> bool {
        let s = &self.segs[id as usize];
        s.active && s.gen == gen
    }

    /// Oldest segment of queue `q` still in use, dropping stale FIFO entries on the way.
    pub fn oldest(&mut self, q: Queue) -> Option<u32> {
        while let Some(&(id, gen)) = self.fifos[q as usize].front() {
            if self.is_current(id, gen) {
                return Some(id);
            }
            self.fifos[q as usize].pop_front();
        }
        None
    }

    /// Removes the oldest entry from queue `q` (after `oldest(q)` returned it).
    pub fn dequeue_oldest(&mut self, q: Queue) {
        self.fifos[q as usize].pop_front();
    }

    /// Segments in use among the first `n` entries of queue `q`, oldest first.
    pub fn oldest_few(&self, q: Queue, n: usize) -> impl Iterator<Item = u32> + '_ {
        self.fifos[q as usize]
            .iter()
            .take(n)
            .filter(|&&(id, gen)| self.is_current(id, gen))
            .map(|&(id, _)| id)
    }

    /// Every segment in use, main queue then small queue, each oldest first: about the
    /// order items would leave in.
    pub fn by_age(&self) -> impl Iterator<Item = u32> + '_ {
        self.oldest_few(Queue::Main, usize::MAX)
            .chain(self.oldest_few(Queue::Small, usize::MAX))
    }

    /// Makes `seg` (rewritten in place, or dequeued) the youngest segment and the head of
    /// queue `q`, moving it there from the queue it was in.
    pub fn requeue_as_head(&mut self, seg: u32, q: Queue) {
        self.requeue(seg, q);
        self.set_head(q, seg);
    }

    /// Makes `seg` the youngest segment of queue `q`, moving it there from the queue it was
    /// in (and out of its queue's head).
    pub fn requeue(&mut self, seg: u32, q: Queue) {
        let from = self.segs[seg as usize].queue;
        let fifo = &mut self.fifos[from as usize];
        if let Some(pos) = fifo
            .iter()
            .position(|&(id, gen)| id == seg && self.segs[id as usize].gen == gen)
        {
            fifo.remove(pos);
        }
        if self.head == Some(seg) {
            self.head = None;
        }
        if self.small_head == Some(seg) {
            self.small_head = None;
        }
        let s = &mut self.segs[seg as usize];
        s.gen = s.gen.wrapping_add(1);
        s.queue = q;
        if !s.large() {
            self.queued[from as usize] -= 1;
            self.queued[q as usize] += 1;
        }
        self.fifos[q as usize].push_back((seg, s.gen));
    }

    /// Writes an item at the end of `seg`; the value is produced by `fill` into a slice of
    /// exactly `value_len` bytes. Returns its offset and layout.
    pub fn write(
        &mut self,
        seg: u32,
        h: &Header,
        key: &[u8],
        value_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> (usize, Layout) {
        let total = h.encoded_len(key.len(), value_len);
        let s = &mut self.segs[seg as usize];
        let off = s.used;
        let l = item::write_header(&mut s.buf[off..off + total], h, key, value_len);
        fill(&mut s.buf[off + l.value..off + l.value + value_len]);
        s.used += total;
        s.live_bytes += total;
        s.live_items += 1;
        (off, l)
    }

    /// Writes the header and key of an item whose value already sits in `seg` right after
    /// them, at `off` with room for the largest header (`item::max_header_len`: 8-byte cas,
    /// exptime field). When the filler in front can take the difference, the header is as
    /// small as `h` allows (4-byte cas, no exptime field when 0), else as many of the two as
    /// fit (the exptime field first, the cas narrowed first); the bytes before the item
    /// become one dead filler item. Returns the item's offset and layout.
    pub fn write_in_place(
        &mut self,
        seg: u32,
        off: usize,
        h: &Header,
        key: &[u8],
        value_len: usize,
    ) -> (usize, Layout) {
        let narrow_ok = item::cas_len(h.cas) == 4;
        let drop_exptime_ok = !item::exptime_field(h.exptime, h.force_exptime);
        let filler_ok = |d: usize| (item::MIN_ITEM..=item::MAX_FILLER).contains(&(off + d));
        let (narrow, drop_exptime) = if narrow_ok && drop_exptime_ok && filler_ok(8) {
            (true, true)
        } else if narrow_ok && filler_ok(4) {
            (true, false)
        } else if drop_exptime_ok && filler_ok(4) {
            (false, true)
        } else {
            (false, false)
        };
        let off = off + if narrow { 4 } else { 0 } + if drop_exptime { 4 } else { 0 };
        let h = Header {
            force_exptime: !drop_exptime,
            ..*h
        };
        let s = &mut self.segs[seg as usize];
        item::write_filler(&mut s.buf[..off]);
        let l = item::write_header_wide(&mut s.buf[off..], &h, key, value_len, !narrow);
        let total = l.total();
        s.used = off + total;
        s.live_bytes += total;
        s.live_items += 1;
        (off, l)
    }

    /// Copies `len` bytes from `src` to `dst` (segment, offset), which may be one segment.
    pub fn copy(&mut self, src: (u32, usize), len: usize, dst: (u32, usize)) {
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

    /// Per-shard figures for `stats slabs` / `stats items`.
    pub fn figures(&self) -> SegFigures {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> Header {
        Header {
            bits: 0,
            cas: 7,
            exptime: 0,
            time: 0,
            flags: 0,
            force_exptime: false,
        }
    }

    fn buf(n: usize) -> Box<[u8]> {
        vec![0u8; n].into_boxed_slice()
    }

    #[test]
    fn segments_age_in_fifo_order_and_freed_ones_drop_out() {
        let mut t = Segments::default();
        let a = t.add(buf(1024), false, Queue::Main);
        let b = t.add(buf(1024), false, Queue::Main);
        let c = t.add(buf(1024), false, Queue::Main);
        assert_eq!(t.count(), 3);
        assert_eq!(t.charged(), 3 * 1024);
        assert_eq!(t.oldest(Queue::Main), Some(a));
        t.free(a);
        assert_eq!(
            t.oldest(Queue::Main),
            Some(b),
            "a freed segment's entry is skipped"
        );
        assert_eq!(t.oldest_few(Queue::Main, 4).collect::<Vec<_>>(), vec![b, c]);
        t.dequeue_oldest(Queue::Main);
        assert_eq!(t.oldest(Queue::Main), Some(c));
        assert_eq!(t.count(), 2);
        assert_eq!(t.charged(), 2 * 1024);
    }

    #[test]
    fn a_freed_id_is_reused_with_a_new_generation() {
        let mut t = Segments::default();
        let a = t.add(buf(1024), false, Queue::Main);
        let (gen, layout) = (t[a].gen, t[a].layout);
        t.free(a);
        assert!(!t[a].active);
        let again = t.add(buf(1024), false, Queue::Main);
        assert_eq!(again, a);
        assert_ne!(t[a].gen, gen, "the old FIFO entry must read as stale");
        assert_ne!(
            t[a].layout, layout,
            "a saved walk position must read as stale"
        );
        // Only the new entry counts.
        assert_eq!(t.oldest_few(Queue::Main, 8).count(), 1);
        assert_eq!(t.table_len(), 1);
    }

    #[test]
    fn freed_memory_goes_back_at_settle_small_as_spare_large_released() {
        let mem = Budget::new(1 << 20, 0, 4);
        let mut t = Segments::default();
        assert!(mem.try_reserve(4096 + 100 + LARGE_OVERHEAD));
        let small = t.add(buf(4096), false, Queue::Main);
        let large = t.add(buf(100), true, Queue::Main);
        assert!(t[large].large() && !t[small].large());
        assert_eq!(t.charged(), 4096 + 100 + LARGE_OVERHEAD);
        t.free(small);
        t.free(large);
        assert_eq!(
            mem.used(),
            4096 + 100 + LARGE_OVERHEAD,
            "nothing given back before settle"
        );
        t.settle(&mem);
        assert_eq!(
            mem.used(),
            4096,
            "the small buffer is kept as a spare, still charged"
        );
        assert_eq!(mem.take_spare().map(|b| b.len()), Some(4096));
        assert_eq!(t.charged(), 0);
    }

    #[test]
    fn writes_append_and_an_emptied_head_is_kept_for_writes() {
        let mut t = Segments::default();
        let s = t.add(buf(1024), false, Queue::Main);
        t.head = Some(s);
        let (o1, l1) = t.write(s, &hdr(), b"k1", 5, |v| v.copy_from_slice(b"hello"));
        let (o2, l2) = t.write(s, &hdr(), b"k2", 3, |v| v.copy_from_slice(b"abc"));
        assert_eq!(o1, 0);
        assert_eq!(o2, l1.total());
        assert_eq!(t[s].used, l1.total() + l2.total());
        assert_eq!(t[s].live_items, 2);
        assert_eq!(&t.buf(s, o2)[l2.value..l2.value + 3], b"abc");
        // Copy a value across segments.
        let d = t.add(buf(1024), false, Queue::Main);
        t.copy((s, o1 + l1.value), 5, (d, 10));
        assert_eq!(&t.buf(d, 10)[..5], b"hello");
        // The head, emptied, is rewound instead of freed; another segment is freed.
        t[s].live_items = 0;
        t.emptied(s);
        assert!(t[s].active);
        assert_eq!(t[s].used, 0);
        t.emptied(d);
        assert!(!t[d].active);
        assert_eq!(t.count(), 1);
    }

    #[test]
    fn a_requeued_segment_becomes_the_youngest_head() {
        let mut t = Segments::default();
        let a = t.add(buf(1024), false, Queue::Main);
        let b = t.add(buf(1024), false, Queue::Main);
        t.requeue_as_head(a, Queue::Main);
        assert_eq!(t.head, Some(a));
        assert_eq!(t.oldest(Queue::Main), Some(b));
        assert_eq!(t.oldest_few(Queue::Main, 8).collect::<Vec<_>>(), vec![b, a]);
        t.free_all();
        assert_eq!(t.count(), 0);
        assert_eq!(t.head, None);
        assert_eq!(t.oldest(Queue::Main), None);
    }

    #[test]
    fn a_segment_moves_between_queues_with_its_count_and_head() {
        let mut t = Segments::default();
        let a = t.add(buf(1024), false, Queue::Small);
        let b = t.add(buf(1024), false, Queue::Small);
        let m = t.add(buf(1024), false, Queue::Main);
        let l = t.add(buf(5000), true, Queue::Small);
        assert_eq!(
            t[l].queue,
            Queue::Main,
            "large items live in the main queue"
        );
        t.set_head(Queue::Small, b);
        t.set_head(Queue::Main, m);
        assert_eq!((t.queued(Queue::Small), t.queued(Queue::Main)), (2, 1));
        assert_eq!(t.oldest(Queue::Small), Some(a));
        assert_eq!(t.oldest(Queue::Main), Some(m));
        // The small queue's oldest becomes the main head: counts follow, the old main head
        // stays queued but is no longer a head.
        t.requeue_as_head(a, Queue::Main);
        assert_eq!((t.queued(Queue::Small), t.queued(Queue::Main)), (1, 2));
        assert_eq!(
            (t.head_of(Queue::Main), t.head_of(Queue::Small)),
            (Some(a), Some(b))
        );
        assert!(!t.is_head(m) && t.is_head(a) && t.is_head(b));
        assert_eq!(t.oldest(Queue::Small), Some(b));
        assert_eq!(t.by_age().collect::<Vec<_>>(), vec![m, l, a, b]);
        // Freeing a head clears it and its queue's count.
        t.free(b);
        assert_eq!((t.queued(Queue::Small), t.head_of(Queue::Small)), (0, None));
        assert_eq!(t.oldest(Queue::Small), None);
    }

    #[test]
    fn figures_count_small_and_large_segments_apart() {
        let mut t = Segments::default();
        let s = t.add(buf(1024), false, Queue::Main);
        t.write(s, &hdr(), b"k", 10, |_| {});
        let l = t.add(buf(5000), true, Queue::Main);
        t.write(l, &hdr(), b"big", 4900, |_| {});
        let f = t.figures();
        assert_eq!((f.segments, f.large_items, f.large_bytes), (1, 1, 5000));
        assert_eq!(f.written, f.live);
        assert_eq!(f.free, 1024 - t[s].used as u64);
    }
}
