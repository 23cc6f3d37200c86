//! libmemcached's weighted ketama (md5) over server point names, as the Python client's
//! `memfleet.ketama.Ring` exposes it: names and weights in, a server index per key out.

use ring::{Distribution, Hash, Ring, Server};

/// A ketama continuum over point names (`host` or `host:port`) and their weights.
pub struct Ketama {
    ring: Ring,
}

impl Ketama {
    /// `names[i]` is server i's point name; the caller already left out dead servers.
    pub fn new(names: &[String], weights: &[u32]) -> Ketama {
        let servers = names
            .iter()
            .zip(weights)
            .map(|(name, &w)| Server::new(name.clone(), 0, w).named(name.clone()))
            .collect();
        Ketama {
            ring: Ring::new(servers, Distribution::Ketama, Hash::Md5),
        }
    }

    /// Points on the continuum.
    pub fn len(&self) -> usize {
        self.ring.continuum().len()
    }

    /// Whether the continuum has no points (no servers, or all of weight 0).
    pub fn is_empty(&self) -> bool {
        self.ring.continuum().is_empty()
    }

    /// The server index for `key` (0 with one server, as libmemcached skips hashing then).
    pub fn index_for(&self, key: &[u8]) -> Option<usize> {
        if self.ring.servers().len() == 1 {
            return Some(0);
        }
        self.index_for_hash(key_hash(key))
    }

    /// The server index for an already computed key hash.
    pub fn index_for_hash(&self, hash: u32) -> Option<usize> {
        self.ring.server_for_hash(hash)
    }
}

/// md5 key hash: little-endian u32 of the first 4 digest bytes (an empty key hashes too,
/// unlike twemproxy's ring lookup: libmemcached hashes whatever it is given).
pub fn key_hash(key: &[u8]) -> u32 {
    Hash::Md5.hash(key)
}

/// Points of one server, with libmemcached's float32 arithmetic.
pub fn points_for(weight: u32, total_weight: u32, live_servers: u32) -> u32 {
    ring::ring::ketama_points(weight, total_weight, live_servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_spread_keys_over_every_server() {
        let names: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", 61000 + i)).collect();
        let k = Ketama::new(&names, &[1, 1, 1]);
        assert_eq!(k.len(), 3 * 160);
        let mut seen = [0usize; 3];
        for i in 0..3000 {
            seen[k.index_for(format!("key{i}").as_bytes()).unwrap()] += 1;
        }
        assert!(seen.iter().all(|&n| n > 500), "{seen:?}");
    }

    #[test]
    fn one_server_takes_every_key() {
        let k = Ketama::new(&["a".to_owned()], &[1]);
        assert_eq!(k.index_for(b"x"), Some(0));
    }

    #[test]
    fn key_hash_is_md5_little_endian() {
        // md5("") = d41d8cd9...
        assert_eq!(key_hash(b""), 0xd98c_1dd4);
    }
}
