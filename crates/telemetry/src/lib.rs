//! What `memfleet serve` and `memfleet route` share for being watched: a latency histogram
//! that one thread writes and any thread reads (`histogram`), the Prometheus text format
//! (`exposition`), and the small HTTP responder that serves it on `/metrics` (`http`).
//!
//! No dependency on either binary's state: each renders its own figures through `Exposition`.

pub mod exposition;
pub mod histogram;
pub mod http;

pub use exposition::{Exposition, Kind};
pub use histogram::{Histogram, Snapshot};
