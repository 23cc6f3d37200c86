//! Redis pools whose servers are learned rather than written: a Redis Cluster's nodes and
//! slot map, read from its seed nodes, and the primary a set of Sentinels names.
//!
//! At start and on each reload every such pool is looked up (`discover`), its `servers`
//! replaced by what was found (`expand`) and, for a cluster, the slot map attached to the
//! pool (`attach`). A watcher thread per pool (`watch`) then keeps it current: a moved slot
//! updates the map in place; a changed node set or a new primary goes to the control
//! thread, which installs it as a new generation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nutconf::{Config, Pool, ReadFrom, RedisTopology, ServerAddr, ServerSpec};
use proto::resp::cluster::{
    parse_cluster_shards, parse_cluster_slots, parse_master_addr, parse_sentinel_replicas,
    ClusterTopology, NodeAddr,
};

use crate::cluster_slots::{ClusterSlots, UNSERVED};
use crate::error::RouteError;
use crate::learned::Live;
use crate::shared::{PoolRt, Shared};

mod query;
pub mod watch;

use query::{text_of, Conn};

/// What a pool's look-up found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A cluster's nodes (primaries first), per slot the index of its primary, and per
    /// node the indexes of its replicas.
    Cluster {
        nodes: Vec<NodeAddr>,
        owners: Vec<Option<u16>>,
        replicas: Vec<Vec<u16>>,
    },
    /// The primary the Sentinels name and, for a pool reading from replicas, its replicas
    /// they take to be up.
    Primary {
        primary: NodeAddr,
        replicas: Vec<NodeAddr>,
    },
}

impl Found {
    fn nodes(&self) -> Vec<NodeAddr> {
        match self {
            Found::Cluster { nodes, .. } => nodes.clone(),
            Found::Primary { primary, replicas } => {
                let mut all = vec![primary.clone()];
                all.extend(replicas.iter().filter(|r| *r != primary).cloned());
                all
            }
        }
    }

    /// The node set and, for a Sentinel pool, which node is the primary: a change of either
    /// is a new generation.
    pub fn identity(&self) -> (BTreeSet<String>, Option<String>) {
        let nodes = self.nodes().iter().map(|n| n.to_string()).collect();
        let primary = match self {
            Found::Primary { primary, .. } => Some(primary.to_string()),
            Found::Cluster { .. } => None,
        };
        (nodes, primary)
    }
}

/// Per node of `nodes` (a primary), the indexes in `nodes` of its shard's replicas.
fn replicas_by_node(t: &ClusterTopology, nodes: &[NodeAddr]) -> Vec<Vec<u16>> {
    let index = |n: &NodeAddr| nodes.iter().position(|x| x == n).map(|i| i as u16);
    let mut out = vec![Vec::new(); nodes.len()];
    for shard in &t.shards {
        let Some(p) = shard.primary.as_ref().and_then(index) else {
            continue;
        };
        out[usize::from(p)] = shard.replicas.iter().filter_map(index).collect();
    }
    out
}

/// Each learned pool's look-up, by pool name.
pub type Topologies = BTreeMap<String, Found>;

/// How long one look-up conversation may take.
fn wait_of(pool: &Pool) -> Duration {
    pool.timeout
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(100), Duration::from_secs(2))
}

fn seeds_of(pool: &Pool) -> Vec<NodeAddr> {
    pool.servers
        .iter()
        .filter_map(|s| match &s.addr {
            ServerAddr::Tcp { host, port } => Some(NodeAddr {
                host: host.clone(),
                port: *port,
            }),
            ServerAddr::Unix { .. } => None,
        })
        .collect()
}

/// The cluster's map as the first of `from` that answers gives it. A server that is not a
/// cluster node is an error at once: it is a configuration mistake, not an outage.
pub fn discover_cluster(pool: &Pool, from: &[NodeAddr]) -> Result<ClusterTopology, String> {
    let wait = wait_of(pool);
    let mut failed = Vec::new();
    for addr in from {
        let mut conn = match Conn::open(addr, pool.backend_auth(), wait) {
            Ok(c) => c,
            Err(e) => {
                failed.push(e);
                continue;
            }
        };
        let topology = match conn.ask(&[b"CLUSTER", b"SHARDS"]) {
            Ok(r) if r.starts_with(b"-") => {
                let text = text_of(&r);
                if text.contains("cluster support disabled") {
                    return Err(format!("{addr} is not a Redis Cluster node: {text}"));
                }
                // Redis before 7 has no CLUSTER SHARDS.
                match conn.ask(&[b"CLUSTER", b"SLOTS"]) {
                    Ok(r) if r.starts_with(b"-") => Err(format!("{addr}: {}", text_of(&r))),
                    Ok(r) => parse_cluster_slots(&r, &addr.host),
                    Err(e) => Err(format!("{addr}: {e}")),
                }
            }
            Ok(r) => parse_cluster_shards(&r, &addr.host),
            Err(e) => Err(format!("{addr}: {e}")),
        };
        match topology {
            Ok(t) if t.covered_slots() == 0 => {
                failed.push(format!("{addr}: the cluster serves no slots yet"))
            }
            Ok(t) => return Ok(t),
            Err(e) => failed.push(e),
        }
    }
    Err(format!(
        "no seed node gave a slot map ({})",
        failed.join("; ")
    ))
}

/// The primary the first answering Sentinel names for master `name`.
pub fn discover_primary(
    pool: &Pool,
    name: &str,
    sentinels: &[NodeAddr],
) -> Result<NodeAddr, String> {
    let wait = wait_of(pool);
    let mut failed = Vec::new();
    let mut unknown = 0;
    for addr in sentinels {
        let reply = Conn::open(addr, pool.sentinel_auth(), wait)
            .and_then(|mut c| c.ask(&[b"SENTINEL", b"get-master-addr-by-name", name.as_bytes()]));
        match reply.and_then(|r| parse_master_addr(&r)) {
            Ok(Some(primary)) => return Ok(primary),
            Ok(None) => unknown += 1,
            Err(e) => failed.push(sentinel_error(addr, &e, pool.sentinel_auth().is_some())),
        }
    }
    if unknown > 0 && failed.is_empty() {
        return Err(format!("the Sentinels know no master named '{name}'"));
    }
    Err(format!(
        "no Sentinel named a primary for '{name}' ({})",
        failed.join("; ")
    ))
}

/// A Sentinel's refusal, with what to set when it wants a password it was not given.
fn sentinel_error(addr: &NodeAddr, e: &str, has_auth: bool) -> String {
    if !has_auth && e.contains("NOAUTH") {
        return format!("Sentinel {addr} wants a password (redis_sentinel_auth): {e}");
    }
    if e.contains("AUTH refused") {
        return format!("Sentinel {e} (check redis_sentinel_user/redis_sentinel_auth)");
    }
    format!("{addr}: {e}")
}

/// The replicas of master `name` the first answering Sentinel takes to be up. No answer is
/// an error, so that a watcher keeps the replicas it has rather than dropping them all.
fn discover_replicas(
    pool: &Pool,
    name: &str,
    sentinels: &[NodeAddr],
) -> Result<Vec<NodeAddr>, String> {
    let wait = wait_of(pool);
    let mut failed = Vec::new();
    for addr in sentinels {
        let reply = Conn::open(addr, pool.sentinel_auth(), wait)
            .and_then(|mut c| c.ask(&[b"SENTINEL", b"REPLICAS", name.as_bytes()]));
        match reply.and_then(|r| parse_sentinel_replicas(&r)) {
            Ok(replicas) => return Ok(replicas),
            Err(e) => failed.push(sentinel_error(addr, &e, pool.sentinel_auth().is_some())),
        }
    }
    Err(format!(
        "no Sentinel listed the replicas of '{name}' ({})",
        failed.join("; ")
    ))
}

/// Looks up one learned pool.
pub fn discover(pool: &Pool, from: &[NodeAddr]) -> Result<Found, String> {
    match &pool.redis_topology {
        RedisTopology::Fixed => Err("not a learned pool".to_owned()),
        RedisTopology::Cluster => {
            let t = discover_cluster(pool, from)?;
            crate::failovers::saw_cluster(&pool.name, &t);
            let nodes = t.nodes();
            Ok(Found::Cluster {
                replicas: replicas_by_node(&t, &nodes),
                owners: t.slot_owners(),
                nodes,
            })
        }
        RedisTopology::Sentinel(name) => {
            let primary = discover_primary(pool, name, from)?;
            crate::failovers::saw_primary(&pool.name, &primary);
            let replicas = match pool.redis_read_from {
                ReadFrom::Replicas => discover_replicas(pool, name, from)?,
                ReadFrom::Primary => Vec::new(),
            };
            Ok(Found::Primary { primary, replicas })
        }
    }
}

/// Looks up every learned pool of `config` (as written); an error names the pool.
pub fn discover_all(config: &Config) -> Result<Topologies, RouteError> {
    let mut found = Topologies::new();
    for pool in &config.pools {
        if !pool.redis_topology.is_discovered() {
            continue;
        }
        let f = discover(pool, &seeds_of(pool))
            .map_err(|e| RouteError::Server(format!("pool '{}': {e}", pool.name)))?;
        found.insert(pool.name.clone(), f);
    }
    Ok(found)
}

fn spec_of(node: &NodeAddr) -> ServerSpec {
    let name = node.to_string();
    ServerSpec {
        pname: format!("{name}:1"),
        addr: ServerAddr::Tcp {
            host: node.host.clone(),
            port: node.port,
        },
        weight: 1,
        name: None,
        ketama_name: name,
        tls: None,
    }
}

/// `config` with each learned pool's servers replaced by what its look-up found.
pub fn expand(config: &Config, found: &Topologies) -> Config {
    let mut out = config.clone();
    for pool in &mut out.pools {
        if let Some(f) = found.get(&pool.name) {
            pool.servers = f.nodes().iter().map(spec_of).collect();
        }
    }
    out
}

/// Gives each learned pool of `shared` (just built from `expand`) its seeds and, for a
/// cluster, its slot map in terms of the pool's server indexes. `config` is as written.
pub fn attach(shared: &mut Shared, config: &Config, found: &Topologies, started: Instant) {
    for rt in &mut shared.pools {
        let Some(f) = found.get(&rt.cfg.name) else {
            continue;
        };
        let Some(written) = config.pools.iter().find(|p| p.name == rt.cfg.name) else {
            continue;
        };
        let seeds = seeds_of(written);
        let (slots, primary) = match f {
            Found::Cluster {
                nodes,
                owners,
                replicas,
            } => {
                let slots = ClusterSlots::new(
                    owners_by_server(rt, nodes, owners),
                    started.elapsed().as_millis() as u64,
                );
                slots.set_replicas(replicas_by_server(rt, nodes, replicas));
                (Some(slots), None)
            }
            Found::Primary { primary, .. } => (None, server_at(rt, primary)),
        };
        let live = Live::new(seeds, slots, primary, rt.servers.len());
        if let Some(rt) = Arc::get_mut(rt) {
            rt.learned = Some(Box::new(live));
        }
    }
}

/// A map in terms of `nodes` turned into one in terms of the pool's server indexes (the
/// pool sorts its servers by name).
pub fn owners_by_server(rt: &PoolRt, nodes: &[NodeAddr], owners: &[Option<u16>]) -> Vec<u16> {
    let index: Vec<u16> = nodes
        .iter()
        .map(|n| {
            let name = n.to_string();
            rt.servers
                .iter()
                .position(|s| s.stats_name == name)
                .map_or(UNSERVED, |i| i as u16)
        })
        .collect();
    owners
        .iter()
        .map(|o| {
            o.and_then(|n| index.get(usize::from(n)).copied())
                .unwrap_or(UNSERVED)
        })
        .collect()
}

/// Replicas per node of `nodes` turned into replicas per server index of the pool.
pub fn replicas_by_server(rt: &PoolRt, nodes: &[NodeAddr], replicas: &[Vec<u16>]) -> Vec<Vec<u16>> {
    let index: Vec<Option<u16>> = nodes
        .iter()
        .map(|n| server_at(rt, n).map(|i| i as u16))
        .collect();
    let mut out = vec![Vec::new(); rt.servers.len()];
    for (node, reps) in replicas.iter().enumerate() {
        let Some(Some(p)) = index.get(node) else {
            continue;
        };
        out[usize::from(*p)] = reps
            .iter()
            .filter_map(|&r| index.get(usize::from(r)).copied().flatten())
            .collect();
    }
    out
}

/// Server `s` of a learned pool as a node address.
pub fn node_of(rt: &PoolRt, s: usize) -> Option<NodeAddr> {
    match &rt.cfg.servers.get(s)?.addr {
        ServerAddr::Tcp { host, port } => Some(NodeAddr {
            host: host.clone(),
            port: *port,
        }),
        ServerAddr::Unix { .. } => None,
    }
}

/// `addr` from a redirection by server `asked`, its host filled in when the node left it
/// empty (the same host as the node asked).
pub fn full_addr(rt: &PoolRt, addr: &NodeAddr, asked: usize) -> Option<NodeAddr> {
    if !addr.host.is_empty() {
        return Some(addr.clone());
    }
    Some(NodeAddr {
        host: node_of(rt, asked)?.host,
        port: addr.port,
    })
}

/// The index of the pool's server at `addr`.
pub fn server_at(rt: &PoolRt, addr: &NodeAddr) -> Option<usize> {
    (0..rt.cfg.servers.len()).find(|&s| node_of(rt, s).as_ref() == Some(addr))
}
/// A log line's account of a learned pool's change.
pub fn describe_change(before: Option<&Found>, after: &Found) -> String {
    let list = |f: &Found| {
        f.nodes()
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (before, after) {
        (Some(Found::Primary { primary: old, .. }), Found::Primary { primary: new, .. })
            if old != new =>
        {
            format!("the Sentinels name a new primary {new} (was {old})")
        }
        (_, Found::Primary { primary, replicas }) if !replicas.is_empty() => {
            let replicas: Vec<_> = replicas.iter().map(|r| r.to_string()).collect();
            format!("primary {primary}, replicas [{}]", replicas.join(", "))
        }
        (_, Found::Primary { primary, .. }) => format!("primary {primary}"),
        (Some(old), new) => format!("cluster nodes now [{}] (were [{}])", list(new), list(old)),
        (None, new) => format!("cluster nodes [{}]", list(new)),
    }
}

/// A Redis Cluster pool's slot map figures for the stats port: slots served, the map's age
/// and reads, redirections followed and retries.
pub fn stats_fields(rt: &PoolRt) -> Vec<(&'static str, i64)> {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(slots) = rt.learned.as_ref().and_then(|l| l.slots.as_ref()) else {
        return Vec::new();
    };
    let now = rt.uptime_ms();
    let at = slots.refreshed_at_ms.load(Relaxed);
    vec![
        ("cluster_slots_served", slots.covered() as i64),
        ("slot_map_age_ms", now.saturating_sub(at) as i64),
        ("slot_map_reads", slots.refreshes.load(Relaxed) as i64),
        ("redirect_moved", slots.moved.load(Relaxed) as i64),
        ("redirect_ask", slots.ask.load(Relaxed) as i64),
        ("cluster_retries", slots.retried.load(Relaxed) as i64),
    ]
}

/// A pool reading from replicas: the reads sent to replicas.
pub fn replica_fields(rt: &PoolRt) -> Option<(&'static str, i64)> {
    let on = rt.learned.is_some() && rt.cfg.redis_read_from == ReadFrom::Replicas;
    on.then(|| {
        let n = rt.counters.iter().map(|c| c.replica_reads.get()).sum();
        ("replica_reads", n)
    })
}
