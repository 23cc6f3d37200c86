//! The validated config: pools, route handles in an arena, and the routing-prefix table.

use ring::PoolHash;

/// Index of a pool in [`Config::pools`].
pub type PoolId = usize;
/// Index of a route handle in [`Config::routes`].
pub type RouteId = usize;

/// A whole config after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Every pool, indexed by [`PoolId`].
    pub pools: Vec<Pool>,
    /// Every route handle, indexed by [`RouteId`]; children refer back by id.
    pub routes: Vec<Route>,
    /// Which route a request starts in.
    pub entry: Entry,
    /// Settings accepted but not acted on (yet); validation reports them.
    pub warnings: Vec<String>,
}

/// Which route a request starts in.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// `"route"`: the route of the default routing prefix (the router's `--route-prefix`).
    Default(RouteId),
    /// `"routes"`: each routing prefix (alias, e.g. `/region/cluster/`) names its route.
    Aliases(Vec<(String, RouteId)>),
}

/// A named set of servers (`"pools": {"A": {"servers": [...]}}` or inline with a `name`).
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// The pool's name (its key in `pools`, or its inline `name`).
    pub name: String,
    /// The pool's servers in order; a hash picks one by index.
    pub servers: Vec<Server>,
    /// Pool-level `weights`: PoolRoute then defaults to WeightedCh3 with them.
    pub weights: Option<Vec<f64>>,
    /// Pool-level `tags` (one per server) for Rendezvous hashing.
    pub tags: Option<Vec<String>>,
    /// `keep_routing_prefix`: send keys to servers with their `/region/cluster/` prefix.
    pub keep_routing_prefix: bool,
    /// PoolRoutes' `max_outstanding` over this pool, the smallest given (0: no limit): at
    /// most this many requests in flight per server and router thread, the rest wait.
    pub max_outstanding: u32,
    /// `error_on_empty` (default true): without servers, requests get an error reply;
    /// false: NullRoute's reply.
    pub error_on_empty: bool,
    /// `region` and `cluster`: where the pool's servers are. With both, the router's
    /// default routing prefix picks the pool's timeout (see [`crate::timeouts`]).
    pub region: Option<String>,
    /// `cluster`: see `region`.
    pub cluster: Option<String>,
    /// `server_timeout`, ms: the pool's own server timeout (else `--server-timeout`).
    pub server_timeout_ms: Option<u64>,
}

/// One `host:port[:protocol[:security]]` entry; IPv6 hosts are bracketed (`[::1]:11211`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// Host name or address, without brackets.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `ascii`, `caret`, ... as written; `None` when absent.
    pub protocol: Option<String>,
    /// The security field as written (`plain`, `ssl`, ...); `None` when absent.
    pub security: Option<String>,
}

/// Where a list of children points: a route handle, or one server of a pool (what
/// `"Pool|A"` expands to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A route handle.
    Route(RouteId),
    /// One server of a pool.
    Server {
        /// The pool.
        pool: PoolId,
        /// The server's position in the pool.
        index: usize,
    },
}

/// How an `All*Route` answers once it has sent to every child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllMode {
    /// Wait for all; reply with the worst (an error if any).
    Sync,
    /// Reply at once with the default reply; children complete in the background.
    Async,
    /// Reply with the first child's reply; the rest complete in the background.
    Initial,
    /// Reply once a non-error result was seen half + 1 times (or when all replied).
    Majority,
    /// Reply with the first non-error reply (or the last error).
    Fastest,
    /// Wait for all; reply with the first child's reply. No config names it: WarmUpRoute's
    /// deletes, which must have reached warm too before the client hears.
    InitialSync,
    /// Reply with the first hit (gets) or stored (updates), else the last reply. No config
    /// names it: KeySplitRoute's `first_hit`.
    FirstHit,
}

/// Error results that make FailoverRoute try the next child, per operation class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailoverErrors {
    /// Errors that fail over a get-like request.
    pub gets: Vec<String>,
    /// Errors that fail over an update.
    pub updates: Vec<String>,
    /// Errors that fail over a delete.
    pub deletes: Vec<String>,
}

/// `failover_limit`: failovers allowed as a token bucket refilled by `rate` (clamped to
/// `[0, 1]`) per request, holding at most `burst` (at least 1, default 1000).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailoverLimit {
    /// Failovers earned per request.
    pub rate: f64,
    /// Most failovers saved up.
    pub burst: f64,
}

/// One token bucket of RateLimitRoute's `rates`: `rate` tokens a second, at most `burst`
/// saved up (a bucket starts full); each request takes one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenRate {
    /// Tokens earned per second.
    pub rate: f64,
    /// Most tokens saved up (`*_burst`, default: the rate).
    pub burst: f64,
}

/// RateLimitRoute's `rates`, per operation class; a class without a rate is not limited.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// `gets_rate`/`gets_burst`: get, gets, gat, gats, metaget, lease-get.
    pub gets: Option<TokenRate>,
    /// `sets_rate`/`sets_burst`: set, add, replace, append, prepend, cas, lease-set.
    pub sets: Option<TokenRate>,
    /// `deletes_rate`/`deletes_burst`: delete.
    pub deletes: Option<TokenRate>,
}

/// `failover_policy`: which children a FailoverRoute tries, in which order.
#[derive(Clone, Debug, PartialEq)]
pub enum FailoverPolicy {
    /// Every child in config order (mcrouter's default).
    InOrder,
    /// mcrouter's DeterministicOrderPolicy: the first child, then children picked by hashing
    /// the routing key salted with "2", "3", ... (skipping ones already picked), `max_tries`
    /// children at most, and no further failover once `max_error_tries` errors other than
    /// `tko` were met.
    DeterministicOrder {
        /// Most children tried, the first included (at most the number of children).
        max_tries: usize,
        /// Most error replies other than `tko` before the error is the reply.
        max_error_tries: usize,
        /// Ch3 or WeightedCh3 over the children.
        hash: PoolHash,
        /// Unless set, the child after the first child's own pick (the server index its
        /// PoolRoute or HashRoute chose, plus one) is skipped: it is taken to be the same
        /// server in a failover pool laid out like the normal one.
        ignore_normal_reply_index: bool,
    },
    /// mcrouter's LeastFailuresPolicy: the first child, then the others with the fewest
    /// errors in a row (as this worker saw them; a good reply resets a child's count), ties
    /// in config order, `max_tries` children at most.
    LeastFailures {
        /// Most children tried, the first included (at most the number of children).
        max_tries: usize,
    },
    /// mcrouter's RendezvousPolicy: the first child (a pool over the same servers), then the
    /// other children in the rendezvous order of the routing key over their tags, leaving out
    /// the one matching the server the first child picked; no try limit.
    Rendezvous {
        /// Rendezvous or WeightedRendezvous over the children after the first.
        hash: ring::Rendezvous,
    },
}

/// `action` of ModifyExptimeRoute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExptimeAction {
    /// Replace the exptime.
    Set,
    /// Cap it: keep the request's exptime unless it is 0 (never) or larger.
    Min,
}

/// A PoolRoute shadow: a copy of requests for keys whose server index is in
/// `index_range` (half-open) and whose routing-key hash fraction is in `key_fraction_range`.
#[derive(Clone, Debug, PartialEq)]
pub struct Shadow {
    /// Where the copies go.
    pub target: Target,
    /// Server indexes `[start, end)` whose keys are copied.
    pub index_range: (usize, usize),
    /// Fraction `[a, b]` of the routing-key hash space that is copied.
    pub key_fraction_range: (f64, f64),
    /// Fraction of matching requests to copy (1.0: all).
    pub requests_fraction: f64,
    /// Under a bucket id (see [`Route::Bucketize`]) the key fraction range is read as
    /// bucket ids `[lo, hi]` instead, as mcrouter does; `None`: no bucket is copied (a
    /// shadow without `key_fraction_range`, or not of a bucketized PoolRoute).
    pub bucket_range: Option<(u64, u64)>,
}

/// mcrouter's McBucketRoute settings (a PoolRoute's `bucketize`): the routing key hashes to
/// one of `total_buckets` buckets, and hashes below that choose by bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucketize {
    /// `total_buckets`: 1 to 2^23 (Ch3's largest pool).
    pub total_buckets: u32,
    /// `bucketization_keyspace`: a name, shown by `route_handles`.
    pub keyspace: String,
    /// `total_buckets_by_prefix`: keys under a prefix (the longest listed) are bucketed
    /// among this many buckets' worth of ids first, so they share fewer buckets. Sorted.
    pub by_prefix: Vec<(String, u32)>,
}

impl Bucketize {
    /// The bucket of a routing key (without its routing prefix, up to `|#|`).
    pub fn bucket(&self, hashed: &[u8]) -> u64 {
        let prefix = self
            .by_prefix
            .iter()
            .filter(|(p, _)| hashed.starts_with(p.as_bytes()))
            .max_by_key(|(p, _)| p.len());
        let furc = |bytes: &[u8], n: u32| u64::from(ring::furc_hash(bytes, n));
        match prefix {
            Some((p, n)) => {
                let mut folded = p.clone().into_bytes();
                folded.extend_from_slice(furc(hashed, *n).to_string().as_bytes());
                furc(&folded, self.total_buckets)
            }
            None => furc(hashed, self.total_buckets),
        }
    }
}

/// How one shard is split (see [`Route::ShardSplit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardSplit {
    /// Sub-shards before `start`.
    pub old_size: usize,
    /// Sub-shards after `start + period`; in between, hosts move over one by one.
    pub new_size: usize,
    /// When the move from `old_size` to `new_size` starts (unix seconds).
    pub start: i64,
    /// How long the move takes (seconds).
    pub period: i64,
    /// Deletes reach every sub-shard (the shard's own key answers).
    pub fanout_deletes: bool,
}

/// `slow_warmup`'s `settings`, with mcrouter's defaults. A server counts as warming up once
/// its hit rate falls below `enable_threshold`, and until it reaches `disable_threshold`;
/// meanwhile it gets `start + hit rate * step` of the get-like requests. Below
/// `min_requests` replies the hit rate counts as 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlowWarmUpSettings {
    /// Hit rate under which warming up starts.
    pub enable_threshold: f64,
    /// Hit rate from which warming up stops.
    pub disable_threshold: f64,
    /// Fraction of gets the server gets at a hit rate of 0.
    pub start: f64,
    /// How fast the fraction grows with the hit rate.
    pub step: f64,
    /// Replies seen before the hit rate counts.
    pub min_requests: u64,
}

impl Default for SlowWarmUpSettings {
    fn default() -> Self {
        SlowWarmUpSettings {
            enable_threshold: 0.7,
            disable_threshold: 0.9,
            start: 0.1,
            step: 1.0,
            min_requests: 100,
        }
    }
}

/// A route handle.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// Hash the routing key over a pool's servers.
    Pool {
        /// The pool hashed over.
        pool: PoolId,
        /// The hash function choosing a server.
        hash: PoolHash,
        /// Appended to the routing key before hashing.
        salt: String,
        /// Copies of requests to other targets.
        shadows: Vec<Shadow>,
        /// Log deletes that fail, under this name (mcrouter's asynclog).
        asynclog: Option<String>,
        /// Hash the bucket id of the enclosing [`Route::Bucketize`] instead of the key.
        by_bucket: bool,
    },
    /// Hash the routing key (plus `salt`) over arbitrary children.
    Hash {
        /// Where the hash chooses among.
        children: Vec<Target>,
        /// The hash function choosing a child.
        hash: PoolHash,
        /// Appended to the routing key before hashing.
        salt: String,
        /// Hash the bucket id of the enclosing [`Route::Bucketize`] instead of the key.
        by_bucket: bool,
    },
    /// McBucketRoute (a PoolRoute's `bucketize`): works out the key's bucket, which the
    /// hashes below with `by_bucket` (and shadows' ranges) go by, then `target`.
    Bucketize {
        /// The PoolRoute (with its wrappers).
        target: Target,
        /// How keys map to buckets.
        settings: Bucketize,
    },
    /// Send to every child; `mode` says which reply the client gets.
    All {
        /// Which reply the client gets.
        mode: AllMode,
        /// Every child gets the request.
        children: Vec<Target>,
    },
    /// Children in order until one does not fail with one of `errors`.
    Failover {
        /// Tried in order.
        children: Vec<Target>,
        /// Error results that move on to the next child.
        errors: FailoverErrors,
        /// Rate limit on failovers; `None`: unlimited.
        limit: Option<FailoverLimit>,
        /// Which children are tried, in which order.
        policy: FailoverPolicy,
    },
    /// Get-like requests go to children in order until a hit; others to the first child.
    MissFailover {
        /// Tried in order for get-like requests.
        children: Vec<Target>,
        /// When no child hits, reply with the best reply instead of the last.
        return_best_on_error: bool,
    },
    /// Gets try `cold`, then `warm` on a miss and fill `cold` with `exptime`; deletes go to
    /// both (cold answers); the rest go to `cold`.
    WarmUp {
        /// Tried first, and filled on a warm hit.
        cold: Target,
        /// Asked when `cold` misses.
        warm: Target,
        /// Exptime of the fill of `cold`.
        exptime: u32,
    },
    /// Longest matching key prefix in `policies` (sorted), else `wildcard`.
    PrefixSelector {
        /// Key prefix -> route, sorted by prefix.
        policies: Vec<(String, Target)>,
        /// For keys no prefix matches.
        wildcard: Option<Target>,
    },
    /// The route for the request's operation, else `default`, else the default reply.
    OperationSelector {
        /// Operation name (see [`crate::OPERATIONS`]) -> route, sorted.
        policies: Vec<(String, Target)>,
        /// For operations without a policy.
        default: Option<Target>,
    },
    /// Rewrite the exptime of updates, then send to `target`.
    ModifyExptime {
        /// Where the rewritten request goes.
        target: Target,
        /// The exptime to set, or the cap.
        exptime: i64,
        /// Whether to set or cap the exptime.
        action: ExptimeAction,
    },
    /// Spreads a key over `replicas` keys (`key`, `key::1`, ...) that `destination` hashes
    /// apart: gets read one, deletes (and sets with `all_sync`) write all.
    KeySplit {
        /// Where every replica key is routed.
        destination: Target,
        /// How many keys (2..=1000).
        replicas: usize,
        /// Sets go to every replica (the others in the background).
        all_sync: bool,
        /// Gets ask every replica and take the first hit.
        first_hit: bool,
    },
    /// Gets try `l1`, then `l2` on a miss and fill `l1` with `upgrading_l1_exptime`, with
    /// optional negative caching; everything else goes to `l1` only.
    L1L2Cache {
        /// Tried first, filled from `l2`, and the only target of updates and deletes.
        l1: Target,
        /// Asked when `l1` misses.
        l2: Target,
        /// Exptime of `l1` fills (0: never expires).
        upgrading_l1_exptime: u32,
        /// Exptime of the negative ("ncache") entries.
        ncache_exptime: u32,
        /// 0: no negative caching; else every this many ncache hits, `l1` is refreshed.
        ncache_update_period: usize,
    },
    /// Values of `threshold` bytes or more are set on `l2`, with a sentinel item (flag 0x20)
    /// on `l1`: empty for `set`, naming the suffixed l2 key for `lease-set`; gets and
    /// lease-get follow a sentinel to `l2`; the rest goes to `l1` only.
    L1L2SizeSplit {
        /// Small values, sentinels, and every other operation.
        l1: Target,
        /// Large values.
        l2: Target,
        /// Values this long or longer are split (0: never).
        threshold: usize,
        /// Sets with an exptime below this stay whole on `l1` (0: no such rule).
        ttl_threshold: i64,
        /// The exptime cap of a large lease-set's whole copy on `l1` when `l2` did not store it.
        failure_ttl: i64,
        /// Large values go whole to `l1`, and to `l2` in the background.
        both_full_set: bool,
        /// How often gets and lease-get ask `l1` again after a sentinel's value was lost.
        retries: u32,
    },
    /// Requests of a rate-limited operation class pass to `target` while its token bucket
    /// has a token; past the rate they go to `fallback`, or get the default reply.
    RateLimit {
        /// Where requests within the rate go.
        target: Target,
        /// Token buckets per operation class.
        rates: Rates,
        /// Where requests over the rate go; `None`: the default reply.
        fallback: Option<Target>,
    },
    /// RandomRoute: each request goes to one child picked uniformly at random.
    Random {
        /// Picked among.
        children: Vec<Target>,
    },
    /// LoadBalancerRoute (also HashRoute's and PoolRoute's `hash_func: "LoadBalancer"`).
    LoadBalancer(LoadBalancer),
    /// ModifyKeyRoute: `target` gets the request with its key rewritten by `edit`.
    ModifyKey {
        /// Where the rewritten request goes.
        target: Target,
        /// How the key is rewritten.
        edit: KeyEdit,
    },
    /// LatencyInjectionRoute: `child` gets the request after `before_ms`; its reply reaches
    /// the client `after_ms` later, and no sooner than `total_ms` after the request came.
    LatencyInjection {
        /// Where the request goes.
        child: Target,
        /// Milliseconds before the request goes on.
        before_ms: u64,
        /// Milliseconds after the reply came back.
        after_ms: u64,
        /// The least milliseconds from the request to the reply (0: no floor).
        total_ms: u64,
    },
    /// Moves a key space from `from` to `to`: before `start_time` everything goes to
    /// `from`; from `start_time + interval` plus the key's hash modulo `interval` on, all
    /// but deletes go to `to`; deletes go to both from `start_time` until
    /// `start_time + 2 * interval` (worst reply), then to `to`.
    Migrate {
        /// The old route.
        from: Target,
        /// The new route.
        to: Target,
        /// When the migration starts (unix seconds).
        start_time: i64,
        /// Length of each phase in seconds (at least 1).
        interval: i64,
    },
    /// Reads from `warm` (a hit is copied to `staging` in the background with `add`);
    /// writes go to `warm` and, once it took them, to `staging` in the background; deletes
    /// go to both (worst reply). The client always gets `warm`'s reply, bar deletes.
    Staging {
        /// Answers every request.
        warm: Target,
        /// Kept in step with `warm` behind the client's back.
        staging: Target,
    },
    /// PoolRoute's `shard_splits`: a key whose shard id (between its first two colons,
    /// ending in a digit) is split goes to one of its sub-shards' keys (the shard id with
    /// a two-letter suffix; sub-shard 0 is the key itself), this host's by host id;
    /// deletes go to all of them when the split fans out deletes.
    ShardSplit {
        /// The pool route the (rewritten) keys go through.
        destination: Target,
        /// Shard id -> its split, sorted by shard id; shards not listed are not split.
        splits: Vec<(String, ShardSplit)>,
    },
    /// PoolRoute's `slow_warmup`: while the server a key hashes to has a low hit rate (a
    /// server that just joined, empty), only part of its get-like requests go to it, the
    /// rest to `failover`; the part grows with the hit rate.
    SlowWarmUp {
        /// The pool route being warmed up.
        target: Target,
        /// Where the gets the target does not get go.
        failover: Target,
        /// Thresholds and the fraction's formula.
        settings: SlowWarmUpSettings,
    },
    /// ShadowRoute's child at position `index`: the child answers; copies go to the
    /// `shadows` whose ranges cover the index and the key.
    Shadow {
        /// Whose reply the client gets.
        child: Target,
        /// The child's position among ShadowRoute's children.
        index: usize,
        /// The shadows covering that position.
        shadows: Vec<Shadow>,
    },
    /// BigValueRoute: a value longer than `settings.threshold` is stored as chunks plus an
    /// index item, and read back whole (the router does the splitting; see
    /// `Config::big_value`). Every request goes on to `target`.
    BigValue {
        /// Where requests, chunks and index items go.
        target: Target,
        /// The handle's `split_threshold`, `batch_size` and `hide_reply_flag`.
        settings: BigValueSettings,
    },
    /// The default reply: a miss for gets, not stored for updates, not found for deletes.
    Null,
    /// An error reply carrying `message`.
    Error {
        /// The text of the error reply.
        message: String,
    },
}

/// BigValueRoute's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BigValueSettings {
    /// `split_threshold`: values longer than this are split into chunks this long (0: never).
    pub threshold: usize,
    /// `batch_size`: chunks written or fetched at a time (0: all at once).
    pub batch: usize,
    /// `hide_reply_flag`: a reassembled value comes back without the 0x8000 flag.
    pub hide_reply_flag: bool,
}

/// ModifyKeyRoute's settings (see `crate::plan` for what they do to a key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEdit {
    /// `set_routing_prefix`: the routing prefix keys get (`Some("")`: none).
    pub routing_prefix: Option<String>,
    /// `ensure_key_prefix`: keys start with this.
    pub key_prefix: String,
    /// `replace_key_prefix`: a key starting with this has it replaced by `key_prefix`.
    pub replace_prefix: Option<String>,
    /// `modify_inplace`: the key prefix overwrites the key's first bytes instead of being
    /// put in front.
    pub modify_inplace: bool,
    /// `set_key_suffix`: appended to every key.
    pub key_suffix: String,
}

// LoadBalancerRoute's settings. mcrouter weighs each child by the load its replies report;
// memcached's replies report none, so with memcached behind it every child keeps mcrouter's
// starting weight (1.0) and the route is a key hash with re-hashes on errors, or a random
// pick. `load_ttl_ms` and `enable_thrift_server_load` only matter once loads are reported,
// so they are read and checked, not kept.

/// LoadBalancerRoute over two children or more (fewer become NullRoute or the child).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadBalancer {
    /// The children, in config order.
    pub children: Vec<Target>,
    /// Appended to the routing key before hashing.
    pub salt: String,
    /// Children tried in all with `weighted-hashing` (at least 1, at most the children).
    pub failover_count: usize,
    /// How a child is chosen.
    pub algorithm: LoadBalancerAlgorithm,
    /// A PoolRoute's asynclog name: its servers' failed deletes are logged under it.
    pub asynclog: Option<String>,
    /// A PoolRoute's shadows, by the position of the server that answers.
    pub shadows: Vec<Shadow>,
}

/// LoadBalancerRoute's `algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadBalancerAlgorithm {
    /// `weighted-hashing` (the default): WeightedCh3 over the children's weights.
    WeightedHashing,
    /// `two-random-choices`: the less loaded of two random children.
    TwoRandomChoices,
}

impl LoadBalancerAlgorithm {
    /// The name in the config (and in mcrouter's route name).
    pub fn name(self) -> &'static str {
        match self {
            LoadBalancerAlgorithm::WeightedHashing => "weighted-hashing",
            LoadBalancerAlgorithm::TwoRandomChoices => "two-random-choices",
        }
    }
}
