//! What a Redis pool whose servers are learned (a Redis Cluster, a Sentinel-named primary)
//! keeps at run time beside its servers; `topology` fills it in and keeps it current.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use proto::resp::cluster::NodeAddr;

use crate::cluster_slots::ClusterSlots;

/// How long a replica whose connection failed gets no reads (the primary answers them);
/// the watcher normally drops it from the pool before then.
pub const REPLICA_REST_MS: u64 = 5000;

/// Where a learned pool learns from, and a cluster's slot map.
pub struct Live {
    /// The seed nodes or Sentinels as written.
    pub seeds: Vec<NodeAddr>,
    pub slots: Option<ClusterSlots>,
    /// A Sentinel pool's primary (its other servers are replicas).
    pub primary: Option<usize>,
    /// Per server: until when (ms since the router started) it gets no reads.
    resting_until: Vec<AtomicU64>,
}

impl Live {
    pub fn new(
        seeds: Vec<NodeAddr>,
        slots: Option<ClusterSlots>,
        primary: Option<usize>,
        servers: usize,
    ) -> Live {
        Live {
            seeds,
            slots,
            primary,
            resting_until: (0..servers).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A connection to server `s` failed at `now_ms`: no reads go to it for a while.
    pub fn rest(&self, s: usize, now_ms: u64) {
        if let Some(r) = self.resting_until.get(s) {
            r.store(now_ms + REPLICA_REST_MS, Relaxed);
        }
    }

    /// Whether server `s` may take reads at `now_ms`.
    #[inline]
    pub fn may_read(&self, s: usize, now_ms: u64) -> bool {
        self.resting_until
            .get(s)
            .is_some_and(|r| r.load(Relaxed) <= now_ms)
    }
}
