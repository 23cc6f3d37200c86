//! The validated config: pools, route handles in an arena, and the routing-prefix table.

use ring::PoolHash;

/// Index of a pool in [`Config::pools`].
pub type PoolId = usize;
/// Index of a route handle in [`Config::routes`].
pub type RouteId = usize;

/// A whole config after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub pools: Vec<Pool>,
    pub routes: Vec<Route>,
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
    pub name: String,
    pub servers: Vec<Server>,
    /// Pool-level `weights`: PoolRoute then defaults to WeightedCh3 with them.
    pub weights: Option<Vec<f64>>,
    /// `keep_routing_prefix`: send keys to servers with their `/region/cluster/` prefix.
    pub keep_routing_prefix: bool,
}

/// One `host:port[:protocol[:security]]` entry; IPv6 hosts are bracketed (`[::1]:11211`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
    /// `ascii`, `caret`, ... as written; `None` when absent.
    pub protocol: Option<String>,
    pub security: Option<String>,
}

/// Where a list of children points: a route handle, or one server of a pool (what
/// `"Pool|A"` expands to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Route(RouteId),
    Server { pool: PoolId, index: usize },
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
}

/// Error results that make FailoverRoute try the next child, per operation class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailoverErrors {
    pub gets: Vec<String>,
    pub updates: Vec<String>,
    pub deletes: Vec<String>,
}

/// `failover_limit`: failovers allowed as a token bucket refilled by `rate` (clamped to
/// `[0, 1]`) per request, holding at most `burst` (at least 1, default 1000).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailoverLimit {
    pub rate: f64,
    pub burst: f64,
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
    pub target: Target,
    pub index_range: (usize, usize),
    pub key_fraction_range: (f64, f64),
    /// Fraction of matching requests to copy (1.0: all).
    pub requests_fraction: f64,
}

/// A route handle.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// Hash the routing key over a pool's servers.
    Pool {
        pool: PoolId,
        hash: PoolHash,
        /// Appended to the routing key before hashing.
        salt: String,
        shadows: Vec<Shadow>,
        /// Log deletes that fail, under this name (mcrouter's asynclog).
        asynclog: Option<String>,
    },
    /// Hash the routing key (plus `salt`) over arbitrary children.
    Hash {
        children: Vec<Target>,
        hash: PoolHash,
        salt: String,
    },
    All {
        mode: AllMode,
        children: Vec<Target>,
    },
    /// Children in order until one does not fail with one of `errors`.
    Failover {
        children: Vec<Target>,
        errors: FailoverErrors,
        limit: Option<FailoverLimit>,
    },
    /// Get-like requests go to children in order until a hit; others to the first child.
    MissFailover {
        children: Vec<Target>,
        return_best_on_error: bool,
    },
    /// Gets try `cold`, then `warm` on a miss and fill `cold` with `exptime`; the rest go to `cold`.
    WarmUp {
        cold: Target,
        warm: Target,
        exptime: u32,
    },
    /// Longest matching key prefix in `policies` (sorted), else `wildcard`.
    PrefixSelector {
        policies: Vec<(String, Target)>,
        wildcard: Option<Target>,
    },
    /// The route for the request's operation, else `default`, else the default reply.
    OperationSelector {
        policies: Vec<(String, Target)>,
        default: Option<Target>,
    },
    ModifyExptime {
        target: Target,
        exptime: i64,
        action: ExptimeAction,
    },
    /// The default reply: a miss for gets, not stored for updates, not found for deletes.
    Null,
    /// An error reply carrying `message`.
    Error { message: String },
}
