//! Where a Redis pool's servers come from: the `servers:` as written, a Redis Cluster's
//! slot map learned from seed nodes, or the primary a set of Sentinels names.

use super::directives::RawPool;

/// How a Redis pool finds its servers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum RedisTopology {
    /// The written servers, placed by the pool's hash and distribution.
    #[default]
    Fixed,
    /// `redis_cluster: true`: the servers are seed nodes; each key goes to its hash slot's
    /// primary as the cluster's slot map says.
    Cluster,
    /// `redis_sentinel: NAME`: the servers are Sentinels; the pool's one server is the
    /// primary they name for master NAME.
    Sentinel(String),
}

impl RedisTopology {
    /// Whether the written servers are only where the real ones are learned from.
    pub fn is_discovered(&self) -> bool {
        !matches!(self, RedisTopology::Fixed)
    }
}

/// Where a learned pool sends read-only commands (`redis_read_from:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadFrom {
    /// Every command goes to the primary.
    #[default]
    Primary,
    /// Read-only commands go to a replica of the key's primary (the primary when it has no
    /// reachable replica); writes, transactions and scripts to the primary.
    Replicas,
}

impl ReadFrom {
    /// The directive's value by name.
    pub(super) fn from_name(name: &str) -> Result<ReadFrom, &'static str> {
        match name {
            "primary" => Ok(ReadFrom::Primary),
            "replicas" => Ok(ReadFrom::Replicas),
            _ => Err("is not \"primary\" or \"replicas\""),
        }
    }
}

/// The pool's topology from its directives, or why they do not fit together.
pub(super) fn redis_topology(r: &RawPool, redis: bool) -> Result<RedisTopology, &'static str> {
    let cluster = r.redis_cluster.unwrap_or(false);
    let backend = r.redis_backend_user.is_some() || r.redis_backend_auth.is_some();
    let learned_only = r.redis_read_from.is_some();
    if !redis && (cluster || r.redis_sentinel.is_some() || backend || learned_only) {
        return Err("has a redis_* directive, which is only valid for a redis pool");
    }
    if r.redis_backend_user.is_some() && r.redis_backend_auth.is_none() {
        return Err("has \"redis_backend_user:\" without \"redis_backend_auth:\"");
    }
    let topology = match (cluster, &r.redis_sentinel) {
        (true, Some(_)) => return Err("has both \"redis_cluster:\" and \"redis_sentinel:\""),
        (true, None) => RedisTopology::Cluster,
        (false, Some(name)) => RedisTopology::Sentinel(name.clone()),
        (false, None) => RedisTopology::Fixed,
    };
    if learned_only && !topology.is_discovered() {
        return Err(
            "has \"redis_read_from:\", which needs \"redis_cluster:\" or \"redis_sentinel:\"",
        );
    }
    if topology.is_discovered() {
        if !r.dns.is_empty() {
            return Err("names dns:/srv: servers, which a cluster or sentinel pool cannot use");
        }
        if r.redis_db.is_some_and(|db| db != 0) && topology == RedisTopology::Cluster {
            return Err("has \"redis_db:\", but a Redis Cluster has only database 0");
        }
        if r.servers
            .iter()
            .any(|s| !matches!(s.addr, super::ServerAddr::Tcp { .. }))
        {
            return Err("names a unix socket server; cluster and sentinel pools need host:port");
        }
    }
    Ok(topology)
}

/// Whether the Sentinels' own login (`redis_sentinel_user`, `redis_sentinel_auth`) fits a pool
/// of `topology`: only a Sentinel pool talks to Sentinels.
pub(super) fn sentinel_auth_fits(
    r: &RawPool,
    topology: &RedisTopology,
) -> Result<(), &'static str> {
    let any = r.redis_sentinel_user.is_some() || r.redis_sentinel_auth.is_some();
    if any && !matches!(topology, RedisTopology::Sentinel(_)) {
        return Err("has a redis_sentinel_* directive, which needs \"redis_sentinel:\"");
    }
    if r.redis_sentinel_user.is_some() && r.redis_sentinel_auth.is_none() {
        return Err("has \"redis_sentinel_user:\" without \"redis_sentinel_auth:\"");
    }
    Ok(())
}
