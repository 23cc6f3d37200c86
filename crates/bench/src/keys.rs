//! Key number generators for the four patterns.

use crate::args::KeyPattern;
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::{Distribution, Normal, Zipf};

/// Draws key numbers in `[min, max]` following one pattern.
#[derive(Debug, Clone)]
pub struct KeyGen {
    min: u64,
    max: u64,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Random,
    Gaussian(Normal<f64>),
    /// Rank 1 (the hottest) maps to `min`.
    Zipf(Zipf<f64>),
    /// Walks its own slice `[start, start+len)` of the range, then wraps; `next` is an offset.
    Sequential {
        start: u64,
        len: u64,
        next: u64,
    },
}

/// Parameters shared by every generator of one run.
#[derive(Debug, Clone, Copy)]
pub struct KeySpace {
    pub min: u64,
    pub max: u64,
    pub zipf_exp: f64,
    pub stddev: Option<f64>,
    pub median: Option<f64>,
}

impl KeySpace {
    pub fn range(&self) -> u64 {
        self.max - self.min + 1
    }
}

impl KeyGen {
    /// `slot`/`slots` give a parallel generator its own part of the range; a sequential one
    /// walks the whole range from its start (memtier's S and P).
    pub fn new(pattern: KeyPattern, space: KeySpace, slot: u64, slots: u64) -> Self {
        let range = space.range();
        let kind = match pattern {
            KeyPattern::Random => Kind::Random,
            KeyPattern::Gaussian => {
                let mean = space
                    .median
                    .unwrap_or(space.min as f64 + (range as f64 - 1.0) / 2.0);
                let sd = space.stddev.unwrap_or((range as f64 / 6.0).max(1e-9));
                Kind::Gaussian(Normal::new(mean, sd).expect("validated stddev"))
            }
            KeyPattern::Zipf => {
                Kind::Zipf(Zipf::new(range, space.zipf_exp).expect("validated zipf exponent"))
            }
            KeyPattern::Sequential | KeyPattern::Parallel => {
                let (start, len) = match pattern {
                    KeyPattern::Parallel => seq_slice(range, slot, slots.max(1)),
                    _ => (0, range),
                };
                Kind::Sequential {
                    start: space.min + start,
                    len,
                    next: 0,
                }
            }
        };
        KeyGen {
            min: space.min,
            max: space.max,
            kind,
        }
    }

    #[inline]
    pub fn next(&mut self, rng: &mut SmallRng) -> u64 {
        match &mut self.kind {
            Kind::Random => rng.gen_range(self.min..=self.max),
            Kind::Gaussian(n) => {
                let v = n.sample(rng).round();
                // Clamping (rather than resampling) keeps the cost per key bounded.
                if v <= self.min as f64 {
                    self.min
                } else if v >= self.max as f64 {
                    self.max
                } else {
                    v as u64
                }
            }
            Kind::Zipf(z) => {
                let rank = z.sample(rng) as u64; // 1..=range
                (self.min + rank.saturating_sub(1)).min(self.max)
            }
            Kind::Sequential { start, len, next } => {
                let k = *start + *next;
                *next += 1;
                if *next >= *len {
                    *next = 0;
                }
                k
            }
        }
    }
}

/// Splits `range` keys into `slots` nearly equal slices; slot `i` gets `(offset, len)`.
/// With more slots than keys, slices of one key are reused round-robin.
pub fn seq_slice(range: u64, slot: u64, slots: u64) -> (u64, u64) {
    if slots >= range {
        return (slot % range, 1);
    }
    let base = range / slots;
    let extra = range % slots;
    let len = base + u64::from(slot < extra);
    let start = slot * base + slot.min(extra);
    (start, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn space(min: u64, max: u64) -> KeySpace {
        KeySpace {
            min,
            max,
            zipf_exp: 1.0,
            stddev: None,
            median: None,
        }
    }

    #[test]
    fn uniform_covers_whole_range_and_stays_inside() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut g = KeyGen::new(KeyPattern::Random, space(100, 199), 0, 1);
        let mut seen = [0u32; 100];
        for _ in 0..20_000 {
            let k = g.next(&mut rng);
            assert!((100..=199).contains(&k));
            seen[(k - 100) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 100), "every key drawn often");
        // Roughly flat: no key more than twice the expected 200.
        assert!(seen.iter().all(|&c| c < 400));
    }

    #[test]
    fn zipf_top_one_percent_gets_most_hits() {
        for exp in [1.0, 1.2] {
            let mut rng = SmallRng::seed_from_u64(2);
            let mut sp = space(0, 99_999);
            sp.zipf_exp = exp;
            let mut g = KeyGen::new(KeyPattern::Zipf, sp, 0, 1);
            let n = 100_000;
            let mut top = 0;
            for _ in 0..n {
                let k = g.next(&mut rng);
                assert!(k <= 99_999);
                if k < 1_000 {
                    top += 1;
                }
            }
            assert!(top * 2 > n, "exp {exp}: top 1% got {top} of {n}");
        }
    }

    #[test]
    fn gaussian_is_centred_and_clamped() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut g = KeyGen::new(KeyPattern::Gaussian, space(0, 10_000), 0, 1);
        let n = 50_000u64;
        let mut sum = 0u64;
        let mut within_one_sd = 0;
        for _ in 0..n {
            let k = g.next(&mut rng);
            assert!(k <= 10_000);
            sum += k;
            if (3_333..=6_667).contains(&k) {
                within_one_sd += 1;
            }
        }
        let mean = sum as f64 / n as f64;
        assert!((mean - 5_000.0).abs() < 100.0, "mean {mean}");
        // ~68% within one standard deviation (range/6).
        let frac = within_one_sd as f64 / n as f64;
        assert!((0.64..0.72).contains(&frac), "fraction {frac}");
    }

    #[test]
    fn gaussian_honours_median_and_stddev() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut sp = space(0, 1_000_000);
        sp.median = Some(1000.0);
        sp.stddev = Some(10.0);
        let mut g = KeyGen::new(KeyPattern::Gaussian, sp, 0, 1);
        for _ in 0..1000 {
            let k = g.next(&mut rng);
            assert!((900..=1100).contains(&k), "{k}");
        }
    }

    #[test]
    fn sequential_walks_slice_and_wraps() {
        let mut rng = SmallRng::seed_from_u64(5);
        // Sequential ignores the connection's slot: every connection walks the whole range.
        let mut g = KeyGen::new(KeyPattern::Sequential, space(10, 14), 3, 4);
        let got: Vec<u64> = (0..12).map(|_| g.next(&mut rng)).collect();
        assert_eq!(got, vec![10, 11, 12, 13, 14, 10, 11, 12, 13, 14, 10, 11]);
    }

    #[test]
    fn sequential_slices_partition_the_range() {
        for (range, slots) in [(10u64, 3u64), (100, 7), (5, 5), (1000, 1)] {
            let mut covered = vec![0u32; range as usize];
            for s in 0..slots {
                let (start, len) = seq_slice(range, s, slots);
                for k in start..start + len {
                    covered[k as usize] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c == 1), "{range}/{slots}");
        }
        // More connections than keys: each gets one key, reused round-robin.
        assert_eq!(seq_slice(3, 4, 8), (1, 1));
        let mut rng = SmallRng::seed_from_u64(6);
        let mut g = KeyGen::new(KeyPattern::Parallel, space(0, 9), 1, 2);
        let got: Vec<u64> = (0..6).map(|_| g.next(&mut rng)).collect();
        assert_eq!(got, vec![5, 6, 7, 8, 9, 5]);
    }

    #[test]
    fn single_key_range() {
        let mut rng = SmallRng::seed_from_u64(7);
        for p in [
            KeyPattern::Random,
            KeyPattern::Gaussian,
            KeyPattern::Zipf,
            KeyPattern::Sequential,
            KeyPattern::Parallel,
        ] {
            let mut g = KeyGen::new(p, space(42, 42), 0, 4);
            for _ in 0..10 {
                assert_eq!(g.next(&mut rng), 42);
            }
        }
    }
}
