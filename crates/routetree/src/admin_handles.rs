//! `__mcrouter__.route_handles(op,key)` and `__mcrouter__.pools`: the route handles a
//! request visits, one per line with mcrouter's route names, indented one space per depth;
//! and the servers of each pool, as mcrouter names their destinations.

use ring::RoutingKey;

use crate::model::{AllMode, Config, PoolId, Route, Target};
use crate::parse::OPERATIONS;
use crate::timeouts::Timeouts;

/// What a destination's name says beyond its address (mcrouter's `host|...` name).
#[derive(Clone, Copy, Debug)]
pub struct HostNaming<'a> {
    /// The router's timeouts, which give each pool's.
    pub timeouts: Timeouts,
    /// The default routing prefix (`--route-prefix`), where the router is.
    pub default_route: &'a str,
}

impl HostNaming<'static> {
    /// Every pool with the server timeout `ms`.
    pub const fn server_timeout(ms: u64) -> Self {
        HostNaming {
            timeouts: Timeouts {
                server_ms: ms,
                cross_region_ms: 0,
                cross_cluster_ms: 0,
                within_cluster_ms: 0,
            },
            default_route: crate::DEFAULT_ROUTE_PREFIX,
        }
    }
}

impl HostNaming<'_> {
    /// The server timeout of `pool`'s servers, ms.
    pub fn timeout_ms(&self, config: &Config, pool: PoolId) -> u64 {
        self.timeouts
            .for_pool(&config.pools[pool], self.default_route)
    }
}

/// mcrouter's `route_handles` reply: `proxy`, `root`, then each handle the request
/// traverses, depth-first. Selecting routes (hashes, operation and prefix selectors) go
/// down only the child they pick; the others go down every child, as mcrouter's
/// traversal does.
pub fn route_handles(
    config: &Config,
    op: &str,
    key: &[u8],
    default_prefix: &str,
    naming: HostNaming<'_>,
) -> Result<String, String> {
    if !OPERATIONS.contains(&op) {
        return Err(format!("route: unknown request {op}"));
    }
    Ok(walk(config, op, key, default_prefix, naming)?.out)
}

fn walk<'c, 'k>(
    config: &'c Config,
    op: &'k str,
    key: &'k [u8],
    default_prefix: &str,
    naming: HostNaming<'c>,
) -> Result<Walk<'c, 'k>, String> {
    let rk = RoutingKey::parse(key);
    let roots = config.entry_routes(rk.prefix, default_prefix)?;
    let mut walk = Walk {
        config,
        op,
        rk,
        naming,
        out: String::new(),
        seen: 0,
        bucket: None,
        buckets: Vec::new(),
    };
    walk.line(0, "proxy");
    walk.line(1, "root");
    for id in roots {
        walk.target(2, Target::Route(id));
    }
    Ok(walk)
}

/// mcrouter's `get_bucket(<key>)` reply: for each bucketized PoolRoute a get of `key`
/// reaches, `<key without routing prefix>\t<bucket>\t<keyspace>\tnull`, CRLF between.
pub fn get_bucket(config: &Config, key: &[u8], default_prefix: &str) -> Result<String, String> {
    let naming = HostNaming::server_timeout(0);
    let walk = walk(config, "get", key, default_prefix, naming)?;
    if walk.buckets.is_empty() {
        return Err(format!(
            "get_bucket: couldn't find bucket for key {}",
            String::from_utf8_lossy(key)
        ));
    }
    let key = String::from_utf8_lossy(walk.rk.key);
    let lines: Vec<String> = walk
        .buckets
        .iter()
        .map(|(bucket, keyspace)| format!("{key}\t{bucket}\t{keyspace}\tnull"))
        .collect();
    Ok(lines.join("\r\n"))
}

/// Lines written before a pathological tree is cut short.
const MAX_LINES: usize = 10_000;

struct Walk<'c, 'k> {
    config: &'c Config,
    op: &'k str,
    rk: RoutingKey<'k>,
    naming: HostNaming<'c>,
    out: String,
    seen: usize,
    /// The bucket of the innermost bucketized PoolRoute walked through.
    bucket: Option<u64>,
    /// Every bucketized PoolRoute met: its bucket for the key and its keyspace.
    buckets: Vec<(u64, String)>,
}

impl Walk<'_, '_> {
    fn line(&mut self, depth: usize, name: &str) {
        self.seen += 1;
        if self.seen <= MAX_LINES {
            self.out.extend(std::iter::repeat_n(' ', depth));
            self.out.push_str(name);
            self.out.push('\n');
        }
    }

    /// What a hash places: the routing key, or with `by_bucket` the bucket id (none outside
    /// a bucketized PoolRoute), then the salt.
    fn hashed(&self, salt: &str, by_bucket: bool) -> Option<Vec<u8>> {
        let mut bytes = match by_bucket {
            false => self.rk.hashed.to_vec(),
            true => self.bucket?.to_string().into_bytes(),
        };
        bytes.extend_from_slice(salt.as_bytes());
        Some(bytes)
    }

    fn targets(&mut self, depth: usize, targets: &[Target]) {
        for t in targets {
            self.target(depth, *t);
        }
    }

    fn target(&mut self, depth: usize, target: Target) {
        if self.seen > MAX_LINES {
            return;
        }
        match target {
            Target::Server { pool, index } => {
                let name = host_name(self.config, pool, index, self.naming);
                self.line(depth, &name);
            }
            Target::Route(id) => self.route(depth, id),
        }
    }

    fn route(&mut self, depth: usize, id: usize) {
        let config = self.config;
        let d = depth + 1;
        match &config.routes[id] {
            Route::Pool {
                pool,
                hash,
                salt,
                asynclog,
                by_bucket,
                ..
            } => {
                let mut depth = depth;
                if let Some(name) = asynclog {
                    self.line(depth, &format!("asynclog:{name}"));
                    depth += 1;
                }
                self.line(depth, &selection_name(hash.name(), salt));
                let n = config.pools[*pool].servers.len();
                if let (true, Some(bytes)) = (n > 0, self.hashed(salt, *by_bucket)) {
                    let index = hash.index(&bytes, n);
                    self.target(depth + 1, Target::Server { pool: *pool, index });
                }
            }
            Route::Hash {
                children,
                hash,
                salt,
                by_bucket,
            } => {
                self.line(depth, &selection_name(hash.name(), salt));
                let bytes = self.hashed(salt, *by_bucket);
                if let (false, Some(bytes)) = (children.is_empty(), bytes) {
                    let index = hash.index(&bytes, children.len());
                    self.target(d, children[index]);
                }
            }
            Route::Bucketize { target, settings } => {
                // mcrouter's routeName.
                self.line(
                    depth,
                    &format!(
                        "bucketize|total_buckets={}|bucketization_keyspace={}|prefix_map_enabled={}",
                        settings.total_buckets,
                        settings.keyspace,
                        !settings.by_prefix.is_empty()
                    ),
                );
                let bucket = settings.bucket(self.rk.hashed);
                self.buckets.push((bucket, settings.keyspace.clone()));
                let outer = self.bucket.replace(bucket);
                self.target(d, *target);
                self.bucket = outer;
            }
            Route::All { mode, children } => {
                self.line(depth, all_name(*mode));
                self.targets(d, children);
            }
            Route::Failover { children, .. } => {
                self.line(depth, "failover");
                self.targets(d, children);
            }
            Route::MissFailover { children, .. } => {
                self.line(depth, "miss-failover");
                self.targets(d, children);
            }
            Route::WarmUp { cold, warm, .. } => {
                self.line(depth, "warm-up");
                self.targets(d, &[*cold, *warm]);
            }
            // mcrouter's prefix selector is part of its routing-prefix map, not a handle.
            Route::PrefixSelector { policies, wildcard } => {
                let key = self.rk.key;
                let chosen = policies
                    .iter()
                    .rev()
                    .find(|(prefix, _)| key.starts_with(prefix.as_bytes()))
                    .map(|(_, t)| *t)
                    .or(*wildcard);
                if let Some(t) = chosen {
                    self.target(depth, t);
                }
            }
            Route::OperationSelector { policies, default } => {
                self.line(depth, "operation-selector");
                let chosen = policies
                    .iter()
                    .find(|(op, _)| op == self.op)
                    .map(|(_, t)| *t)
                    .or(*default);
                if let Some(t) = chosen {
                    self.target(d, t);
                }
            }
            Route::ModifyExptime {
                target,
                exptime,
                action,
            } => {
                let action = match action {
                    crate::model::ExptimeAction::Set => "set",
                    crate::model::ExptimeAction::Min => "min",
                };
                self.line(depth, &format!("modify-exptime|{action}|exptime={exptime}"));
                self.target(d, *target);
            }
            Route::KeySplit {
                destination,
                replicas,
                all_sync,
                first_hit,
            } => {
                self.line(
                    depth,
                    &format!(
                        "keysplit|replicas={replicas}|all-sync={all_sync}|first-hit={first_hit}"
                    ),
                );
                self.target(d, *destination);
            }
            Route::L1L2Cache { l1, l2, .. } => {
                self.line(depth, "l1l2-cache");
                self.targets(d, &[*l1, *l2]);
            }
            Route::L1L2SizeSplit { l1, l2, .. } => {
                self.line(depth, "l1l2-sizesplit");
                self.targets(d, &[*l1, *l2]);
            }
            Route::RateLimit {
                target, fallback, ..
            } => {
                self.line(depth, "rate-limit");
                self.target(d, *target);
                if let Some(f) = fallback {
                    self.target(d, *f);
                }
            }
            Route::Random { children } => {
                self.line(depth, "random");
                self.targets(d, children);
            }
            Route::LoadBalancer(lb) => {
                let mut depth = depth;
                if let Some(name) = &lb.asynclog {
                    self.line(depth, &format!("asynclog:{name}"));
                    depth += 1;
                }
                self.line(depth, &format!("loadbalancer|{}", lb.algorithm.name()));
                self.targets(depth + 1, &lb.children);
            }
            Route::ModifyKey { target, .. } => {
                self.line(depth, "modify-key");
                self.target(d, *target);
            }
            Route::LatencyInjection {
                child,
                before_ms,
                after_ms,
                total_ms,
            } => {
                self.line(
                    depth,
                    &format!(
                        "latency-injection|before:{before_ms}ms|after:{after_ms}ms|total:{total_ms}ms"
                    ),
                );
                self.target(d, *child);
            }
            Route::Migrate { from, to, .. } => {
                self.line(depth, "migrate");
                self.targets(d, &[*from, *to]);
            }
            Route::Staging { warm, staging } => {
                self.line(depth, "staging");
                self.targets(d, &[*warm, *staging]);
            }
            Route::ShardSplit { destination, .. } => {
                self.line(depth, "shard-split");
                self.target(d, *destination);
            }
            Route::SlowWarmUp {
                target, failover, ..
            } => {
                self.line(depth, "slow-warmup");
                self.targets(d, &[*target, *failover]);
            }
            Route::Shadow { child, shadows, .. } => {
                self.line(depth, "shadow");
                self.target(d, *child);
                for s in shadows {
                    self.target(d, s.target);
                }
            }
            Route::BigValue { target, settings } => {
                // mcrouter's routeName.
                self.line(
                    depth,
                    &format!(
                        "big-value|split_threshold={}|batch_size={}|hide_reply_flag={}",
                        settings.threshold, settings.batch, settings.hide_reply_flag
                    ),
                );
                self.target(d, *target);
            }
            Route::Null => self.line(depth, "null"),
            Route::Error { .. } => self.line(depth, "error|log|remote_error"),
        }
    }
}

fn selection_name(hash: &str, salt: &str) -> String {
    if salt.is_empty() {
        format!("selection|hash|{hash}")
    } else {
        format!("selection|hash|{hash}|salt={salt}")
    }
}

fn all_name(mode: AllMode) -> &'static str {
    match mode {
        AllMode::Sync | AllMode::InitialSync => "all-sync",
        AllMode::Async => "all-async",
        AllMode::Initial => "all-initial",
        AllMode::Majority => "all-majority",
        AllMode::Fastest => "all-fastest",
        AllMode::FirstHit => "all-first-hit",
    }
}

/// A server's access point as mcrouter prints it:
/// `host:port:protocol:security:compression` (IPv6 hosts bracketed).
pub fn access_point(config: &Config, pool: PoolId, index: usize) -> String {
    let s = &config.pools[pool].servers[index];
    let host = if s.host.contains(':') {
        format!("[{}]", s.host)
    } else {
        s.host.clone()
    };
    let protocol = s.protocol.as_deref().unwrap_or("ascii");
    let security = s.security.as_deref().unwrap_or("plain");
    format!("{host}:{}:{protocol}:{security}:notcompressed", s.port)
}

/// mcrouter's name of the destination handle for server `index` of `pool`.
pub fn host_name(config: &Config, pool: PoolId, index: usize, naming: HostNaming<'_>) -> String {
    let p = &config.pools[pool];
    format!(
        "host|pool={}|id={index}|ap={}|timeout={}ms|keep_routing_prefix={}|msb=0",
        p.name,
        access_point(config, pool, index),
        naming.timeout_ms(config, pool),
        p.keep_routing_prefix,
    )
}

/// mcrouter's `pools` reply: a JSON object of pool name to its destinations' names,
/// keys sorted, pretty-printed with two-space indents.
pub fn pools_reply(config: &Config, naming: HostNaming<'_>) -> String {
    let mut pools: Vec<(&str, PoolId)> = config
        .pools
        .iter()
        .enumerate()
        .map(|(id, p)| (p.name.as_str(), id))
        .collect();
    pools.sort();
    pools.dedup_by(|a, b| a.0 == b.0);
    if pools.is_empty() {
        return "{}".into();
    }
    let mut out = String::from("{\n");
    for (i, (name, id)) in pools.iter().enumerate() {
        let servers: Vec<String> = (0..config.pools[*id].servers.len())
            .map(|index| json_string(&host_name(config, *id, index, naming)))
            .collect();
        out.push_str(&format!("  {}: ", json_string(name)));
        if servers.is_empty() {
            out.push_str("[]");
        } else {
            out.push_str("[\n    ");
            out.push_str(&servers.join(",\n    "));
            out.push_str("\n  ]");
        }
        out.push_str(if i + 1 < pools.len() { ",\n" } else { "\n" });
    }
    out.push('}');
    out
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "admin_handles_tests.rs"]
mod tests;
