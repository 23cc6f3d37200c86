//! Per-request evaluation: (operation, key) through the route tree to a [`Plan`] that names
//! servers by (pool, index) and says how their replies combine. No I/O: the router runs it.

use ring::{spooky, RoutingKey};

use crate::model::*;

/// What to do with one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Send to one server.
    Send(Send),
    /// Send to every plan; `mode` says which reply to return.
    All {
        /// Which reply the client gets.
        mode: AllMode,
        /// Every plan runs.
        plans: Vec<Plan>,
    },
    /// Run plans in `order` while the reply is one of `errors` (`limit` caps how often).
    Failover {
        /// One per child, in config order.
        plans: Vec<Plan>,
        /// Which plans are tried, in which order (the failover policy's; the first is 0).
        order: Vec<usize>,
        /// LeastFailuresPolicy's `max_tries`: `order` lists every plan, and when the request
        /// starts, all but the first are sorted by their recent errors and this many kept.
        least_failures: Option<usize>,
        /// The error replies other than `tko` after which the error is the reply.
        max_error_tries: usize,
        /// Error results that move on to the next plan.
        errors: Vec<String>,
        /// Rate limit on failovers; `None`: unlimited.
        limit: Option<FailoverLimit>,
        /// The FailoverRoute, whose failovers `limit` counts across requests.
        route: RouteId,
    },
    /// Run plans in order until a hit; if none hits, the last reply (or with
    /// `return_best_on_error`, the best one).
    MissFailover {
        /// Tried in order.
        plans: Vec<Plan>,
        /// When no plan hits, reply with the best reply instead of the last.
        return_best_on_error: bool,
    },
    /// Get from `cold`; on a miss get from `warm`, and on a hit there add it to `cold`
    /// with `exptime`.
    WarmUp {
        /// Tried first.
        cold: Box<Plan>,
        /// Asked when `cold` misses (planned for a plain `get` when the request is a gets,
        /// gat, gats or lease-get: what mcrouter sends warm).
        warm: Box<Plan>,
        /// Cold planned for the fill: an `add`, or for a lease-get a `lease-set`.
        fill: Box<Plan>,
        /// Exptime of the fill of `cold`.
        exptime: u32,
    },
    /// Run `main` and reply with its reply; also send each shadow (with its probability),
    /// ignoring the shadows' replies.
    Shadowed {
        /// Whose reply the client gets.
        main: Box<Plan>,
        /// Each shadow with the probability it gets the request.
        shadows: Vec<(f64, Plan)>,
    },
    /// KeySplitRoute: one plan per replica, replica 0 being the key itself. The request
    /// goes to replica `pick` (None: one picked at random by the executor); with `fanout`
    /// that one replies and the others get the request in the background.
    KeySplit {
        /// By replica index.
        replicas: Vec<Plan>,
        /// Every replica gets the request (deletes, sets with `all_sync`).
        fanout: bool,
        /// The replica that gets (and answers) the request; None: one at random.
        pick: Option<usize>,
    },
    /// Run `plan` with the request's key replaced by `key`; the reply carries the
    /// client's key again.
    Rekey {
        /// The key sent (with the client's routing prefix).
        key: Vec<u8>,
        /// Planned for `key`.
        plan: Box<Plan>,
    },
    /// L1L2CacheRoute for a get-like request (see [`Route::L1L2Cache`]).
    L1L2 {
        /// Tried first; filled from `l2`.
        l1: Box<Plan>,
        /// Asked when `l1` misses, and by the negative cache's refresh.
        l2: Box<Plan>,
        /// Exptime of the fill of `l1`.
        upgrading_l1_exptime: u32,
        /// Exptime of negative entries.
        ncache_exptime: u32,
        /// 0: no negative caching; else refresh `l1` every this many negative hits.
        ncache_update_period: usize,
        /// The route, whose negative hits are counted across requests.
        route: RouteId,
    },
    /// Run `plan` if the token bucket of RateLimitRoute `route` for the request's operation
    /// class has a token, else `fallback` (or the default reply).
    RateLimit {
        /// Within the rate.
        plan: Box<Plan>,
        /// Over the rate; `None`: the default reply.
        fallback: Option<Box<Plan>>,
        /// The bucket.
        rate: TokenRate,
        /// The RateLimitRoute and the class's bucket (0 gets, 1 sets, 2 deletes): the
        /// bucket lives across requests.
        bucket: (RouteId, u8),
    },
    /// RandomRoute: one of `plans`, picked at random by the executor for each request.
    Random {
        /// Picked among.
        plans: Vec<Plan>,
    },
    /// LatencyInjectionRoute: wait `before_ms`, run `plan`, wait `after_ms`; the reply goes
    /// no sooner than `total_ms` after the start.
    Delay {
        /// Run between the waits.
        plan: Box<Plan>,
        /// Milliseconds before `plan` starts.
        before_ms: u64,
        /// Milliseconds after `plan` replied.
        after_ms: u64,
        /// The least milliseconds from the start to the reply.
        total_ms: u64,
    },
    /// StagingRoute: `warm` answers; what reaches `staging` in the background depends on
    /// `op`.
    Staging {
        /// Whose reply the client gets.
        warm: Box<Plan>,
        /// Kept in step behind the client's back.
        staging: Box<Plan>,
        /// What `staging` gets once `warm` answered.
        op: StagingOp,
    },
    /// PoolRoute's `slow_warmup`: get-like requests go to `target` or, while the server's
    /// hit rate says it is warming up, by chance to `failover`; `target`'s replies update
    /// the hit rate.
    SlowWarmUp {
        /// The warming server's plan.
        target: Box<Plan>,
        /// The other plan for gets.
        failover: Box<Plan>,
        /// Whose hit rate: the SlowWarmUp route and the server index the key hashes to.
        server: (RouteId, usize),
        /// Thresholds and formula.
        settings: SlowWarmUpSettings,
        /// Only get-like requests may go to `failover`.
        get_like: bool,
    },
    /// L1L2SizeSplitRoute's get or set (see [`Route::L1L2SizeSplit`]).
    SizeSplit {
        /// Small values and sentinels.
        l1: Box<Plan>,
        /// Large values.
        l2: Box<Plan>,
        /// When a set is split.
        rule: SizeSplitRule,
        /// get or set.
        op: SizeSplitOp,
        /// What the executor plans keys learnt from replies (lease-set's l2 keys) with.
        levels: SizeSplitLevels,
    },
    /// A plan made by the executor once the key is known ([`crate::Exec::on_plan`]).
    Deferred(Box<Deferred>),
    /// The default reply (miss / NOT_STORED / NOT_FOUND).
    Null,
    /// An error reply with this message.
    Error(String),
}

/// One server and how the request reaches it.
#[derive(Clone, Debug, PartialEq)]
pub struct Send {
    /// The pool.
    pub pool: PoolId,
    /// The server's position in the pool.
    pub index: usize,
    /// Send the key with its routing prefix (the pool's `keep_routing_prefix`).
    pub keep_prefix: bool,
    /// Exptime rewrites from enclosing ModifyExptimeRoutes, outermost first.
    pub exptime: Vec<(ExptimeAction, i64)>,
    /// For deletes through a PoolRoute with asynclog: the log name for failed deletes.
    pub asynclog: Option<String>,
}

impl Send {
    /// The exptime the server should get for a request that asked for `requested`
    /// (0 = never expires). Deletes carry no exptime and are not rewritten.
    pub fn exptime_for(&self, requested: i64) -> i64 {
        self.exptime
            .iter()
            .fold(requested, |current, &(action, exptime)| match action {
                ExptimeAction::Set => exptime,
                ExptimeAction::Min if current == 0 || current > exptime => exptime,
                ExptimeAction::Min => current,
            })
    }
}

/// Which failover error list applies to an operation.
fn op_class(op: &str) -> OpClass {
    match op {
        "get" | "gets" | "gat" | "gats" | "metaget" | "lease-get" => OpClass::Get,
        "delete" => OpClass::Delete,
        _ => OpClass::Update,
    }
}

/// RateLimitRoute's classes, as mcrouter's RateLimiter sorts requests: get-like, update-like
/// (arithmetic is not) and deletes; anything else is never limited.
fn rate_class(op: &str) -> Option<RateClass> {
    match op {
        "get" | "gets" | "gat" | "gats" | "metaget" | "lease-get" => Some(RateClass::Gets),
        "set" | "add" | "replace" | "append" | "prepend" | "cas" | "lease-set" => {
            Some(RateClass::Sets)
        }
        "delete" => Some(RateClass::Deletes),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RateClass {
    Gets,
    Sets,
    Deletes,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpClass {
    Get,
    Update,
    Delete,
}

/// Plans bigger than this (a config whose shared handles multiply) become an error reply.
const MAX_PLAN_NODES: usize = 100_000;
/// The broadcast routing prefix: every route.
const BROADCAST: &str = "/*/*/";

impl Config {
    /// The plan for `op` (a name from [`crate::OPERATIONS`]) on `key` (with any routing
    /// prefix). Keys without one use `default_prefix` (the router's `--route-prefix`).
    pub fn plan(&self, op: &str, key: &[u8], default_prefix: &str) -> Plan {
        self.plan_at(op, key, default_prefix, unix_now())
    }

    /// [`Config::plan`] at `now` (unix seconds), the time MigrateRoutes go by.
    pub fn plan_at(&self, op: &str, key: &[u8], default_prefix: &str, now: i64) -> Plan {
        let rk = RoutingKey::parse(key);
        let routes = match self.entry_routes(rk.prefix, default_prefix) {
            Ok(routes) => routes,
            Err(message) => return Plan::Error(message),
        };
        let mut eval = Eval::new(self, op, rk, now);
        let mut plans: Vec<Plan> = routes.into_iter().map(|id| eval.route(id)).collect();
        if eval.nodes > MAX_PLAN_NODES {
            return Plan::Error("route tree too large for one request".into());
        }
        match plans.len() {
            1 => plans.pop().unwrap_or(Plan::Null),
            // Several prefixes: the first (the default route when it matches) replies; the
            // rest run in the background, as mcrouter does for /*/*/.
            _ => Plan::All {
                mode: AllMode::Initial,
                plans,
            },
        }
    }

    /// The route(s) a key's routing prefix selects, default route first.
    pub(crate) fn entry_routes(
        &self,
        prefix: &[u8],
        default_prefix: &str,
    ) -> Result<Vec<RouteId>, String> {
        // The common case, without building the alias table: one route for every key.
        if let (Entry::Default(id), true) = (&self.entry, prefix.is_empty()) {
            return Ok(vec![*id]);
        }
        let prefix = std::str::from_utf8(prefix).map_err(|_| "routing prefix is not UTF-8")?;
        let aliases = match &self.entry {
            Entry::Default(id) => vec![(default_prefix.to_owned(), *id)],
            Entry::Aliases(table) => table.clone(),
        };
        let by_alias = |p: &str| aliases.iter().find(|(a, _)| a == p).map(|(_, id)| *id);
        if prefix.is_empty() || prefix == default_prefix {
            return by_alias(default_prefix).map(|id| vec![id]).ok_or_else(|| {
                format!("no route for the default routing prefix {default_prefix}")
            });
        }
        if !prefix.contains('*') {
            if let Some(id) = by_alias(prefix) {
                return Ok(vec![id]);
            }
            // An unknown cluster falls back to /region/fallback/ when that exists.
            let region = prefix[1..].split('/').next().unwrap_or("");
            return by_alias(&format!("/{region}/fallback/"))
                .map(|id| vec![id])
                .ok_or_else(|| format!("no route for routing prefix {prefix}"));
        }
        let mut ids = Vec::new();
        let mut push = |id| {
            if !ids.contains(&id) {
                ids.push(id);
            }
        };
        if glob_matches(prefix, default_prefix) {
            if let Some(id) = by_alias(default_prefix) {
                push(id);
            }
        }
        for (alias, id) in &aliases {
            if prefix == BROADCAST || glob_matches(prefix, alias) {
                push(*id);
            }
        }
        if ids.is_empty() {
            return Err(format!("no route matches routing prefix {prefix}"));
        }
        Ok(ids)
    }
}

/// `*` matches any run of characters other than `/`.
fn glob_matches(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            let mut end = 0;
            loop {
                if glob_matches(tail, &rest[end..]) {
                    return true;
                }
                match rest[end..].chars().next() {
                    Some(c) if c != '/' => end += c.len_utf8(),
                    _ => return false,
                }
            }
        }
    }
}

impl<'c, 'k> Eval<'c, 'k> {
    /// A plan of `op` on `rk` from the top: no exptime rule, bucket or chunk yet.
    fn new(config: &'c Config, op: &'k str, rk: RoutingKey<'k>, now: i64) -> Self {
        Eval {
            config,
            op,
            class: op_class(op),
            rk,
            exptime: Vec::new(),
            nodes: 0,
            now,
            bucket: None,
            chunk: None,
        }
    }

    /// `f` planning for operation `op` instead of the request's.
    fn with_op(&mut self, op: &'k str, f: impl FnOnce(&mut Self) -> Plan) -> Plan {
        let outer = (self.op, self.class);
        (self.op, self.class) = (op, op_class(op));
        let plan = f(self);
        (self.op, self.class) = outer;
        plan
    }
}

struct Eval<'c, 'k> {
    config: &'c Config,
    op: &'k str,
    class: OpClass,
    rk: RoutingKey<'k>,
    exptime: Vec<(ExptimeAction, i64)>,
    nodes: usize,
    /// Unix seconds, for MigrateRoute.
    now: i64,
    /// The bucket of the innermost [`Route::Bucketize`] being evaluated (mcrouter's fiber-local
    /// bucket id): hashes with `by_bucket` place it, shadows compare it with their ranges.
    bucket: Option<u64>,
    /// A big value's chunk request planned along its base key: the chunk's operation and key,
    /// which take over below the BigValueRoute the base key meets (taken there).
    chunk: Option<(&'k str, RoutingKey<'k>)>,
}

/// mcrouter's error for a bucket hash without a McBucketRoute above it.
const NO_BUCKET: &str = "The context doesn't contain bucket id. You must use McBucketRoute in \
                         front of bucketized PoolRoute";

impl Eval<'_, '_> {
    fn target(&mut self, target: Target) -> Plan {
        match target {
            Target::Route(id) => self.route(id),
            Target::Server { pool, index } => self.send(pool, index, None),
        }
    }

    fn send(&mut self, pool: PoolId, index: usize, asynclog: Option<&String>) -> Plan {
        self.nodes += 1;
        Plan::Send(Send {
            pool,
            index,
            keep_prefix: self.config.pools[pool].keep_routing_prefix,
            exptime: self.exptime.clone(),
            asynclog: asynclog.filter(|_| self.class == OpClass::Delete).cloned(),
        })
    }

    fn targets(&mut self, targets: &[Target]) -> Vec<Plan> {
        targets.iter().map(|t| self.target(*t)).collect()
    }

    fn route(&mut self, id: RouteId) -> Plan {
        self.nodes += 1;
        if self.nodes > MAX_PLAN_NODES {
            return Plan::Null;
        }
        let config = self.config;
        match &config.routes[id] {
            Route::Pool {
                pool,
                hash,
                salt,
                shadows,
                asynclog,
                by_bucket,
            } => {
                let n = config.pools[*pool].servers.len();
                if n == 0 {
                    let pool = &config.pools[*pool];
                    if !pool.error_on_empty {
                        return Plan::Null;
                    }
                    return Plan::Error(format!("pool {} has no servers", pool.name));
                }
                let Some(index) = self.pick(hash, salt, n, by_bucket.then_some(self.bucket)) else {
                    return Plan::Error(NO_BUCKET.into());
                };
                let main = self.send(*pool, index, asynclog.as_ref());
                self.shadowed(main, index, shadows)
            }
            Route::Hash {
                children,
                hash,
                salt,
                by_bucket,
            } => match children.len() {
                0 => Plan::Error("HashRoute with empty children".into()),
                n => match self.pick(hash, salt, n, by_bucket.then_some(self.bucket)) {
                    Some(index) => self.target(children[index]),
                    None => Plan::Error(NO_BUCKET.into()),
                },
            },
            Route::Bucketize { target, settings } => {
                let outer = self.bucket.replace(settings.bucket(self.rk.hashed));
                let plan = self.target(*target);
                self.bucket = outer;
                plan
            }
            Route::All { mode, children } => match children.len() {
                0 => Plan::Null,
                _ => Plan::All {
                    mode: *mode,
                    plans: self.targets(children),
                },
            },
            Route::Failover {
                children,
                errors,
                limit,
                policy,
            } => {
                let mut plans = self.targets(children);
                let (order, max_error_tries) = match policy {
                    FailoverPolicy::InOrder | FailoverPolicy::LeastFailures { .. } => {
                        ((0..plans.len()).collect(), usize::MAX)
                    }
                    FailoverPolicy::DeterministicOrder {
                        max_tries,
                        max_error_tries,
                        hash,
                        ignore_normal_reply_index,
                    } => {
                        let skip = match (ignore_normal_reply_index, children.first()) {
                            (false, Some(first)) => Some(self.selected_index(*first) + 1),
                            _ => None,
                        };
                        let order = self.deterministic_order(plans.len(), *max_tries, hash, skip);
                        (order, *max_error_tries)
                    }
                    FailoverPolicy::Rendezvous { hash } => {
                        let primary = children.first().map_or(0, |c| self.selected_index(*c));
                        (rendezvous_order(hash, self.rk.hashed, primary), usize::MAX)
                    }
                };
                match plans.len() {
                    0 => Plan::Null,
                    1 => plans.pop().unwrap_or(Plan::Null),
                    _ => Plan::Failover {
                        plans,
                        order,
                        least_failures: match policy {
                            FailoverPolicy::LeastFailures { max_tries } => Some(*max_tries),
                            _ => None,
                        },
                        max_error_tries,
                        errors: match self.class {
                            OpClass::Get => errors.gets.clone(),
                            OpClass::Update => errors.updates.clone(),
                            OpClass::Delete => errors.deletes.clone(),
                        },
                        limit: *limit,
                        route: id,
                    },
                }
            }
            Route::MissFailover {
                children,
                return_best_on_error,
            } => match children.len() {
                0 => Plan::Null,
                _ if children.len() == 1 || self.class != OpClass::Get => self.target(children[0]),
                _ => Plan::MissFailover {
                    plans: self.targets(children),
                    return_best_on_error: *return_best_on_error,
                },
            },
            Route::WarmUp {
                cold,
                warm,
                exptime,
            } => {
                match self.class {
                    OpClass::Get => {
                        // As mcrouter: warm gets a plain get, cold an add (a lease-set for a
                        // lease-get), each routed as that operation.
                        let warm_op = match self.op {
                            "gets" | "gat" | "gats" | "lease-get" => "get",
                            op => op,
                        };
                        let fill_op = match self.op {
                            "lease-get" => "lease-set",
                            _ => "add",
                        };
                        Plan::WarmUp {
                            cold: Box::new(self.target(*cold)),
                            warm: Box::new(self.with_op(warm_op, |e| e.target(*warm))),
                            fill: Box::new(self.with_op(fill_op, |e| e.target(*cold))),
                            exptime: *exptime,
                        }
                    }
                    // Unlike mcrouter (cold only): a key deleted from cold alone would come
                    // back from warm on the next get.
                    OpClass::Delete => Plan::All {
                        mode: AllMode::InitialSync,
                        plans: vec![self.target(*cold), self.target(*warm)],
                    },
                    OpClass::Update => self.target(*cold),
                }
            }
            Route::PrefixSelector { policies, wildcard } => {
                let key = self.rk.key;
                // Sorted, so the last matching policy is the longest prefix.
                let chosen = policies
                    .iter()
                    .rev()
                    .find(|(prefix, _)| key.starts_with(prefix.as_bytes()))
                    .map(|(_, t)| *t)
                    .or(*wildcard);
                match chosen {
                    Some(t) => self.target(t),
                    None => Plan::Error("no PrefixSelectorRoute policy matches the key".into()),
                }
            }
            Route::OperationSelector { policies, default } => {
                let chosen = policies
                    .iter()
                    .find(|(op, _)| op == self.op)
                    .map(|(_, t)| *t)
                    .or(*default);
                match chosen {
                    Some(t) => self.target(t),
                    None => Plan::Null,
                }
            }
            Route::ModifyExptime {
                target,
                exptime,
                action,
            } => {
                self.exptime.push((*action, *exptime));
                let plan = self.target(*target);
                self.exptime.pop();
                plan
            }
            Route::KeySplit {
                destination,
                replicas,
                all_sync,
                first_hit,
            } => self.key_split(*destination, *replicas, *all_sync, *first_hit),
            Route::L1L2Cache {
                l1,
                l2,
                upgrading_l1_exptime,
                ncache_exptime,
                ncache_update_period,
            } => match self.class {
                OpClass::Get => Plan::L1L2 {
                    l1: Box::new(self.target(*l1)),
                    l2: Box::new(self.target(*l2)),
                    upgrading_l1_exptime: *upgrading_l1_exptime,
                    ncache_exptime: *ncache_exptime,
                    ncache_update_period: *ncache_update_period,
                    route: id,
                },
                // As mcrouter: keeping l2 current is the client's business.
                OpClass::Update | OpClass::Delete => self.target(*l1),
            },
            Route::RateLimit {
                target,
                rates,
                fallback,
            } => {
                let limited = match rate_class(self.op) {
                    Some(RateClass::Gets) => rates.gets.map(|r| (r, 0)),
                    Some(RateClass::Sets) => rates.sets.map(|r| (r, 1)),
                    Some(RateClass::Deletes) => rates.deletes.map(|r| (r, 2)),
                    None => None,
                };
                let plan = self.target(*target);
                match limited {
                    None => plan,
                    Some((rate, class)) => Plan::RateLimit {
                        plan: Box::new(plan),
                        fallback: fallback.map(|f| Box::new(self.target(f))),
                        rate,
                        bucket: (id, class),
                    },
                }
            }
            Route::Random { children } => Plan::Random {
                plans: self.targets(children),
            },
            Route::LoadBalancer(lb) => self.load_balancer(id, lb),
            Route::ModifyKey { target, edit } => self.modify_key(*target, edit),
            Route::LatencyInjection {
                child,
                before_ms,
                after_ms,
                total_ms,
            } => Plan::Delay {
                plan: Box::new(self.target(*child)),
                before_ms: *before_ms,
                after_ms: *after_ms,
                total_ms: *total_ms,
            },
            Route::Migrate {
                from,
                to,
                start_time,
                interval,
            } => self.migrate(*from, *to, *start_time, *interval),
            Route::Staging { warm, staging } => self.staging(*warm, *staging),
            Route::L1L2SizeSplit {
                l1,
                l2,
                threshold,
                ttl_threshold,
                failure_ttl,
                both_full_set,
                retries,
            } => {
                let rule = SizeSplitRule {
                    threshold: *threshold,
                    ttl_threshold: *ttl_threshold,
                    both_full_set: *both_full_set,
                    failure_ttl: *failure_ttl,
                    retries: *retries,
                };
                self.size_split(*l1, *l2, rule)
            }
            Route::Shadow {
                child,
                index,
                shadows,
            } => {
                let main = self.target(*child);
                self.shadowed(main, *index, shadows)
            }
            Route::ShardSplit {
                destination,
                splits,
            } => self.shard_split(*destination, splits),
            Route::SlowWarmUp {
                target,
                failover,
                settings,
            } => Plan::SlowWarmUp {
                server: (id, self.selected_index(*target)),
                target: Box::new(self.target(*target)),
                failover: Box::new(self.target(*failover)),
                settings: *settings,
                get_like: self.class == OpClass::Get,
            },
            // As mcrouter's BigValueRoute sends its chunks to its target: the chunk's own
            // operation and key from here down.
            Route::BigValue { target, .. } => match self.chunk.take() {
                Some((op, rk)) => {
                    let outer = (self.op, self.class, self.rk);
                    (self.op, self.class, self.rk) = (op, op_class(op), rk);
                    let plan = self.target(*target);
                    (self.op, self.class, self.rk) = outer;
                    plan
                }
                None => self.target(*target),
            },
            Route::Null => Plan::Null,
            Route::Error { message } => Plan::Error(message.clone()),
        }
    }

    /// `destination` planned for `key` instead of the request's key.
    pub(crate) fn rekeyed(&mut self, destination: Target, key: Vec<u8>) -> Plan {
        let mut sub = Eval {
            config: self.config,
            op: self.op,
            class: self.class,
            rk: RoutingKey::parse(&key),
            exptime: self.exptime.clone(),
            nodes: self.nodes,
            now: self.now,
            bucket: self.bucket,
            chunk: self.chunk,
        };
        let plan = sub.target(destination);
        self.nodes = sub.nodes;
        Plan::Rekey {
            key,
            plan: Box::new(plan),
        }
    }

    fn shadowed(&mut self, main: Plan, index: usize, shadows: &[Shadow]) -> Plan {
        if shadows.is_empty() {
            return main;
        }
        let key_hash = u64::from(spooky::hash32(self.rk.hashed, 0));
        let max = f64::from(u32::MAX);
        let mut copies = Vec::new();
        for s in shadows {
            let (lo, hi) = s.key_fraction_range;
            let key_in_range = match self.bucket {
                // Under a bucket, mcrouter compares the bucket id, not the key's hash.
                Some(b) => s.bucket_range.is_some_and(|(lo, hi)| lo <= b && b <= hi),
                None => (lo * max) as u64 <= key_hash && key_hash <= (hi * max) as u64,
            };
            let in_range = (s.index_range.0..s.index_range.1).contains(&index) && key_in_range;
            if in_range {
                copies.push((s.requests_fraction, self.target(s.target)));
            }
        }
        if copies.is_empty() {
            main
        } else {
            Plan::Shadowed {
                main: Box::new(main),
                shadows: copies,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob() {
        assert!(glob_matches("/*/*/", "/a/b/"));
        assert!(glob_matches("/a/*/", "/a/b/"));
        assert!(!glob_matches("/a/*/", "/c/b/"));
        assert!(glob_matches("/a/b*/", "/a/bc/"));
        assert!(!glob_matches("/*/", "/a/b/"));
    }

    #[test]
    fn exptime_rules_apply_outermost_first() {
        let send = |rules: Vec<(ExptimeAction, i64)>| Send {
            pool: 0,
            index: 0,
            keep_prefix: false,
            exptime: rules,
            asynclog: None,
        };
        let min10 = (ExptimeAction::Min, 10);
        assert_eq!(send(vec![min10]).exptime_for(0), 10);
        assert_eq!(send(vec![min10]).exptime_for(5), 5);
        assert_eq!(send(vec![min10]).exptime_for(50), 10);
        assert_eq!(
            send(vec![(ExptimeAction::Set, 99), min10]).exptime_for(5),
            10
        );
        assert_eq!(
            send(vec![min10, (ExptimeAction::Set, 99)]).exptime_for(5),
            99
        );
        assert_eq!(send(vec![]).exptime_for(7), 7);
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod handle_tests;

#[path = "plan_keysplit.rs"]
mod keysplit;

#[path = "plan_key_edit.rs"]
mod key_edit;

#[cfg(test)]
#[path = "plan_choice_tests.rs"]
mod choice_tests;
pub use keysplit::{host_id, set_host_id};

#[path = "plan_load_balancer.rs"]
mod load_balancer;

#[cfg(test)]
#[path = "plan_load_balancer_tests.rs"]
mod load_balancer_tests;

#[path = "plan_migrate.rs"]
mod migrate;

#[path = "plan_big_value.rs"]
mod big_value;
pub use big_value::chunk_base;
pub use migrate::{unix_now, StagingOp};

#[path = "plan_size_split.rs"]
mod size_split;
pub use size_split::{l2_key, Deferred, SizeSplitLevels, SizeSplitOp, SizeSplitRule};

#[path = "plan_shard_split.rs"]
mod shard_split;
pub use shard_split::{shard_id, split_key};

#[path = "plan_placement.rs"]
mod placement;
use placement::rendezvous_order;
