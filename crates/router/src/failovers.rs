//! What a learned Redis pool went through since the router started: failovers (a cluster
//! shard's slots taken over by a replica of their primary, a Sentinel pool's primary
//! switched) and the redirections each cluster node answered with.
//!
//! A failover changes a pool's nodes, and with them the configuration generation, whose
//! counters start again from zero; these are kept by pool name instead so that they outlast
//! it. They are written only on a look-up (start, reload, the watcher) and on a redirection,
//! never on a command's ordinary path.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nutconf::RedisTopology;
use proto::resp::cluster::{ClusterTopology, NodeAddr, Redirect};
use ring::redis_slot::REDIS_SLOTS;

use crate::cluster_slots::UNSERVED;
use crate::shared::PoolRt;

/// A slot no primary was seen serving yet.
const NONE: u32 = u32::MAX;

/// Per slot, the primary last seen serving it and the replicas that primary had then: a
/// primary seen failed (a shard without one) leaves its slots' memory as it was, so a
/// replica that takes them over later is still known for one.
#[derive(Default)]
pub struct SlotMemory {
    /// Slot → index into `primaries`, [`NONE`] where never served.
    owner: Vec<u32>,
    /// Slot → the last failover counted for it (old and new primary).
    counted: Vec<(u32, u32)>,
    /// Each primary seen, with its replicas when last seen.
    primaries: Vec<(NodeAddr, Vec<NodeAddr>)>,
}

/// A shard's slots now served by a node that was a replica of their primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    pub from: NodeAddr,
    pub to: NodeAddr,
    /// How many slots changed hands.
    pub slots: usize,
}

impl SlotMemory {
    fn index(&mut self, node: &NodeAddr) -> u32 {
        match self.primaries.iter().position(|(p, _)| p == node) {
            Some(i) => i as u32,
            None => {
                self.primaries.push((node.clone(), Vec::new()));
                (self.primaries.len() - 1) as u32
            }
        }
    }

    /// Takes in a newly read slot map; returns the failovers it shows against what was seen
    /// before (none the first time). A slot moved to a node that was not a replica of its
    /// primary (resharding) is not one.
    pub fn observe(&mut self, now: &ClusterTopology) -> Vec<Failover> {
        if self.owner.is_empty() {
            self.owner = vec![NONE; REDIS_SLOTS];
            self.counted = vec![(NONE, NONE); REDIS_SLOTS];
        }
        let mut seen: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for shard in &now.shards {
            let Some(primary) = &shard.primary else {
                continue;
            };
            let new = self.index(primary);
            for &(lo, hi) in &shard.slots {
                for slot in usize::from(lo)..=usize::from(hi).min(REDIS_SLOTS - 1) {
                    let old = std::mem::replace(&mut self.owner[slot], new);
                    if old == NONE || old == new {
                        continue;
                    }
                    // A node whose view lags (asked after a newer one) can show the old
                    // primary once more: the same failover seen again is not another.
                    if self.primaries[old as usize].1.contains(primary)
                        && self.counted[slot] != (old, new)
                    {
                        self.counted[slot] = (old, new);
                        *seen.entry((old, new)).or_default() += 1;
                    }
                }
            }
        }
        // Replicas are remembered only after every slot was compared with the old ones.
        for shard in &now.shards {
            if let Some(primary) = &shard.primary {
                let i = self.index(primary) as usize;
                self.primaries[i].1 = shard.replicas.clone();
            }
        }
        seen.into_iter()
            .map(|((from, to), slots)| Failover {
                from: self.primaries[from as usize].0.clone(),
                to: self.primaries[to as usize].0.clone(),
                slots,
            })
            .collect()
    }
}

/// Whether the Sentinels naming `now` is a switch from the primary they named before.
pub fn primary_switched(last: &mut Option<NodeAddr>, now: &NodeAddr) -> bool {
    let switched = last.as_ref().is_some_and(|l| l != now);
    *last = Some(now.clone());
    switched
}

/// A node's counts, by the node's `host:port`.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NodeCounts {
    /// `MOVED` and `ASK` replies the node answered with.
    pub moved: u64,
    pub ask: u64,
    /// Failovers that made the node a primary.
    pub promotions: u64,
}

#[derive(Default)]
struct State {
    failovers: u64,
    slots: SlotMemory,
    primary: Option<NodeAddr>,
    nodes: BTreeMap<String, NodeCounts>,
}

/// One pool's history.
#[derive(Default)]
pub struct PoolHistory {
    state: Mutex<State>,
}

impl PoolHistory {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A cluster's slot map was read; returns the failovers it shows.
    pub fn saw_cluster(&self, map: &ClusterTopology) -> Vec<Failover> {
        let mut st = self.state();
        let found = st.slots.observe(map);
        st.failovers += found.len() as u64;
        for f in &found {
            st.nodes.entry(f.to.to_string()).or_default().promotions += 1;
        }
        found
    }

    /// The Sentinels named `primary`; returns whether that is a switch.
    pub fn saw_primary(&self, primary: &NodeAddr) -> bool {
        let mut st = self.state();
        let switched = primary_switched(&mut st.primary, primary);
        if switched {
            st.failovers += 1;
            st.nodes.entry(primary.to_string()).or_default().promotions += 1;
        }
        switched
    }

    fn redirected(&self, node: &str, ask: bool) {
        let mut st = self.state();
        let counts = st.nodes.entry(node.to_owned()).or_default();
        match ask {
            true => counts.ask += 1,
            false => counts.moved += 1,
        }
    }

    pub fn failovers(&self) -> u64 {
        self.state().failovers
    }

    pub fn node(&self, name: &str) -> NodeCounts {
        self.state().nodes.get(name).copied().unwrap_or_default()
    }
}

static POOLS: Mutex<BTreeMap<String, Arc<PoolHistory>>> = Mutex::new(BTreeMap::new());

/// The history of the pool named `pool`.
pub fn of(pool: &str) -> Arc<PoolHistory> {
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    pools.entry(pool.to_owned()).or_default().clone()
}

/// A cluster pool's slot map was read (a look-up at start, on reload or by the watcher).
pub fn saw_cluster(pool: &str, map: &ClusterTopology) {
    for f in of(pool).saw_cluster(map) {
        crate::log::notice(&format!(
            "pool '{pool}': failover: {} slots of {} now served by {}, its replica",
            f.slots, f.from, f.to
        ));
    }
}

/// A Sentinel pool's primary was asked for.
pub fn saw_primary(pool: &str, primary: &NodeAddr) {
    of(pool).saw_primary(primary);
}

/// Server `from` of `rt` answered a command with `redirect`.
pub fn redirected(rt: &PoolRt, from: usize, redirect: &Redirect) {
    let ask = match redirect {
        Redirect::Moved { .. } => false,
        Redirect::Ask { .. } => true,
        _ => return,
    };
    if let Some(server) = rt.servers.get(from) {
        of(&rt.cfg.name).redirected(&server.stats_name, ask);
    }
}

/// A learned pool's fields for the stats port: `failovers`.
pub fn pool_fields(rt: &PoolRt) -> Vec<(&'static str, i64)> {
    if !rt.cfg.redis_topology.is_discovered() || rt.learned.is_none() {
        return Vec::new();
    }
    vec![("failovers", of(&rt.cfg.name).failovers() as i64)]
}

/// Each server's fields of a learned pool for the stats port, in server order (empty for
/// other pools): a cluster node's slots served now and redirections, and for every learned
/// pool the failovers that made the node a primary.
pub fn server_fields(rt: &PoolRt) -> Vec<Vec<(&'static str, i64)>> {
    if !rt.cfg.redis_topology.is_discovered() || rt.learned.is_none() {
        return Vec::new();
    }
    let history = of(&rt.cfg.name);
    let cluster = rt.cfg.redis_topology == RedisTopology::Cluster;
    let mut served = vec![0i64; rt.servers.len()];
    // Generation 0 is no map's: this is the current one.
    let owners = rt
        .learned
        .as_ref()
        .and_then(|l| l.slots.as_ref())
        .and_then(|s| s.if_newer(0));
    if let Some((_, owners)) = owners {
        for &s in owners.iter().filter(|&&s| s != UNSERVED) {
            if let Some(n) = served.get_mut(usize::from(s)) {
                *n += 1;
            }
        }
    }
    rt.servers
        .iter()
        .zip(served)
        .map(|(server, slots)| {
            let n = history.node(&server.stats_name);
            let mut fields = Vec::with_capacity(4);
            if cluster {
                fields.push(("cluster_slots", slots));
                fields.push(("redirect_moved", n.moved as i64));
                fields.push(("redirect_ask", n.ask as i64));
            }
            fields.push(("promotions", n.promotions as i64));
            fields
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::resp::cluster::ClusterShard;

    fn node(port: u16) -> NodeAddr {
        NodeAddr {
            host: "10.0.0.1".into(),
            port,
        }
    }

    fn shard(slots: &[(u16, u16)], primary: Option<u16>, replicas: &[u16]) -> ClusterShard {
        ClusterShard {
            slots: slots.to_vec(),
            primary: primary.map(node),
            replicas: replicas.iter().map(|&p| node(p)).collect(),
        }
    }

    fn map(shards: Vec<ClusterShard>) -> ClusterTopology {
        ClusterTopology { shards }
    }

    /// Three primaries 1, 2, 3 with replicas 11, 12, 13.
    fn three() -> ClusterTopology {
        map(vec![
            shard(&[(0, 5460)], Some(1), &[11]),
            shard(&[(5461, 10922)], Some(2), &[12]),
            shard(&[(10923, 16383)], Some(3), &[13]),
        ])
    }

    #[test]
    fn a_replica_taking_over_is_one_failover() {
        let mut m = SlotMemory::default();
        assert!(m.observe(&three()).is_empty(), "the first map is no change");
        assert!(m.observe(&three()).is_empty());
        let mut after = three();
        after.shards[1] = shard(&[(5461, 10922)], Some(12), &[]);
        assert_eq!(
            m.observe(&after),
            vec![Failover {
                from: node(2),
                to: node(12),
                slots: 5462
            }]
        );
        assert!(m.observe(&after).is_empty(), "counted once");
        // The old primary back as a replica, then a failover back to it.
        after.shards[1] = shard(&[(5461, 10922)], Some(12), &[2]);
        assert!(m.observe(&after).is_empty());
        assert_eq!(m.observe(&three()).len(), 1);
    }

    #[test]
    fn a_failover_seen_through_a_map_without_the_primary() {
        let mut m = SlotMemory::default();
        m.observe(&three());
        // The primary is failed: its shard has none and its slots are served by nobody.
        let mut down = three();
        down.shards[0] = shard(&[(0, 5460)], None, &[11]);
        assert!(m.observe(&down).is_empty());
        let mut up = three();
        up.shards[0] = shard(&[(0, 5460)], Some(11), &[]);
        let f = m.observe(&up);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].from.port, f[0].to.port, f[0].slots), (1, 11, 5461));
    }

    #[test]
    fn a_lagging_view_showing_the_old_primary_again_is_no_second_failover() {
        let mut m = SlotMemory::default();
        m.observe(&three());
        let mut after = three();
        after.shards[0] = shard(&[(0, 5460)], Some(11), &[]);
        assert_eq!(m.observe(&after).len(), 1);
        // Another node still names the old primary, with 11 its replica; then it catches up.
        assert!(m.observe(&three()).is_empty());
        assert!(m.observe(&after).is_empty());
        // 1 back as 11's replica and a real failover back to it, then to 11 again: two more.
        after.shards[0] = shard(&[(0, 5460)], Some(11), &[1]);
        assert!(m.observe(&after).is_empty());
        assert_eq!(m.observe(&three()).len(), 1);
        assert_eq!(m.observe(&after).len(), 1);
    }

    #[test]
    fn resharding_and_new_nodes_are_no_failover() {
        let mut m = SlotMemory::default();
        m.observe(&three());
        // 1,000 slots move from primary 1 to primary 2; a new replica 21 joins primary 1.
        let moved = map(vec![
            shard(&[(1000, 5460)], Some(1), &[11, 21]),
            shard(&[(0, 999), (5461, 10922)], Some(2), &[12]),
            shard(&[(10923, 16383)], Some(3), &[13]),
        ]);
        assert!(m.observe(&moved).is_empty());
        // A new primary 4 (no one's replica) takes slots of 3.
        let mut added = moved.clone();
        added.shards[2] = shard(&[(11000, 16383)], Some(3), &[13]);
        added.shards.push(shard(&[(10923, 10999)], Some(4), &[]));
        assert!(m.observe(&added).is_empty());
    }

    #[test]
    fn two_shards_failing_over_at_once_are_two() {
        let mut m = SlotMemory::default();
        m.observe(&three());
        let after = map(vec![
            shard(&[(0, 5460)], Some(11), &[]),
            shard(&[(5461, 10922)], Some(2), &[12]),
            shard(&[(10923, 16383)], Some(13), &[]),
        ]);
        let ports: Vec<_> = m
            .observe(&after)
            .iter()
            .map(|f| (f.from.port, f.to.port))
            .collect();
        assert_eq!(ports, vec![(1, 11), (3, 13)]);
    }

    #[test]
    fn sentinel_switches_count_changes_only() {
        let mut last = None;
        assert!(!primary_switched(&mut last, &node(1)), "the first answer");
        assert!(!primary_switched(&mut last, &node(1)));
        assert!(primary_switched(&mut last, &node(2)));
        assert!(!primary_switched(&mut last, &node(2)));
        assert!(primary_switched(&mut last, &node(1)));
    }

    #[test]
    fn pool_history_counts_by_node() {
        let h = PoolHistory::default();
        h.saw_cluster(&three());
        let mut after = three();
        after.shards[2] = shard(&[(10923, 16383)], Some(13), &[]);
        assert_eq!(h.saw_cluster(&after).len(), 1);
        h.redirected("10.0.0.1:2", false);
        h.redirected("10.0.0.1:2", true);
        h.redirected("10.0.0.1:2", true);
        assert_eq!(h.failovers(), 1);
        assert_eq!(
            h.node("10.0.0.1:13"),
            NodeCounts {
                promotions: 1,
                ..Default::default()
            }
        );
        assert_eq!(
            h.node("10.0.0.1:2"),
            NodeCounts {
                moved: 1,
                ask: 2,
                promotions: 0
            }
        );
        let s = PoolHistory::default();
        assert!(!s.saw_primary(&node(1)));
        assert!(s.saw_primary(&node(2)));
        assert_eq!((s.failovers(), s.node("10.0.0.1:2").promotions), (1, 1));
    }
}
