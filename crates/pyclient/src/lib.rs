//! The Python client's wire layer (the `memfleet._native` extension module): request
//! encoding and reply parsing over crates/proto, key placement over crates/ring, and blocking
//! connections that release the GIL while they wait on the network.
//!
//! [`wire`], [`ketama`] and [`zstd_frame`] are plain Rust with unit tests; the PyO3 bindings are compiled only
//! with the `python` feature, which maturin enables.

pub mod ketama;
pub mod wire;
pub mod zstd_frame;

#[cfg(feature = "python")]
mod py;
#[cfg(feature = "python")]
mod py_err;
#[cfg(feature = "python")]
mod py_many;
#[cfg(feature = "python")]
mod py_module;
#[cfg(feature = "python")]
mod py_reply;
