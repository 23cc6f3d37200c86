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
    /// The worker and connection slot flash reads come back to (`flash::reads`); None
    /// without a flash tier and on the UDP path (a datagram on flash keys is answered by an
    /// I/O thread, which reads flash in line).
    pub flash_reads: Option<(usize, usize)>,
    /// The worker and connection slot; None on the UDP path.
    pub conn: Option<(usize, usize)>,
    /// The connection's socket (memcached's `cfd` in `watch` lines); the UDP socket's is not
    /// known here, so 0 there.
    pub fd: i32,
    /// The near-cache listener the connection's reads are tracked for (`track`).
    pub tracked: Option<&'a crate::tracking::Listener>,
}

/// Replies one batch may build before it is written out; the rest of the batch waits, so a
/// pipeline of large gets never builds an unbounded reply buffer.
pub const OUT_CAP: usize = 256 * 1024;

impl<'a> ExecEnv<'a> {
    /// For a TCP or unix-socket worker: replies capped per batch, large values written from
    /// the item itself unless `-vv` logs every reply (it logs what passes through `out`).
    /// `conn`: the worker and the connection's slot.
    pub fn stream(
        shared: &'a Shared,
        stats: &'a ThreadStats,
        now: u32,
        probe: &'a crate::metrics::Probe,
        conn: (usize, usize),
        fd: i32,
    ) -> Self {
        ExecEnv {
            shared,
            stats,
            now,
            direct: shared.verbose() < 2,
            reply_cap: OUT_CAP,
            probe: Some(probe),
            flash_reads: shared.flash_io.is_some().then_some(conn),
            conn: Some(conn),
            fd,
            tracked: None,
        }
    }

    /// For the UDP path: a reply is one datagram train built whole, without the probe.
    pub fn datagram(shared: &'a Shared, stats: &'a ThreadStats, now: u32) -> Self {
        ExecEnv {
            shared,
            stats,
            now,
            direct: false,
            reply_cap: usize::MAX,
            probe: None,
            flash_reads: None,
            conn: None,
            fd: 0,
            tracked: None,
        }
    }
}
