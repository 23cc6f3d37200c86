//! mcrouter's pool hash functions (Ch3, Crc32, WeightedCh3, Rendezvous, ConstShard) and the
//! part of a key they hash.

use std::fmt;

use crate::furc::{crc32_index, furc_hash, FURC_MAX_POOL_SIZE};
use crate::rendezvous::{const_shard, Rendezvous};
use crate::spooky;

/// The parts of a key mcrouter distinguishes when routing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutingKey<'k> {
    /// `/region/cluster/` when the key starts with one, else empty.
    pub prefix: &'k [u8],
    /// The key after the routing prefix (what a server stores).
    pub key: &'k [u8],
    /// The bytes pools hash: `key` up to its first `|#|` hash stop.
    pub hashed: &'k [u8],
}

impl<'k> RoutingKey<'k> {
    /// Splits `full` as mcrouter does: a key beginning with `/` whose next two `/` are both
    /// present has the routing prefix up to and including the second of them.
    pub fn parse(full: &'k [u8]) -> RoutingKey<'k> {
        let split = routing_prefix_len(full);
        let (prefix, key) = full.split_at(split);
        let hashed = match find(key, b"|#|") {
            Some(stop) => &key[..stop],
            None => key,
        };
        RoutingKey {
            prefix,
            key,
            hashed,
        }
    }
}

fn routing_prefix_len(full: &[u8]) -> usize {
    if full.first() != Some(&b'/') {
        return 0;
    }
    let mut pos = 1;
    for _ in 0..2 {
        match full[pos..].iter().position(|&b| b == b'/') {
            Some(at) => pos += at + 1,
            None => return 0,
        }
    }
    pos
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A pool's hash function (`"hash": "Ch3"` or `{"hash_func": "WeightedCh3", "weights": [...]}`).
#[derive(Clone, Debug, PartialEq)]
pub enum PoolHash {
    /// furc_hash; mcrouter's default.
    Ch3,
    /// `(crc32 & 0x7fffffff) % n`.
    Crc32,
    /// furc_hash with a per-server acceptance weight in `[0, 1]`; one weight per server.
    WeightedCh3(Vec<f64>),
    /// WeightedCh3 whose weights come from a runtime variable; memfleet reads none, so they
    /// stay at mcrouter's starting 0.5 each.
    WeightedCh3Rv(Vec<f64>),
    /// Rendezvous or WeightedRendezvous over the pool's tags.
    Rendezvous(Rendezvous),
    /// A key `<x>:<n>:...` goes to server n when there is one, any other key by Ch3.
    ConstShard,
}

/// Why a hash function cannot serve a pool.
#[derive(Clone, Debug, PartialEq)]
pub enum PoolHashError {
    /// Ch3 and WeightedCh3 need 1..=2^23 servers; Crc32 needs at least one.
    Size {
        /// The hash function's name.
        hash: &'static str,
        /// How many servers the pool has.
        servers: usize,
    },
    /// A WeightedCh3 weight outside `[0, 1]` (or NaN).
    Weight {
        /// Which server the weight is for.
        index: usize,
        /// The weight as given.
        weight: f64,
    },
    /// Rendezvous with a different number of tags than servers.
    TagCount {
        /// How many tags were given.
        tags: usize,
        /// How many servers the pool has.
        servers: usize,
    },
    /// WeightedCh3 with a different number of weights than servers.
    WeightCount {
        /// How many weights were given.
        weights: usize,
        /// How many servers the pool has.
        servers: usize,
    },
}

impl fmt::Display for PoolHashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolHashError::Size { hash, servers } => write!(
                f,
                "{hash} cannot hash over {servers} servers (1 to {FURC_MAX_POOL_SIZE} allowed)"
            ),
            PoolHashError::Weight { index, weight } => {
                write!(f, "weight {index} is {weight}; weights must be in [0, 1]")
            }
            PoolHashError::TagCount { tags, servers } => {
                write!(f, "{tags} tags for {servers} servers")
            }
            PoolHashError::WeightCount { weights, servers } => {
                write!(f, "{weights} weights for {servers} servers")
            }
        }
    }
}

impl std::error::Error for PoolHashError {}

/// Seed of the acceptance hash WeightedCh3 draws for each candidate.
const WEIGHT_SEED: u32 = 0xface_2014;
/// Candidates WeightedCh3 tries before settling for the last one.
const WEIGHT_TRIES: u32 = 32;

impl PoolHash {
    /// mcrouter's name for the function.
    pub fn name(&self) -> &'static str {
        match self {
            PoolHash::Ch3 => "Ch3",
            PoolHash::Crc32 => "Crc32",
            PoolHash::WeightedCh3(_) => "WeightedCh3",
            PoolHash::WeightedCh3Rv(_) => "WeightedCh3Rv",
            PoolHash::Rendezvous(r) if r.weights().is_some() => "WeightedRendezvous",
            PoolHash::Rendezvous(_) => "Rendezvous",
            PoolHash::ConstShard => "ConstShard",
        }
    }

    /// Checks that this function can place keys over `servers` servers.
    pub fn check(&self, servers: usize) -> Result<(), PoolHashError> {
        let max = match self {
            PoolHash::Crc32 | PoolHash::Rendezvous(_) => u32::MAX as usize,
            PoolHash::Ch3
            | PoolHash::WeightedCh3(_)
            | PoolHash::WeightedCh3Rv(_)
            | PoolHash::ConstShard => FURC_MAX_POOL_SIZE as usize,
        };
        if servers == 0 || servers > max {
            return Err(PoolHashError::Size {
                hash: self.name(),
                servers,
            });
        }
        if let PoolHash::Rendezvous(r) = self {
            if r.len() != servers {
                return Err(PoolHashError::TagCount {
                    tags: r.len(),
                    servers,
                });
            }
        }
        if let PoolHash::WeightedCh3(weights) | PoolHash::WeightedCh3Rv(weights) = self {
            if weights.len() != servers {
                return Err(PoolHashError::WeightCount {
                    weights: weights.len(),
                    servers,
                });
            }
            if let Some((index, &weight)) = weights
                .iter()
                .enumerate()
                .find(|(_, w)| !(0.0..=1.0).contains(*w))
            {
                return Err(PoolHashError::Weight { index, weight });
            }
        }
        Ok(())
    }

    /// The index in `0..servers` for `hashed` (the bytes [`RoutingKey::parse`] calls `hashed`).
    /// `servers` must have passed [`PoolHash::check`]; WeightedCh3 uses its weights' count.
    pub fn index(&self, hashed: &[u8], servers: usize) -> usize {
        match self {
            PoolHash::Ch3 => furc_hash(hashed, servers as u32) as usize,
            PoolHash::Crc32 => crc32_index(hashed, servers as u32) as usize,
            PoolHash::WeightedCh3(weights) | PoolHash::WeightedCh3Rv(weights) => {
                weighted_ch3(hashed, weights)
            }
            PoolHash::Rendezvous(r) => r.index(hashed),
            PoolHash::ConstShard => const_shard(hashed, servers)
                .unwrap_or_else(|| furc_hash(hashed, servers as u32) as usize),
        }
    }
}

/// WeightedCh3: furc picks a candidate, which accepts the key when a 32-bit SpookyHash of the
/// (possibly salted) key falls below `weight * u32::MAX`. A rejected key is salted with the
/// decimal digits of a counter, least significant first, and placed again; the salt replaces
/// the previous one rather than growing the key.
pub fn weighted_ch3(key: &[u8], weights: &[f64]) -> usize {
    let servers = weights.len() as u32;
    let mut salted = Vec::new();
    let mut candidate: &[u8] = key;
    let mut index = 0;
    for salt in 0..WEIGHT_TRIES {
        index = furc_hash(candidate, servers) as usize;
        let draw = u64::from(spooky::hash32(candidate, WEIGHT_SEED));
        // Truncation toward zero, as the C++ conversion from double does.
        let threshold = (weights[index] * f64::from(u32::MAX)) as u64;
        if draw < threshold {
            return index;
        }
        salted.clear();
        salted.extend_from_slice(key);
        let mut s = salt;
        loop {
            salted.push(b'0' + (s % 10) as u8);
            s /= 10;
            if s == 0 {
                break;
            }
        }
        candidate = &salted;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_key_split() {
        let k = RoutingKey::parse(b"/region/cluster/foo:key|#|etc");
        assert_eq!(k.prefix, b"/region/cluster/");
        assert_eq!(k.key, b"foo:key|#|etc");
        assert_eq!(k.hashed, b"foo:key");
        // Without two more slashes there is no routing prefix.
        let k = RoutingKey::parse(b"/region/foo");
        assert_eq!((k.prefix, k.key), (&b""[..], &b"/region/foo"[..]));
        let k = RoutingKey::parse(b"plain|x|#|#|");
        assert_eq!((k.prefix, k.hashed), (&b""[..], &b"plain|x"[..]));
        let k = RoutingKey::parse(b"//");
        assert_eq!(k.prefix, b"");
        let k = RoutingKey::parse(b"///k");
        assert_eq!((k.prefix, k.key), (&b"///"[..], &b"k"[..]));
        assert_eq!(RoutingKey::parse(b"").hashed, b"");
    }

    fn checksum(hash: &PoolHash, servers: usize, keys: impl Iterator<Item = String>) -> u32 {
        keys.fold(0u32, |acc, k| {
            acc.wrapping_mul(31)
                .wrapping_add(hash.index(k.as_bytes(), servers) as u32)
        })
    }

    fn weighted(servers: usize, w: f64) -> PoolHash {
        PoolHash::WeightedCh3(vec![w; servers])
    }

    /// Weights of 1.0 accept every first candidate, so WeightedCh3 equals Ch3.
    #[test]
    fn unit_weights_equal_ch3() {
        for n in [1usize, 2, 3, 10, 100, 1000] {
            let w = weighted(n, 1.0);
            for i in 0..2000 {
                let key = format!("eq_{i}");
                assert_eq!(
                    w.index(key.as_bytes(), n),
                    PoolHash::Ch3.index(key.as_bytes(), n)
                );
            }
        }
        let keys = || (0..100_000).map(|i| format!("k{i}"));
        assert_eq!(checksum(&weighted(2, 1.0), 2, keys()), 1_346_413_954);
        assert_eq!(checksum(&weighted(100, 1.0), 100, keys()), 2_289_223_413);
    }

    /// Checksums mcrouter's WeightedCh3 unit tests assert (`acc = acc * 31 + index` over keys
    /// "k0".."k9999"), exercising the rehash path with every weight 0.5 and 0.
    #[test]
    fn mcrouter_weighted_checksums() {
        let keys = || (0..10_000).map(|i| format!("k{i}"));
        for (n, want) in [
            (2, 2_395_690_262u32),
            (10, 547_444_706),
            (100, 2_951_198_297),
            (1000, 1_336_857_622),
            (10_000, 3_378_951_161),
        ] {
            assert_eq!(checksum(&weighted(n, 0.5), n, keys()), want, "0.5 x {n}");
        }
        for (n, want) in [
            (2, 3_431_444_300u32),
            (10, 1_290_067_504),
            (100, 2_604_325_093),
            (1000, 337_394_182),
        ] {
            assert_eq!(checksum(&weighted(n, 0.0), n, keys()), want, "0 x {n}");
        }
        // 128-byte keys reach SpookyHash's 32-byte chunk loop.
        let base: String = (0..128u8).map(|i| (b'A' + i % 26) as char).collect();
        let long = || (0..10_000).map(|i| format!("{base}{i}"));
        assert_eq!(checksum(&weighted(10, 0.5), 10, long()), 707_485_837);
        assert_eq!(checksum(&weighted(100, 0.0), 100, long()), 532_711_027);
    }

    #[test]
    fn mixed_weights_starve_zero_weight() {
        let hash = PoolHash::WeightedCh3(vec![1.0, 0.5, 0.0, 0.75, 1.0]);
        let mut counts = [0usize; 5];
        let keys = (0..10_000).map(|i| format!("d{i}"));
        assert_eq!(checksum(&hash, 5, keys.clone()), 2_309_057_571);
        for key in keys {
            counts[hash.index(key.as_bytes(), 5)] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!(counts[0] > counts[1] && counts[4] > counts[1]);
        // The counts mcrouter's test reports for 1000 keys over {1, 1, 0.7}.
        let hash = PoolHash::WeightedCh3(vec![1.0, 1.0, 0.7]);
        let mut counts = [0usize; 3];
        for i in 0..1000 {
            counts[hash.index(i.to_string().as_bytes(), 3)] += 1;
        }
        assert_eq!(counts, [341, 371, 288]);
    }

    /// Lowering one weight only moves keys away from that server.
    #[test]
    fn lowering_a_weight_moves_only_its_keys() {
        let mut weights = vec![1.0; 100];
        weights[42] = 0.3;
        let reduced = PoolHash::WeightedCh3(weights);
        let mut moved = 0;
        for i in 0..10_000 {
            let key = format!("cons_{i}");
            let full = PoolHash::Ch3.index(key.as_bytes(), 100);
            let now = reduced.index(key.as_bytes(), 100);
            if full != 42 {
                assert_eq!(full, now, "{key}");
            } else if now != 42 {
                moved += 1;
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn check_rejects_bad_pools() {
        assert!(PoolHash::Ch3.check(0).is_err());
        assert!(PoolHash::Ch3
            .check(FURC_MAX_POOL_SIZE as usize + 1)
            .is_err());
        assert!(PoolHash::Ch3.check(FURC_MAX_POOL_SIZE as usize).is_ok());
        assert!(PoolHash::Crc32.check(10_000_000).is_ok());
        assert!(PoolHash::WeightedCh3(vec![0.5, 1.5]).check(2).is_err());
        assert!(PoolHash::WeightedCh3(vec![f64::NAN]).check(1).is_err());
        assert!(PoolHash::WeightedCh3(vec![0.5]).check(2).is_err());
        assert!(PoolHash::WeightedCh3(vec![0.0, 1.0]).check(2).is_ok());
    }
}
