//! Consistent hashing compatible byte for byte with libmemcached 1.1.4 and twemproxy
//! (nutcracker 0.5.0): every twemproxy key hash, weighted ketama, libmemcached's
//! unweighted ketama, modula and random distribution, hash tags and live-server
//! ejection. Pure computation, no I/O.
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

pub mod hash;
pub mod ring;

pub use crate::hash::{Hash, UnknownName};
pub use crate::ring::{
    hash_tag_slice, ketama_points, Distribution, Point, Ring, Server, KETAMA_DEFAULT_PORT,
};
