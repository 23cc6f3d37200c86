//! Which keys are asked for most, in bounded memory.
//!
//! `TopK` is the space-saving sketch (Metwally, Agrawal, El Abbadi 2005): `capacity` keys
//! with a count each; a key not yet held replaces the one with the smallest count and
//! inherits that count (+1), remembered as its possible overestimate (`error`). Every key
//! requested more than total/capacity times is held, and each count is high by at most its
//! `error`. `Sampler` picks which requests feed it (about one in `rate`), so the sketch
//! costs nothing on most requests. A server or router keeps one sketch per worker thread,
//! and `merge` adds the threads' sketches when they are read.

use std::collections::HashMap;

/// One key of a sketch and its count (in sampled requests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub count: u64,
    /// How much of `count` may belong to keys this one replaced.
    pub error: u64,
}

/// The space-saving sketch. Memory: `capacity` keys of at most 250 bytes.
pub struct TopK {
    capacity: usize,
    entries: Vec<Entry>,
    at: HashMap<Box<[u8]>, usize>,
    /// Keys offered since the last clear.
    offered: u64,
    /// No count is below this (counts only grow, so an old minimum stays a lower bound).
    floor: u64,
    /// Where the search for an entry at `floor` goes on from.
    cursor: usize,
}

impl TopK {
    pub fn new(capacity: usize) -> TopK {
        TopK {
            capacity: capacity.max(1),
            entries: Vec::with_capacity(capacity),
            at: HashMap::with_capacity(capacity),
            offered: 0,
            floor: 0,
            cursor: 0,
        }
    }

    /// Counts one request for `key`.
    pub fn offer(&mut self, key: &[u8]) {
        self.offered += 1;
        if let Some(&i) = self.at.get(key) {
            self.entries[i].count += 1;
            return;
        }
        if self.entries.len() < self.capacity {
            self.at.insert(key.into(), self.entries.len());
            self.entries.push(Entry {
                key: key.into(),
                count: 1,
                error: 0,
            });
            return;
        }
        let (i, min) = self.smallest();
        let old = std::mem::replace(
            &mut self.entries[i],
            Entry {
                key: key.into(),
                count: min + 1,
                error: min,
            },
        );
        self.at.remove(&old.key);
        self.at.insert(key.into(), i);
    }

    /// An entry with the smallest count. An entry at `floor` is one; the search for it goes
    /// on from where the last one ended, so a full sketch (most of its entries at the floor,
    /// in the long tail) finds one in a few steps instead of scanning every entry.
    fn smallest(&mut self) -> (usize, u64) {
        let n = self.entries.len();
        for _ in 0..n {
            let i = self.cursor;
            self.cursor = if i + 1 == n { 0 } else { i + 1 };
            if self.entries[i].count <= self.floor {
                return (i, self.entries[i].count);
            }
        }
        let (i, min) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, e.count))
            .min_by_key(|&(_, c)| c)
            .unwrap_or((0, 0));
        self.floor = min;
        (i, min)
    }

    /// The held keys, most counted first.
    pub fn entries(&self) -> Vec<Entry> {
        let mut v = self.entries.clone();
        sort(&mut v);
        v
    }

    pub fn offered(&self) -> u64 {
        self.offered
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.at.clear();
        self.offered = 0;
        self.floor = 0;
        self.cursor = 0;
    }
}

fn sort(v: &mut [Entry]) {
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
}

/// Adds several threads' sketches: counts and errors of a key summed, the `n` highest
/// counts returned, most counted first.
pub fn merge(parts: impl IntoIterator<Item = Vec<Entry>>, n: usize) -> Vec<Entry> {
    let mut sum: HashMap<Box<[u8]>, Entry> = HashMap::new();
    for part in parts {
        for e in part {
            match sum.get_mut(&e.key) {
                Some(s) => {
                    s.count += e.count;
                    s.error += e.error;
                }
                None => {
                    sum.insert(e.key.clone(), e);
                }
            }
        }
    }
    let mut v: Vec<Entry> = sum.into_values().collect();
    sort(&mut v);
    v.truncate(n);
    v
}

/// Chooses about one request in `rate` for the sketch. The gap to the next sampled request
/// is drawn uniformly from 1..=2*rate-1 (mean `rate`), so traffic with a period cannot hide
/// its keys between samples.
#[derive(Clone, Copy, Debug)]
pub struct Sampler {
    rate: u32,
    left: u32,
    rng: u64,
}

impl Sampler {
    pub fn new(rate: u32, seed: u64) -> Sampler {
        let mut s = Sampler {
            rate: rate.max(1),
            left: 1,
            rng: seed | 1,
        };
        s.left = s.gap();
        s
    }

    /// True when this request is sampled.
    #[inline]
    pub fn tick(&mut self) -> bool {
        self.left -= 1;
        if self.left > 0 {
            return false;
        }
        self.left = self.gap();
        true
    }

    fn gap(&mut self) -> u32 {
        if self.rate == 1 {
            return 1;
        }
        // xorshift64: fast, and good enough to decorrelate the gaps.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let span = 2 * u64::from(self.rate) - 1;
        (self.rng % span) as u32 + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn holds_exact_counts_while_it_has_room() {
        let mut t = TopK::new(4);
        for k in [&b"a"[..], b"b", b"a", b"c", b"a", b"b"] {
            t.offer(k);
        }
        let e = t.entries();
        assert_eq!(
            e.iter()
                .map(|e| (&*e.key, e.count, e.error))
                .collect::<Vec<_>>(),
            vec![(&b"a"[..], 3, 0), (&b"b"[..], 2, 0), (&b"c"[..], 1, 0)]
        );
        assert_eq!(t.offered(), 6);
        t.clear();
        assert!(t.entries().is_empty());
    }

    #[test]
    fn a_new_key_replaces_the_smallest_count() {
        let mut t = TopK::new(2);
        for k in [&b"a"[..], b"a", b"b", b"c"] {
            t.offer(k);
        }
        let e = t.entries();
        assert_eq!(&*e[0].key, b"a");
        assert_eq!((&*e[1].key, e[1].count, e[1].error), (&b"c"[..], 2, 1));
    }

    #[test]
    fn merge_sums_threads() {
        let mut a = TopK::new(8);
        let mut b = TopK::new(8);
        (0..5).for_each(|_| a.offer(b"x"));
        (0..4).for_each(|_| b.offer(b"x"));
        (0..7).for_each(|_| b.offer(b"y"));
        b.offer(b"z");
        let m = merge([a.entries(), b.entries()], 2);
        assert_eq!(m.len(), 2);
        assert_eq!((&*m[0].key, m[0].count), (&b"x"[..], 9));
        assert_eq!((&*m[1].key, m[1].count), (&b"y"[..], 7));
    }

    #[test]
    fn sampler_mean_gap_is_the_rate() {
        let mut s = Sampler::new(100, 42);
        let hits = (0..1_000_000).filter(|_| s.tick()).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        let mut all = Sampler::new(1, 7);
        assert!((0..100).all(|_| all.tick()));
    }

    proptest! {
        /// A key not held takes the place of an entry with the smallest count.
        #[test]
        fn a_new_key_inherits_the_smallest_count(stream in proptest::collection::vec(0u8..60, 1..3000),
                                                 capacity in 1usize..24) {
            let mut t = TopK::new(capacity);
            for &k in &stream {
                let before = t.entries();
                let held = before.iter().any(|e| e.key[0] == k);
                t.offer(&[k]);
                if !held && before.len() == capacity {
                    let min = before.iter().map(|e| e.count).min().unwrap();
                    let e = t.entries().into_iter().find(|e| e.key[0] == k).unwrap();
                    prop_assert_eq!((e.count, e.error), (min + 1, min));
                }
            }
        }

        /// The space-saving guarantees: counts never under the truth, over by at most
        /// `error` <= total/capacity; every key more frequent than total/capacity is held.
        #[test]
        fn space_saving_bounds(stream in proptest::collection::vec(0u8..40, 1..2000),
                               capacity in 1usize..16) {
            let mut t = TopK::new(capacity);
            let mut truth = HashMap::new();
            for &k in &stream {
                t.offer(&[k]);
                *truth.entry(k).or_insert(0u64) += 1;
            }
            let total = stream.len() as u64;
            let held = t.entries();
            prop_assert!(held.len() <= capacity);
            for e in &held {
                let real = truth.get(&e.key[0]).copied().unwrap_or(0);
                prop_assert!(e.count >= real);
                prop_assert!(e.count - e.error <= real);
                prop_assert!(e.error <= total / capacity as u64);
            }
            for (k, &n) in &truth {
                if n > total / capacity as u64 {
                    prop_assert!(held.iter().any(|e| e.key[0] == *k), "key {k} ({n}) lost");
                }
            }
        }
    }
}
