//! Server selection: ketama (weighted, twemproxy/libmemcached), libmemcached's unweighted
//! ketama, modula and random, over the live subset of a configured server list.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::{digest_word, md5_digest, Hash, UnknownName};

/// twemproxy and libmemcached leave the port out of the point name when it is 11211.
pub const KETAMA_DEFAULT_PORT: u16 = 11211;
/// Points per server in the weighted ring before weight scaling.
const KETAMA_POINTS_PER_SERVER: u32 = 160;
/// Points per server in libmemcached's unweighted ring.
const UNWEIGHTED_POINTS_PER_SERVER: u32 = 100;
/// twemproxy formats point names into a 273-byte buffer, so longer names are cut at 272.
const KETAMA_MAX_POINT_NAME: usize = 272;

/// How keys map onto servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Weighted ketama: points from MD5 of `"<label>-i"`, count proportional to weight.
    /// Identical in twemproxy (`distribution: ketama`) and libmemcached
    /// (`consistent weighted`, `OPT_LIBKETAMA_COMPATIBLE`).
    Ketama,
    /// libmemcached `consistent ketama` with every weight 1: 100 points per server,
    /// point i = key-hash of `"<label>-i"`. Weights are ignored.
    KetamaUnweighted,
    /// `slots[hash % slots.len()]`, each live server repeated `weight` times in order.
    Modula,
    /// Uniform over live servers, ignoring the key and weights.
    Random,
}

impl Distribution {
    /// twemproxy's three names (`ketama`, `modula`, `random`); the unweighted
    /// libmemcached ring has no nutcracker.yml name.
    pub fn from_name(name: &str) -> Option<Distribution> {
        match name {
            "ketama" => Some(Distribution::Ketama),
            "modula" => Some(Distribution::Modula),
            "random" => Some(Distribution::Random),
            _ => None,
        }
    }

    /// The name twemproxy's `distribution:` gives this distribution.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Ketama => "ketama",
            Distribution::KetamaUnweighted => "ketama_unweighted",
            Distribution::Modula => "modula",
            Distribution::Random => "random",
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Distribution {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Distribution::from_name(s).ok_or_else(|| UnknownName(s.to_owned()))
    }
}

/// One configured backend. `host` is kept as configured (not resolved): it is part of
/// the point names, so `localhost` and `127.0.0.1` give different rings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    /// Host name or address as configured, or a unix socket path.
    pub host: String,
    /// 0 means a unix socket path in `host` (as in twemproxy).
    pub port: u16,
    /// Relative share of the keys (ketama points or modula slots).
    pub weight: u32,
    /// twemproxy node name (`host:port:weight name`); replaces the address in point names.
    pub name: Option<String>,
}

impl Server {
    /// A server without a node name.
    pub fn new(host: impl Into<String>, port: u16, weight: u32) -> Server {
        Server {
            host: host.into(),
            port,
            weight,
            name: None,
        }
    }

    /// The same server with a twemproxy node name.
    pub fn named(mut self, name: impl Into<String>) -> Server {
        self.name = Some(name.into());
        self
    }

    /// The `<label>` in ketama point names `"<label>-i"`: the node name if set, else `host`
    /// for port 11211, else `host:port`. For a unix socket (port 0) twemproxy's parser
    /// leaves the colon before the weight in, giving `"/path:"`.
    pub fn point_label(&self) -> String {
        match (&self.name, self.port) {
            (Some(name), _) => name.clone(),
            (None, KETAMA_DEFAULT_PORT) => self.host.clone(),
            (None, 0) => format!("{}:", self.host),
            (None, port) => format!("{}:{}", self.host, port),
        }
    }
}

/// One point on a ketama continuum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Point {
    /// Position on the continuum: the hash value keys at or below it map to.
    pub value: u32,
    /// Index into the configured server list.
    pub index: u32,
}

/// Number of weighted-ketama points for a server, with twemproxy's and libmemcached's
/// float32 arithmetic (equal weights do not always give exactly 160).
pub fn ketama_points(weight: u32, total_weight: u32, live_servers: u32) -> u32 {
    let pct = weight as f32 / total_weight as f32;
    let per_hash_groups = pct * KETAMA_POINTS_PER_SERVER as f32 / 4.0 * live_servers as f32;
    // The C adds a double 1e-10 and casts back to float before floorf().
    let nudged = (per_hash_groups as f64 + 0.000_000_000_1) as f32;
    // `as` saturates (NaN -> 0), so a zero total weight simply yields no points.
    (nudged.floor() as u32).saturating_mul(4)
}

/// The part of `key` that is hashed: with a hash tag `[l, r]`, the bytes strictly between
/// the first `l` and the first `r` after it, when that span is non-empty; otherwise the
/// whole key (twemproxy `server_pool_idx`).
pub fn hash_tag_slice(key: &[u8], tag: Option<[u8; 2]>) -> &[u8] {
    let Some([left, right]) = tag else {
        return key;
    };
    let Some(start) = key.iter().position(|&b| b == left) else {
        return key;
    };
    match key[start + 1..].iter().position(|&b| b == right) {
        Some(len) if len > 0 => &key[start + 1..start + 1 + len],
        _ => key,
    }
}

/// A built ring over a configured server list. Lookups take `&self` and are lock-free,
/// so one `Ring` can be shared between threads; `rebuild` needs `&mut self`.
#[derive(Debug)]
pub struct Ring {
    servers: Vec<Server>,
    live: Vec<bool>,
    distribution: Distribution,
    hash: Hash,
    hash_tag: Option<[u8; 2]>,
    /// Ketama continuum sorted by (value, index).
    continuum: Vec<Point>,
    /// Modula: cumulative weight ends of live servers; `(end, index)`. Equivalent to
    /// twemproxy's slot list with each server repeated `weight` times, without
    /// materialising a huge weight.
    modula: Vec<(u64, u32)>,
    /// Random: indexes of live servers.
    slots: Vec<u32>,
    /// splitmix64 counter for `Distribution::Random`.
    rng: AtomicU64,
}

impl Clone for Ring {
    fn clone(&self) -> Ring {
        Ring {
            servers: self.servers.clone(),
            live: self.live.clone(),
            distribution: self.distribution,
            hash: self.hash,
            hash_tag: self.hash_tag,
            continuum: self.continuum.clone(),
            modula: self.modula.clone(),
            slots: self.slots.clone(),
            rng: AtomicU64::new(self.rng.load(Ordering::Relaxed)),
        }
    }
}

impl Ring {
    /// Builds a ring with every server live. A server of weight 0 gets no points or slots
    /// under the weighted distributions (twemproxy's config rejects weight 0 anyway).
    pub fn new(servers: Vec<Server>, distribution: Distribution, hash: Hash) -> Ring {
        let live = vec![true; servers.len()];
        let seed = RandomState::new().hash_one(0x6d65_6d66_6c65_6574_u64);
        let mut ring = Ring {
            servers,
            live,
            distribution,
            hash,
            hash_tag: None,
            continuum: Vec::new(),
            modula: Vec::new(),
            slots: Vec::new(),
            rng: AtomicU64::new(seed),
        };
        ring.build();
        ring
    }

    /// Sets the twemproxy hash tag (e.g. `Some(*b"{}")`).
    pub fn with_hash_tag(mut self, tag: Option<[u8; 2]>) -> Ring {
        self.hash_tag = tag;
        self
    }

    /// Makes `Distribution::Random` picks reproducible.
    pub fn with_seed(self, seed: u64) -> Ring {
        self.rng.store(seed, Ordering::Relaxed);
        self
    }

    /// The configured servers, live or not, in configuration order.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Which servers the last rebuild kept (index as in [`Ring::servers`]).
    pub fn live(&self) -> &[bool] {
        &self.live
    }

    /// How many servers are live.
    pub fn live_count(&self) -> usize {
        self.live.iter().filter(|&&l| l).count()
    }

    /// How keys are spread over the servers.
    pub fn distribution(&self) -> Distribution {
        self.distribution
    }

    /// The key hash function.
    pub fn hash(&self) -> Hash {
        self.hash
    }

    /// The hash tag delimiters, if keys are hashed by their tagged part only.
    pub fn hash_tag(&self) -> Option<[u8; 2]> {
        self.hash_tag
    }

    /// The sorted ketama continuum (empty for modula and random).
    pub fn continuum(&self) -> &[Point] {
        &self.continuum
    }

    /// Sets which servers are in the ring and rebuilds it, as twemproxy does after an
    /// ejection or a retry. `live[i]` is server `i`; servers past the end of `live` count
    /// as live, extra flags are ignored.
    pub fn rebuild(&mut self, live: &[bool]) {
        for (i, flag) in self.live.iter_mut().enumerate() {
            *flag = live.get(i).copied().unwrap_or(true);
        }
        self.build();
    }

    /// The key hash after applying the hash tag. An empty key hashes to 0 (twemproxy).
    pub fn hash_key(&self, key: &[u8]) -> u32 {
        let key = hash_tag_slice(key, self.hash_tag);
        if key.is_empty() {
            0
        } else {
            self.hash.hash(key)
        }
    }

    /// Index (into the configured list) of the server for `key`, or `None` when no
    /// server is live.
    pub fn server_for(&self, key: &[u8]) -> Option<usize> {
        match self.servers.len() {
            0 => None,
            // twemproxy skips hashing for one-server pools.
            1 => self.live[0].then_some(0),
            _ if self.distribution == Distribution::Random => self.random_pick(),
            _ => self.server_for_hash(self.hash_key(key)),
        }
    }

    /// Dispatches an already computed key hash (`Random` ignores it).
    pub fn server_for_hash(&self, hash: u32) -> Option<usize> {
        match self.distribution {
            Distribution::Ketama | Distribution::KetamaUnweighted => {
                if self.continuum.is_empty() {
                    return None;
                }
                let at = self.continuum.partition_point(|p| p.value < hash);
                let point = self.continuum.get(at).unwrap_or(&self.continuum[0]);
                Some(point.index as usize)
            }
            Distribution::Modula => {
                let total = self.modula.last().map_or(0, |&(end, _)| end);
                if total == 0 {
                    return None;
                }
                let slot = u64::from(hash) % total;
                let at = self.modula.partition_point(|&(end, _)| end <= slot);
                Some(self.modula[at].1 as usize)
            }
            Distribution::Random => self.random_pick(),
        }
    }

    fn random_pick(&self) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let r = splitmix64(
            self.rng
                .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                .wrapping_add(0x9e37_79b9_7f4a_7c15),
        );
        Some(self.slots[(r % self.slots.len() as u64) as usize] as usize)
    }

    fn live_servers(&self) -> impl Iterator<Item = (u32, &Server)> {
        self.servers
            .iter()
            .zip(&self.live)
            .enumerate()
            .filter(|(_, (_, &live))| live)
            .map(|(i, (s, _))| (i as u32, s))
    }

    fn build(&mut self) {
        self.continuum.clear();
        self.modula.clear();
        self.slots.clear();
        match self.distribution {
            Distribution::Ketama => self.build_weighted_ketama(),
            Distribution::KetamaUnweighted => self.build_unweighted_ketama(),
            Distribution::Modula => {
                let mut end = 0u64;
                let mut modula = Vec::new();
                for (i, s) in self.live_servers() {
                    if s.weight > 0 {
                        end += u64::from(s.weight);
                        modula.push((end, i));
                    }
                }
                self.modula = modula;
            }
            Distribution::Random => {
                self.slots = self.live_servers().map(|(i, _)| i).collect();
            }
        }
    }

    fn build_weighted_ketama(&mut self) {
        let (count, total) = self.live_servers().fold((0u32, 0u32), |(n, w), (_, s)| {
            (n + 1, w.wrapping_add(s.weight))
        });
        let mut continuum = Vec::new();
        let mut name = Vec::with_capacity(64);
        for (i, s) in self.live_servers() {
            let label = s.point_label();
            for group in 0..ketama_points(s.weight, total, count) / 4 {
                name.clear();
                name.extend_from_slice(label.as_bytes());
                name.extend_from_slice(format!("-{group}").as_bytes());
                name.truncate(KETAMA_MAX_POINT_NAME);
                let digest = md5_digest(&name);
                for word in 0..4 {
                    continuum.push(Point {
                        value: digest_word(&digest, word),
                        index: i,
                    });
                }
            }
        }
        continuum.sort_unstable();
        self.continuum = continuum;
    }

    fn build_unweighted_ketama(&mut self) {
        let mut continuum = Vec::new();
        for (i, s) in self.live_servers() {
            let label = s.point_label();
            for n in 0..UNWEIGHTED_POINTS_PER_SERVER {
                let value = self.hash.hash(format!("{label}-{n}").as_bytes());
                continuum.push(Point { value, index: i });
            }
        }
        continuum.sort_unstable();
        self.continuum = continuum;
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn three(dist: Distribution, hash: Hash) -> Ring {
        Ring::new(
            vec![
                Server::new("127.0.0.1", 21211, 1),
                Server::new("127.0.0.1", 21212, 1),
                Server::new("127.0.0.1", 21213, 1),
            ],
            dist,
            hash,
        )
    }

    #[test]
    fn ring_is_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Ring>();
    }

    #[test]
    fn point_counts_follow_float_formula() {
        assert_eq!(ketama_points(1, 3, 3), 160);
        assert_eq!(ketama_points(1, 8, 3), 60);
        assert_eq!(ketama_points(2, 8, 3), 120);
        assert_eq!(ketama_points(5, 8, 3), 300);
        assert_eq!(ketama_points(0, 0, 0), 0);
        assert_eq!(ketama_points(0, 5, 3), 0);
        let ring = three(Distribution::Ketama, Hash::Md5);
        assert_eq!(ring.continuum().len(), 480);
        assert!(ring.continuum().windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn point_labels() {
        assert_eq!(Server::new("10.0.0.1", 11211, 1).point_label(), "10.0.0.1");
        assert_eq!(
            Server::new("10.0.0.1", 11212, 1).point_label(),
            "10.0.0.1:11212"
        );
        assert_eq!(
            Server::new("10.0.0.1", 11212, 1)
                .named("alpha")
                .point_label(),
            "alpha"
        );
        assert_eq!(
            Server::new("/tmp/mc.sock", 0, 1).point_label(),
            "/tmp/mc.sock:"
        );
    }

    #[test]
    fn hash_tag_rules() {
        let tag = Some(*b"{}");
        assert_eq!(hash_tag_slice(b"user:{42}:name", tag), b"42");
        assert_eq!(hash_tag_slice(b"{a}{b}", tag), b"a");
        // Empty tag content hashes the whole key.
        assert_eq!(hash_tag_slice(b"x{}y", tag), b"x{}y");
        // Right char must come after the left one.
        assert_eq!(hash_tag_slice(b"}x{y", tag), b"}x{y");
        assert_eq!(hash_tag_slice(b"no-tag", tag), b"no-tag");
        assert_eq!(hash_tag_slice(b"a{b}", None), b"a{b}");
        // Identical left/right characters work too.
        assert_eq!(hash_tag_slice(b"k$v$w", Some(*b"$$")), b"v");
        let ring = three(Distribution::Ketama, Hash::Fnv1a64).with_hash_tag(tag);
        assert_eq!(ring.hash_key(b"user:{42}:a"), Hash::Fnv1a64.hash(b"42"));
        assert_eq!(
            ring.server_for(b"a:{42}"),
            ring.server_for(b"zzz:{42}:other")
        );
    }

    #[test]
    fn empty_key_hashes_to_zero() {
        let ring = three(Distribution::Ketama, Hash::Md5);
        assert_eq!(ring.hash_key(b""), 0);
        assert_eq!(
            ring.server_for(b""),
            Some(ring.continuum()[0].index as usize)
        );
    }

    #[test]
    fn wraps_past_last_point() {
        let ring = three(Distribution::Ketama, Hash::Md5);
        let last = ring.continuum().last().unwrap();
        let first = ring.continuum()[0];
        assert_eq!(ring.server_for_hash(last.value), Some(last.index as usize));
        if last.value < u32::MAX {
            assert_eq!(
                ring.server_for_hash(last.value + 1),
                Some(first.index as usize)
            );
        }
        assert_eq!(
            ring.server_for_hash(first.value),
            Some(first.index as usize)
        );
    }

    #[test]
    fn modula_handles_huge_weights_without_allocating_them() {
        let ring = Ring::new(
            vec![Server::new("a", 1, 1), Server::new("b", 1, 1_215_752_191)],
            Distribution::Modula,
            Hash::Md5,
        );
        assert_eq!(ring.server_for_hash(0), Some(0));
        assert_eq!(ring.server_for_hash(1), Some(1));
        assert_eq!(ring.server_for_hash(1_215_752_192), Some(0));
    }

    #[test]
    fn modula_repeats_by_weight() {
        let ring = Ring::new(
            vec![Server::new("a", 1, 1), Server::new("b", 1, 2)],
            Distribution::Modula,
            Hash::Md5,
        );
        assert_eq!(ring.server_for_hash(0), Some(0));
        assert_eq!(ring.server_for_hash(1), Some(1));
        assert_eq!(ring.server_for_hash(2), Some(1));
        assert_eq!(ring.server_for_hash(3), Some(0));
    }

    #[test]
    fn random_is_seeded_and_uniform_over_live() {
        let mut a = three(Distribution::Random, Hash::Md5).with_seed(7);
        let b = three(Distribution::Random, Hash::Md5).with_seed(7);
        let picks: Vec<_> = (0..50).map(|_| a.server_for(b"k")).collect();
        let again: Vec<_> = (0..50).map(|_| b.server_for(b"k")).collect();
        assert_eq!(picks, again);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            counts[a.server_for(b"k").unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        a.rebuild(&[false, true, false]);
        assert!((0..100).all(|_| a.server_for(b"k") == Some(1)));
    }

    #[test]
    fn no_live_servers_gives_none() {
        for dist in [
            Distribution::Ketama,
            Distribution::KetamaUnweighted,
            Distribution::Modula,
            Distribution::Random,
        ] {
            let mut ring = three(dist, Hash::Md5);
            ring.rebuild(&[false, false, false]);
            assert_eq!(ring.server_for(b"foo"), None, "{dist}");
            ring.rebuild(&[]);
            assert!(ring.server_for(b"foo").is_some(), "{dist}");
        }
        let empty = Ring::new(Vec::new(), Distribution::Ketama, Hash::Md5);
        assert_eq!(empty.server_for(b"foo"), None);
        let mut single = Ring::new(
            vec![Server::new("a", 1, 1)],
            Distribution::Ketama,
            Hash::Md5,
        );
        assert_eq!(single.server_for(b"foo"), Some(0));
        single.rebuild(&[false]);
        assert_eq!(single.server_for(b"foo"), None);
    }

    #[test]
    fn ejected_ring_equals_static_ring_of_the_rest() {
        for dist in [
            Distribution::Ketama,
            Distribution::KetamaUnweighted,
            Distribution::Modula,
        ] {
            let mut full = three(dist, Hash::Md5);
            full.rebuild(&[true, false, true]);
            let rest = Ring::new(
                vec![
                    Server::new("127.0.0.1", 21211, 1),
                    Server::new("127.0.0.1", 21213, 1),
                ],
                dist,
                Hash::Md5,
            );
            for i in 0..2000u32 {
                let key = format!("key-{i}");
                let want = rest.server_for(key.as_bytes()).map(|r| [0, 2][r]);
                assert_eq!(full.server_for(key.as_bytes()), want, "{dist} {key}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for d in [
            Distribution::Ketama,
            Distribution::Modula,
            Distribution::Random,
        ] {
            assert_eq!(Distribution::from_name(d.name()), Some(d));
        }
        assert_eq!(Distribution::from_name("ketama_unweighted"), None);
        assert!("vnode".parse::<Distribution>().is_err());
    }

    fn dist_strategy() -> impl Strategy<Value = Distribution> {
        prop_oneof![
            Just(Distribution::Ketama),
            Just(Distribution::KetamaUnweighted),
            Just(Distribution::Modula),
            Just(Distribution::Random),
        ]
    }

    fn hash_strategy() -> impl Strategy<Value = Hash> {
        (0..Hash::ALL.len()).prop_map(|i| Hash::ALL[i])
    }

    fn servers(weights: &[u32]) -> Vec<Server> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server::new("10.1.0.1", 20000 + i as u16, w))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn lookup_is_total_over_live_servers(
            weights in prop::collection::vec(1u32..6, 1..8),
            live_bits in any::<u8>(),
            dist in dist_strategy(),
            hash in hash_strategy(),
            keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..40),
        ) {
            let n = weights.len();
            let live: Vec<bool> = (0..n).map(|i| live_bits & (1 << i) != 0).collect();
            let mut ring = Ring::new(servers(&weights), dist, hash).with_seed(1);
            ring.rebuild(&live);
            for key in &keys {
                match ring.server_for(key) {
                    Some(i) => prop_assert!(i < n && live[i]),
                    None => prop_assert!(!live.contains(&true)),
                }
            }
        }

        #[test]
        fn ejecting_a_server_only_moves_its_keys(
            weights in prop::collection::vec(1u32..6, 2..8),
            victim in any::<prop::sample::Index>(),
            unweighted in any::<bool>(),
            hash in hash_strategy(),
            keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..24), 1..200),
        ) {
            let dist = if unweighted { Distribution::KetamaUnweighted } else { Distribution::Ketama };
            let n = weights.len();
            let victim = victim.index(n);
            let before = Ring::new(servers(&weights), dist, hash);
            let mut after = before.clone();
            let mut live = vec![true; n];
            live[victim] = false;
            after.rebuild(&live);
            // Weighted ketama rescales the others' point counts when the total weight
            // changes (as twemproxy does); a key of a surviving server may move only if its
            // server lost points or the new owner gained some.
            let points = |ring: &Ring, i: usize| ring.continuum().iter().filter(|p| p.index as usize == i).count();
            for key in &keys {
                let (b, a) = (before.server_for(key).unwrap(), after.server_for(key).unwrap());
                prop_assert_ne!(a, victim);
                if b != victim && a != b {
                    prop_assert!(points(&after, a) > points(&before, a) || points(&after, b) < points(&before, b),
                        "key moved from {} to {} though neither point count changed", b, a);
                }
            }
        }

        #[test]
        fn equal_weights_keep_point_sets(n in 2usize..12, victim in any::<prop::sample::Index>()) {
            // With equal weights the per-server point set is a prefix-stable sequence, so the
            // remaining servers' points after an ejection are a subset or superset of before.
            let before = Ring::new(servers(&vec![1; n]), Distribution::Ketama, Hash::Md5);
            let mut after = before.clone();
            let mut live = vec![true; n];
            live[victim.index(n)] = false;
            after.rebuild(&live);
            let pts = |r: &Ring, i: usize| r.continuum().iter().filter(|p| p.index as usize == i).map(|p| p.value).collect::<std::collections::BTreeSet<_>>();
            for i in (0..n).filter(|&i| i != victim.index(n)) {
                let (b, a) = (pts(&before, i), pts(&after, i));
                prop_assert!(b.is_subset(&a) || a.is_subset(&b));
            }
        }
    }
}
