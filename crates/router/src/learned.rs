//! What a Redis pool whose servers are learned (a Redis Cluster, a Sentinel-named primary)
//! keeps at run time beside its servers; `topology` fills it in and keeps it current.

use proto::resp::cluster::NodeAddr;

use crate::cluster_slots::ClusterSlots;

/// Where a learned pool learns from, and a cluster's slot map.
pub struct Live {
    /// The seed nodes or Sentinels as written.
    pub seeds: Vec<NodeAddr>,
    pub slots: Option<ClusterSlots>,
}
