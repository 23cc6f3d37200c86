//! The memory budget shared by all shards: bytes charged against the limit (`-m`, or
//! `cache_memlimit`), and a small pool of emptied segment buffers kept charged for reuse.
//!
//! Everything the store allocates for items (segments, large-item buffers, index) is charged
//! here before it is allocated and released after it is freed; eviction (in `eviction`) is what
//! runs when a charge is refused. A new kind of charge (say, memory reserved by the server for
//! something other than items) or a policy on refusal belongs here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes charged against a limit, plus the spare segment buffers.
pub(crate) struct Budget {
    used: AtomicU64,
    limit: AtomicU64,
    /// Emptied segment buffers kept for reuse, still charged to `used`: a segment freed and
    /// another allocated moments later (overwrites of large values) then costs no
    /// munmap, fresh pages and page faults under a shard lock.
    spare: Mutex<Vec<Box<[u8]>>>,
    spare_max: usize,
    /// Set once free memory fell under a segment; see `full`.
    at_limit: AtomicBool,
}

/// Segments of free memory that end the "full" state `full` enters below one segment.
const FULL_UNTIL_SEGS: u64 = 8;

impl Budget {
    /// A budget of `limit` bytes with `used` already charged, keeping up to `spare_max`
    /// emptied segment buffers.
    pub fn new(limit: u64, used: u64, spare_max: usize) -> Budget {
        Budget {
            used: AtomicU64::new(used),
            limit: AtomicU64::new(limit),
            spare: Mutex::new(Vec::new()),
            spare_max,
            at_limit: AtomicBool::new(false),
        }
    }

    /// Bytes charged.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// A new limit; charges above it are refused from now on, and whoever holds memory
    /// gives some back when it sees `over_limit`.
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Charges `n` bytes if that stays within the limit.
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

    /// Charges `n` bytes whatever the limit (memory already allocated, e.g. an index that
    /// had to grow); the next allocation evicts back under the limit.
    pub fn charge_over(&self, n: u64) {
        self.used.fetch_add(n, Ordering::AcqRel);
    }

    /// Gives back `n` charged bytes.
    pub fn release(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Whether more is charged than the limit allows (after the limit was lowered).
    pub fn over_limit(&self) -> bool {
        self.used() > self.limit()
    }

    /// Whether writes must evict as they go (see `drain`): memory free within the limit fell
    /// under one segment of `seg` bytes, and has not since grown to `FULL_UNTIL_SEGS` of them.
    /// Without the margin a full cache stopped evicting whenever a segment's worth came free
    /// for a moment: one freed to charge a value that arrives in pieces (`Store::reserve`)
    /// and free again once the value is stored, or emptied segments past the spare pool's
    /// size. Only real room (a flush, deletes reclaimed, a raised limit) ends it.
    pub fn full(&self, seg: u64) -> bool {
        let free = self.limit().saturating_sub(self.used());
        // Written on changes only: every write reads this.
        let was = self.at_limit.load(Ordering::Relaxed);
        let now = free < seg || (was && free < FULL_UNTIL_SEGS * seg);
        if now != was {
            self.at_limit.store(now, Ordering::Relaxed);
        }
        now
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_limit_and_releases_make_room() {
        let b = Budget::new(1000, 100, 0);
        assert!(b.try_reserve(900));
        assert_eq!(b.used(), 1000);
        assert!(!b.try_reserve(1), "one byte over the limit");
        assert!(!b.over_limit(), "at the limit is not over it");
        b.release(300);
        assert!(b.try_reserve(300));
        assert!(!b.try_reserve(1));
    }

    #[test]
    fn a_lowered_limit_refuses_charges_and_reads_as_over() {
        let b = Budget::new(1000, 0, 0);
        assert!(b.try_reserve(800));
        b.set_limit(500);
        assert_eq!(b.limit(), 500);
        assert!(b.over_limit());
        assert!(!b.try_reserve(1));
        b.charge_over(10);
        assert_eq!(b.used(), 810);
        b.release(310);
        assert!(!b.over_limit());
    }

    #[test]
    fn full_from_under_one_segment_free_until_several_come_free() {
        let seg = 100;
        let b = Budget::new(10_000, 0, 0);
        assert!(!b.full(seg));
        assert!(b.try_reserve(9_850));
        assert!(!b.full(seg), "150 free: room for a segment");
        assert!(b.try_reserve(60));
        assert!(b.full(seg), "90 free");
        b.release(300);
        assert!(
            b.full(seg),
            "a segment or three come free for a moment: still full"
        );
        b.release(FULL_UNTIL_SEGS * seg);
        assert!(!b.full(seg), "real room ends it");
        assert!(b.try_reserve(FULL_UNTIL_SEGS * seg));
        assert!(!b.full(seg), "not full again until under a segment is free");
    }

    #[test]
    fn spare_buffers_stay_charged_until_dropped() {
        let b = Budget::new(1 << 20, 0, 2);
        assert!(b.try_reserve(3 * 4096));
        for _ in 0..3 {
            b.put_spare(vec![0u8; 4096].into_boxed_slice());
        }
        // Two kept (charged), the third freed.
        assert_eq!(b.used(), 2 * 4096);
        let buf = b.take_spare().expect("a kept buffer");
        assert_eq!(buf.len(), 4096);
        assert_eq!(b.used(), 2 * 4096, "taking a spare keeps its charge");
        assert!(b.drop_spare());
        assert_eq!(b.used(), 4096);
        assert!(!b.drop_spare());
        assert!(b.take_spare().is_none());
    }

    #[test]
    fn over_the_limit_emptied_buffers_are_freed_not_kept() {
        let b = Budget::new(4096, 0, 8);
        assert!(b.try_reserve(4096));
        b.set_limit(1024);
        b.put_spare(vec![0u8; 4096].into_boxed_slice());
        assert_eq!(b.used(), 0);
        assert!(b.take_spare().is_none());
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_limit() {
        let b = Budget::new(10_000, 0, 0);
        let granted: u64 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4)
                .map(|_| sc.spawn(|| (0..5_000).filter(|_| b.try_reserve(1)).count() as u64))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(granted, 10_000);
        assert_eq!(b.used(), 10_000);
    }
}
