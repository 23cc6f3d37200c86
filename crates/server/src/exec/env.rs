//! What running a request needs from the worker: shared state, its counters, the clock.

use crate::shared::Shared;
use crate::stats::ThreadStats;

/// What a worker needs to run requests; also used by the UDP path.
pub struct ExecEnv<'a> {
    pub shared: &'a Shared,
    pub stats: &'a ThreadStats,
    pub now: u32,
    /// Whether large values may be handed back for the worker to write from the item's
    /// own buffer (`Paused::value`). False for UDP.
    pub direct: bool,
    /// Reply bytes a request may build before it pauses (see `retrieve`).
    pub reply_cap: usize,
    /// The worker's latency and hot-key probe; None on the UDP path.
    pub probe: Option<&'a crate::metrics::Probe>,
}
