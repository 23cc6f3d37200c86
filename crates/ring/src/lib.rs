//! Consistent hashing compatible byte for byte with libmemcached 1.1.4 and twemproxy
//! (nutcracker 0.5.0): every twemproxy key hash, weighted ketama, libmemcached's
//! unweighted ketama, modula and random distribution, hash tags and live-server
//! ejection. Pure computation, no I/O.
//!
//! mcrouter's pool hash functions live beside them: [`furc`] (Ch3 and Crc32),
//! [`spooky`] (SpookyHash V2, used by WeightedCh3) and [`mcrouter`] (the hash functions as a
//! pool names them, and the routing key they hash), [`rendezvous`] (Rendezvous and ConstShard).
//! [`redis_slot`] is Redis Cluster's key to hash slot mapping.
//!
//! ```
//! use ring::{Distribution, Hash, Ring, Server};
//! let servers = vec![
//!     Server::new("127.0.0.1", 21211, 1),
//!     Server::new("127.0.0.1", 21212, 1),
//! ];
//! let mut ring = Ring::new(servers, Distribution::Ketama, Hash::Fnv1a64);
//! let idx = ring.server_for(b"user:42").unwrap();
//! ring.rebuild(&[idx != 0, idx != 1]); // eject the chosen server
//! assert_ne!(ring.server_for(b"user:42"), Some(idx));
//! ```

#![warn(missing_docs)]

pub mod furc;
pub mod hash;
pub mod mcrouter;
pub mod redis_slot;
pub mod rendezvous;
pub mod ring;
pub mod spooky;

pub use crate::furc::{crc32_hash, furc_hash, FURC_MAX_POOL_SIZE};
pub use crate::hash::{Hash, UnknownName};
pub use crate::mcrouter::{PoolHash, PoolHashError, RoutingKey};
pub use crate::redis_slot::{redis_slot, REDIS_SLOTS};
pub use crate::rendezvous::Rendezvous;
pub use crate::ring::{
    hash_tag_slice, ketama_points, Distribution, Point, Ring, Server, KETAMA_DEFAULT_PORT,
};
