//! Hot keys, pure logic: finding the keys asked for most (`topk`: a sampled space-saving
//! sketch) and the rules of the router's cache of their values (`cache`: which keys are hot,
//! when a cached reply may be served, and the write generations that keep a value a write
//! replaced from being cached again), and which keys to cache so that the busiest server
//! comes down toward the mean (`balance`). No I/O, no clock: callers pass the time.

pub mod balance;
pub mod cache;
pub mod topk;

pub use balance::{balance, Candidate, Demand};
pub use cache::{hot_keys, Cache, Generations, Lookup, Stamp};
pub use topk::{merge, Entry, Sampler, TopK};
