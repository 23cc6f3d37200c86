//! mcrouter's Rendezvous and WeightedRendezvous hash functions and its ConstShard lookup.
//!
//! Rendezvous hashing scores every server for a key and picks the highest score. The server
//! side of a score is MurmurHash64A of the server's tag (a string the config gives per
//! server), the key side MurmurHash64A of the key; the two mix into one 64-bit score.
//! The full descending order of scores is what RendezvousPolicy fails over along.

/// Seed of the tag hash.
const TAG_SEED: u64 = 4_193_360_111;
/// Seed of the key hash.
const KEY_SEED: u64 = 2_718_281_828;

/// Mixes a tag hash and a key hash into a score (a 128-to-64-bit Murmur-style mix).
fn mix(upper: u64, lower: u64) -> u64 {
    const MUL: u64 = 0x9ddf_ea08_eb38_2d69;
    let mut a = (lower ^ upper).wrapping_mul(MUL);
    a ^= a >> 47;
    let mut b = (upper ^ a).wrapping_mul(MUL);
    b ^= b >> 47;
    b.wrapping_mul(MUL)
}

/// The low 53 bits of `value` as a fraction in `[0, 1)`.
fn unit_fraction(value: u64) -> f64 {
    const LOW_53: u64 = u64::MAX >> 11;
    (value & LOW_53) as f64 / (1u64 << 53) as f64
}

/// A rendezvous hash over tagged servers, optionally weighted.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendezvous {
    tag_hashes: Vec<u64>,
    /// One weight per tag for WeightedRendezvous; any finite number is taken as given.
    weights: Option<Vec<f64>>,
}

impl Rendezvous {
    /// Rendezvous over servers named by `tags`, in server order.
    pub fn new<T: AsRef<[u8]>>(tags: &[T]) -> Rendezvous {
        Rendezvous {
            tag_hashes: tags
                .iter()
                .map(|t| murmur2::murmur64a(t.as_ref(), TAG_SEED))
                .collect(),
            weights: None,
        }
    }

    /// WeightedRendezvous: `weights` must have one entry per tag.
    pub fn weighted<T: AsRef<[u8]>>(tags: &[T], weights: Vec<f64>) -> Rendezvous {
        assert_eq!(tags.len(), weights.len(), "one weight per tag");
        Rendezvous {
            weights: Some(weights),
            ..Rendezvous::new(tags)
        }
    }

    /// How many servers (tags) it hashes over.
    pub fn len(&self) -> usize {
        self.tag_hashes.len()
    }

    /// Whether there are no tags.
    pub fn is_empty(&self) -> bool {
        self.tag_hashes.is_empty()
    }

    /// The weights, for WeightedRendezvous.
    pub fn weights(&self) -> Option<&[f64]> {
        self.weights.as_deref()
    }

    fn scores<'s>(&'s self, key: &[u8]) -> impl Iterator<Item = f64> + 's {
        let key_hash = murmur2::murmur64a(key, KEY_SEED);
        self.tag_hashes.iter().enumerate().map(move |(i, &tag)| {
            let score = mix(tag, key_hash);
            match &self.weights {
                // The 64-bit score compares as a double, so close scores can tie.
                None => score as f64,
                Some(w) => w[i] * (1.0 / -unit_fraction(score).ln()),
            }
        })
    }

    /// The server for `key` (the bytes a pool hashes). Unweighted, equal scores go to the
    /// higher index; weighted, to the lower, and a key no server scores above zero goes to 0
    /// (the two loops mcrouter uses for a single pick differ so).
    pub fn index(&self, key: &[u8]) -> usize {
        let weighted = self.weights.is_some();
        let mut best = if weighted { 0.0 } else { -1.0 };
        let mut best_index = 0;
        for (i, score) in self.scores(key).enumerate() {
            if score > best || (!weighted && score == best) {
                best = score;
                best_index = i;
            }
        }
        best_index
    }

    /// Every server for `key`, best score first; equal scores put the higher index first.
    pub fn order(&self, key: &[u8]) -> Vec<usize> {
        let mut scored: Vec<(f64, usize)> = self.scores(key).zip(0..).collect();
        // partial_cmp, so -0.0 and 0.0 tie as they do in C++.
        scored.sort_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(b.1.cmp(&a.1))
        });
        scored.into_iter().map(|(_, i)| i).collect()
    }
}

/// ConstShard's lookup: a key shaped `<anything>:<decimal digits>:...` names its server by
/// those digits (leading zeros allowed) when the number is below `servers`; `None` otherwise,
/// and the key is then placed by Ch3.
pub fn const_shard(key: &[u8], servers: usize) -> Option<usize> {
    let first = key.iter().position(|&b| b == b':')?;
    let rest = &key[first + 1..];
    let second = rest.iter().position(|&b| b == b':')?;
    let shard = &rest[..second];
    if shard.is_empty() || !shard.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut index: u64 = 0;
    for &d in shard {
        index = index.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    let index = usize::try_from(index).ok()?;
    (index < servers).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("xxx.{i}.yy")).collect()
    }

    fn counts(hash: &Rendezvous, keys: usize) -> Vec<usize> {
        let mut counts = vec![0; hash.len()];
        for i in 0..keys {
            counts[hash.index(format!("mykey:{i}").as_bytes())] += 1;
        }
        counts
    }

    fn max_key() -> Vec<u8> {
        (0..=255u8).map(|i| i.wrapping_sub(128)).collect()
    }

    /// The picks and spreads mcrouter's own Rendezvous unit tests assert.
    #[test]
    fn mcrouter_rendezvous_cases() {
        let r3 = Rendezvous::new(&endpoints(3));
        for key in [&b"sample"[..], b"", b"mykey", &max_key()] {
            assert_eq!(r3.index(key), 1);
        }
        let r343 = Rendezvous::new(&endpoints(343));
        assert_eq!(r343.index(&max_key()), 183);
        assert_eq!(r343.index(b"sample"), 45);
        assert_eq!(r343.index(b""), 291);
        assert_eq!(r343.index(b"mykey"), 132);
        assert_eq!(counts(&r3, 1000), [337, 353, 310]);
        let r10 = Rendezvous::new(&endpoints(10));
        assert_eq!(
            counts(&r10, 10_000),
            [947, 1026, 1028, 981, 1016, 970, 1013, 939, 1023, 1057]
        );
        for i in 0..10_000 {
            let key = format!("mykey:{i}");
            assert_eq!(r343.index(key.as_bytes()), r343.order(key.as_bytes())[0]);
        }
    }

    /// The picks and spreads mcrouter's own WeightedRendezvous unit tests assert.
    #[test]
    fn mcrouter_weighted_rendezvous_cases() {
        let w3 = |w: Vec<f64>| Rendezvous::weighted(&endpoints(3), w);
        let ones = w3(vec![1.0; 3]);
        assert_eq!(ones.index(b"sample"), 0);
        assert_eq!(ones.index(b""), 2);
        assert_eq!(ones.index(b"mykey"), 1);
        assert_eq!(ones.index(&max_key()), 1);
        let w343 = Rendezvous::weighted(&endpoints(343), vec![1.0; 343]);
        assert_eq!(w343.index(&max_key()), 142);
        assert_eq!(w343.index(b"sample"), 115);
        assert_eq!(w343.index(b""), 279);
        assert_eq!(w343.index(b"mykey"), 302);
        assert_eq!(counts(&ones, 10_000), [3409, 3360, 3231]);
        assert_eq!(counts(&w3(vec![1.0, 0.5, 0.1]), 10_000), [6292, 3118, 590]);
        assert_eq!(counts(&w3(vec![1.0, 0.0, 0.5]), 10_000), [6737, 0, 3263]);
        let mut w = vec![1.0; 5];
        w.extend([0.5; 5]);
        let w10 = Rendezvous::weighted(&endpoints(10), w);
        assert_eq!(
            counts(&w10, 10_000),
            [1381, 1299, 1283, 1359, 1296, 667, 669, 665, 672, 709]
        );
    }

    /// Removing one server moves only the keys it had.
    #[test]
    fn removing_a_server_moves_only_its_keys() {
        let tags = endpoints(50);
        let all = Rendezvous::new(&tags);
        let fewer = Rendezvous::new(&tags[1..]);
        for i in 0..5000 {
            let key = format!("k{i}");
            let before = all.index(key.as_bytes());
            if before != 0 {
                assert_eq!(fewer.index(key.as_bytes()) + 1, before, "{key}");
            }
        }
    }

    #[test]
    fn weighted_all_zero_picks_first_but_orders_from_last() {
        let w = Rendezvous::weighted(&endpoints(3), vec![0.0; 3]);
        assert_eq!(w.index(b"any"), 0);
        assert_eq!(w.order(b"any"), [2, 1, 0]);
    }

    /// mcrouter's ConstShard cases (over 4 servers), and where the lookup gives up.
    #[test]
    fn const_shard_lookup() {
        assert_eq!(const_shard(b"b:3:meh", 4), Some(3));
        assert_eq!(const_shard(b"blah:0:meh", 4), Some(0));
        assert_eq!(const_shard(b"x:007:y", 8), Some(7));
        for key in [
            &b"blahmeh"[..],
            b"blah:meh",
            b"blah::meh",
            b"blah:12c34:meh",
            b"blah:4:meh",
            b"a:+1:b",
            b"a: 1:b",
            b"a:1",
            b"a:18446744073709551616:b",
        ] {
            assert_eq!(const_shard(key, 4), None, "{key:?}");
        }
        assert_eq!(const_shard(b"a:18446744073709551615:b", usize::MAX), None);
    }
}
