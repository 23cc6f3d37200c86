//! A latency histogram in nanoseconds with logarithmic buckets: 8 per power of two, so a
//! bucket is at most 12.5% wide and a quantile read from its middle is within ~6.25%.
//!
//! One thread writes a `Histogram` (its counts are single-writer atomics: a relaxed load and
//! store, no locked instruction, no lock); any thread reads it into a `Snapshot`, and
//! snapshots of several threads add up. Chosen over `hdrhistogram`, whose counts need `&mut`
//! to record, so a reader on another thread would need a lock or a double buffer on the
//! writer's path; a fixed array of 272 counters (2 KiB) covers 0 ns to 68 s at this precision.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// log2 of the buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Values from 2^MAX_BITS ns (~68.7 s) up are counted in the last bucket.
const MAX_BITS: u32 = 36;
/// Number of buckets.
pub const BUCKETS: usize = (MAX_BITS - SUB_BITS + 1) as usize * SUB;

/// The bucket a value (ns) falls in.
#[inline]
pub fn bucket(v: u64) -> usize {
    let v = v.min((1 << MAX_BITS) - 1);
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let group = (e - SUB_BITS + 1) as usize;
    (group << SUB_BITS) + ((v >> (e - SUB_BITS)) as usize & (SUB - 1))
}

/// The values bucket `i` holds: `low..high`.
pub fn bounds(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64 + 1);
    }
    let group = (i >> SUB_BITS) as u32;
    let shift = group - 1;
    let low = ((SUB + (i & (SUB - 1))) as u64) << shift;
    (low, low + (1 << shift))
}

/// Adds to a counter only this thread writes: no read-modify-write instruction needed.
#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Counts per bucket plus the sum of the values; written by one thread only.
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records `n` events that each took `v` ns. Only the owning thread may call this.
    #[inline]
    pub fn record_n(&self, v: u64, n: u64) {
        bump(&self.counts[bucket(v)], n);
        bump(&self.sum, v.wrapping_mul(n));
    }

    #[inline]
    pub fn record(&self, v: u64) {
        self.record_n(v, 1);
    }

    /// The counts as of now (each read on its own: a concurrent writer may be one event
    /// ahead in one bucket, never wrong).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        s.add(self);
        s
    }
}

/// Counts read from one or more histograms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    counts: Vec<u64>,
    sum: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            counts: vec![0; BUCKETS],
            sum: 0,
        }
    }
}

impl Snapshot {
    /// Adds a thread's histogram (merging threads).
    pub fn add(&mut self, h: &Histogram) {
        for (c, a) in self.counts.iter_mut().zip(&h.counts) {
            *c += a.load(Relaxed);
        }
        self.sum = self.sum.wrapping_add(h.sum.load(Relaxed));
    }

    /// Adds another snapshot.
    pub fn merge(&mut self, o: &Snapshot) {
        for (c, a) in self.counts.iter_mut().zip(&o.counts) {
            *c += a;
        }
        self.sum = self.sum.wrapping_add(o.sum);
    }

    /// What was counted since `base` (an earlier snapshot of the same histograms).
    pub fn since(&self, base: &Snapshot) -> Snapshot {
        Snapshot {
            counts: self
                .counts
                .iter()
                .zip(&base.counts)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sum: self.sum.saturating_sub(base.sum),
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of all values, ns.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// The value (ns) below which a fraction `q` of the events fall: the middle of the
    /// bucket holding the event of that rank. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.count();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bounds(i);
                return low + (high - low - 1) / 2;
            }
        }
        0
    }

    /// The largest value counted, to within its bucket (its top). 0 when empty.
    pub fn max(&self) -> u64 {
        match self.counts.iter().rposition(|&c| c > 0) {
            Some(i) => bounds(i).1 - 1,
            None => 0,
        }
    }

    /// Events whose bucket lies wholly at or below `v` ns (a Prometheus `le` bucket; an
    /// event in a bucket straddling `v` counts in the next bound up).
    pub fn count_at_most(&self, v: u64) -> u64 {
        self.counts
            .iter()
            .enumerate()
            .take_while(|&(i, _)| bounds(i).1 - 1 <= v)
            .map(|(_, &c)| c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_tile_the_range() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (low, high) = bounds(i);
            assert_eq!(low, next, "bucket {i}");
            assert!(high > low);
            assert_eq!(bucket(low), i);
            assert_eq!(bucket(high - 1), i);
            next = high;
        }
        assert_eq!(next, 1 << MAX_BITS);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_known_spread() {
        let h = Histogram::default();
        for us in 1..=1000u64 {
            h.record(us * 1000);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1000);
        assert_eq!(s.sum(), (1..=1000u64).sum::<u64>() * 1000);
        for (q, want) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = s.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.0625, "q{q}: {got} vs {want}");
        }
        let max = s.max() as f64;
        assert!((1_000_000.0..1_125_000.0).contains(&max), "{max}");
        assert_eq!(Snapshot::default().quantile(0.5), 0);
    }

    #[test]
    fn record_n_counts_a_batch_and_since_subtracts() {
        let h = Histogram::default();
        h.record_n(5_000, 3);
        let base = h.snapshot();
        h.record_n(70_000, 2);
        let s = h.snapshot().since(&base);
        assert_eq!(s.count(), 2);
        assert_eq!(s.sum(), 140_000);
        assert_eq!(s.count_at_most(60_000), 0);
        assert_eq!(s.count_at_most(100_000), 2);
    }

    #[test]
    fn threads_merge() {
        let a = std::sync::Arc::new(Histogram::default());
        let w = a.clone();
        std::thread::spawn(move || (0..100).for_each(|_| w.record(2_000)))
            .join()
            .unwrap();
        let b = Histogram::default();
        b.record(3_000);
        let mut s = a.snapshot();
        s.add(&b);
        assert_eq!(s.count(), 101);
        assert_eq!(s.count_at_most(2_047), 100);
    }

    proptest! {
        #[test]
        fn a_value_lands_in_a_bucket_at_most_an_eighth_wide(v in 16u64..(1 << MAX_BITS)) {
            let (low, high) = bounds(bucket(v));
            prop_assert!(low <= v && v < high);
            prop_assert!((high - low) * 8 <= low);
        }

        #[test]
        fn count_at_most_is_monotone(vals in proptest::collection::vec(0u64..10_000_000, 1..200),
                                     a in 0u64..20_000_000, b in 0u64..20_000_000) {
            let h = Histogram::default();
            vals.iter().for_each(|&v| h.record(v));
            let s = h.snapshot();
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(s.count_at_most(lo) <= s.count_at_most(hi));
            prop_assert!(s.count_at_most(hi) <= s.count());
            // Never counts a value above the bound.
            prop_assert!(s.count_at_most(lo) <= vals.iter().filter(|&&v| v <= lo).count() as u64);
        }
    }
}
