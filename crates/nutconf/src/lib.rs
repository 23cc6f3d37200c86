//! nutcracker.yml (twemproxy 0.5) configuration: parsing, defaults and validation. Pure
//! (no sockets, no runtime): `memfleet route`, `top` and `invalidate` share it.
//!
//! A file that `nutcracker -t` accepts parses here to the same pools, and the files it
//! rejects are rejected with the same reason, in the same words where twemproxy has them
//! (`directive "hash" is not a valid hash`). Two deliberate differences:
//! - host names are not resolved here (twemproxy resolves `listen:` while parsing); the
//!   router resolves when it binds or connects, so an unresolvable name fails there;
//! - memfleet-only directives (`client_auth`, `item_size_max`, `server_max_inflight`, the
//!   `big_value_*`, `tls*` and `listen_tls*` ones, `dns:`/`srv:` servers and
//!   `dns_refresh_ms`) are accepted, and `reuseport` from twemproxy's master branch too.
//!
//! Modules, one concept each, layered so that none imports one above it: `scalar` (C
//! number and boolean rules), `error` (`ConfigError`), `listen`, `server` (`servers:`
//! entries, including `dns:`/`srv:`) and `tls` (the TLS directives), `directives` (one
//! pool's `key: value`s as written), `yaml` (nutcracker's YAML structure), and this one:
//! the `Config` and `Pool` types, their defaults and the post-parse checks.

mod directives;
mod error;
mod listen;
mod redis_topology;
mod scalar;
mod server;
mod tls;
mod yaml;

use std::time::Duration;

use ring::{Distribution, Hash, Ring};

pub use self::error::{ConfigError, LoadError};
pub use self::listen::Listen;
use self::redis_topology::{redis_topology, sentinel_auth_fits};
pub use self::redis_topology::{ReadFrom, RedisTopology};
pub use self::server::{parse_server, DnsLookup, DnsName, ServerAddr, ServerSpec};
pub use self::tls::PoolTls;

use self::directives::RawPool;

/// twemproxy defaults (nc_conf.h).
pub const DEFAULT_HASH: Hash = Hash::Fnv1a64;
pub const DEFAULT_DISTRIBUTION: Distribution = Distribution::Ketama;
pub const DEFAULT_BACKLOG: u32 = 512;
pub const DEFAULT_SERVER_CONNECTIONS: u32 = 1;
pub const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u32 = 30_000;
pub const DEFAULT_SERVER_FAILURE_LIMIT: u32 = 2;
/// memfleet's `item_size_max` when a pool does not say: values up to 64 MB cross the router.
pub const DEFAULT_ITEM_SIZE_MAX: u32 = 64 * 1024 * 1024;
/// `item_size_max` (and mcrouter configs' `--item-size-max`) bounds, as memcached's `-I`.
pub const ITEM_SIZE_MAX_RANGE: std::ops::RangeInclusive<u32> = 1024..=1024 * 1024 * 1024;

/// A parsed, validated configuration: pools in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub pools: Vec<Pool>,
    /// Pools whose servers come (partly) from DNS; their `servers` hold only the fixed
    /// entries until the router's `dns::expand` adds the resolved ones.
    pub dns: Vec<PoolDns>,
}

/// A pool's DNS-named servers (memfleet extension).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolDns {
    /// Index into `Config::pools`.
    pub pool: usize,
    /// `dns_refresh_ms`: how often the names are looked up again.
    pub refresh: Duration,
    pub names: Vec<DnsName>,
}

/// `dns_refresh_ms` when a pool has DNS servers and does not say.
pub const DEFAULT_DNS_REFRESH_MS: u32 = 30_000;
/// mcrouter's `--big-value-batch-size` default.
pub const DEFAULT_BIG_VALUE_BATCH_SIZE: u32 = 10;

/// One pool (a top-level key of nutcracker.yml).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub listen: Listen,
    pub hash: Hash,
    pub hash_tag: Option<[u8; 2]>,
    pub distribution: Distribution,
    /// Server response/connect timeout; `None` waits forever (twemproxy treats 0 the same).
    pub timeout: Option<Duration>,
    pub backlog: u32,
    /// Parsed but ignored by twemproxy 0.5 (it always allows unlimited clients); 0 = unlimited.
    pub client_connections: u32,
    pub redis: bool,
    pub redis_auth: Option<String>,
    pub redis_db: u32,
    /// Where a Redis pool's servers come from: as written, a Redis Cluster's slot map
    /// (the servers are seed nodes) or a Sentinel-named primary (memfleet extension).
    pub redis_topology: RedisTopology,
    /// A learned pool's read-only commands: to the primary or to its replicas (memfleet
    /// extension).
    pub redis_read_from: ReadFrom,
    /// What the router sends backends as `AUTH [user] password`; `redis_auth` stays the
    /// password clients give the router and, when these are unset, the one sent to backends
    /// (memfleet extension).
    pub redis_backend_user: Option<String>,
    pub redis_backend_auth: Option<String>,
    /// What the router sends the Sentinels of a `redis_sentinel` pool as `AUTH [user]
    /// password` (their `requirepass` or ACL user), apart from the backends' (memfleet
    /// extension).
    pub redis_sentinel_user: Option<String>,
    pub redis_sentinel_auth: Option<String>,
    pub preconnect: bool,
    pub tcpkeepalive: bool,
    /// twemproxy master only; nutcracker 0.5 rejects it.
    pub reuseport: bool,
    pub auto_eject_hosts: bool,
    pub server_connections: u32,
    pub server_retry_timeout: Duration,
    pub server_failure_limit: u32,
    pub servers: Vec<ServerSpec>,
    // ---- memfleet-only directives ----
    /// Password clients must present (memfleet extension, not in twemproxy).
    pub client_auth: Option<String>,
    /// TLS on the listener and to the servers (memfleet extension).
    pub tls: PoolTls,
    /// The largest item a client may store through the pool, as memcached's `-I` counts
    /// it, and the largest value a server's reply may announce (memfleet extension).
    pub item_size_max: u32,
    /// Requests one server connection may have outstanding (sent or waiting to be);
    /// past it, requests to that server fail at once (0: no limit; memfleet extension).
    pub server_max_inflight: u32,
    /// Values longer than this many bytes are split into chunks across the pool, as
    /// mcrouter's `--big-value-split-threshold` (0: off; memfleet extension).
    pub big_value_split_threshold: u32,
    /// Chunks sent or fetched at a time (0: all), as `--big-value-batch-size`.
    pub big_value_batch_size: u32,
    /// Reassembled values come back without the big-value flag bit (0x8000).
    pub big_value_hide_reply_flag: bool,
    /// Hot keys' gets answered from a small cache in the router (memfleet extension).
    pub hot_keys: HotKeys,
    /// Requests of this pool's clients in flight to its servers, router-wide, past which
    /// requests fail at once (0: no limit; memfleet extension).
    pub active_req_limit: u32,
    /// Token buckets on gets, sets and deletes (memfleet extension, as mcrouter's
    /// RateLimitRoute `rates`).
    pub rates: PoolRates,
}

/// `gets_rate`/`gets_burst`, `sets_rate`/`sets_burst`, `deletes_rate`/`deletes_burst`:
/// requests per second of each class the pool lets through, and how many may come at once
/// (the burst defaults to the rate). A class without a rate is not limited.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolRates {
    pub gets: Option<TokenRate>,
    pub sets: Option<TokenRate>,
    pub deletes: Option<TokenRate>,
}

impl PoolRates {
    pub fn any(&self) -> bool {
        self.gets.is_some() || self.sets.is_some() || self.deletes.is_some()
    }
}

/// Requests per second, and the most that may pass at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenRate {
    pub rate: u32,
    pub burst: u32,
}

/// The rate keys, in the order `RawPool::rates` holds them.
const RATE_KEYS: [&str; 6] = [
    "gets_rate",
    "gets_burst",
    "sets_rate",
    "sets_burst",
    "deletes_rate",
    "deletes_burst",
];

/// One class's rate from its `*_rate` and `*_burst` values.
fn token_rate(
    class: &str,
    rate: Option<u32>,
    burst: Option<u32>,
) -> Result<Option<TokenRate>, String> {
    match (rate, burst) {
        (Some(rate), burst) => Ok(Some(TokenRate {
            rate,
            burst: burst.unwrap_or(rate).max(1),
        })),
        (None, Some(_)) => Err(format!("has {class}_burst without {class}_rate")),
        (None, None) => Ok(None),
    }
}

/// Hot-key handling (`hot_keys`, `hot_key_*`; mcrouter configs: `--hot-key*`): the router
/// samples the gets it routes, and answers gets of the keys that take at least `share` of
/// them, and of the keys that bring the busiest server's load toward the mean, from its own
/// cache of their values, each kept at most `ttl_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct HotKeys {
    pub enabled: bool,
    /// How long a cached value may be served: the bound on how stale it is for writes that
    /// do not go through this router.
    pub ttl_ms: u32,
    /// The share of sampled gets (0 < share <= 1) that makes a key hot.
    pub share: f64,
    /// The most keys that are hot at once (the cache holds at most this many values).
    pub max: u32,
    /// One get in `sample` (on average) feeds the sketch that finds hot keys.
    pub sample: u32,
}

pub const DEFAULT_HOT_KEY_TTL_MS: u32 = 1000;
pub const DEFAULT_HOT_KEY_SHARE: f64 = 0.01;
pub const DEFAULT_HOT_KEY_MAX: u32 = 256;
pub const DEFAULT_HOT_KEY_SAMPLE: u32 = 8;

// `share` is never NaN: `parse_share` refuses it.
impl Eq for HotKeys {}

impl Default for HotKeys {
    fn default() -> HotKeys {
        HotKeys {
            enabled: false,
            ttl_ms: DEFAULT_HOT_KEY_TTL_MS,
            share: DEFAULT_HOT_KEY_SHARE,
            max: DEFAULT_HOT_KEY_MAX,
            sample: DEFAULT_HOT_KEY_SAMPLE,
        }
    }
}

/// A share: a fraction (`0.05`) or a percentage (`5%`), more than 0 and at most 1.
pub fn parse_share(s: &str) -> Result<f64, &'static str> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s, 1.0),
    };
    let f = num
        .trim()
        .parse::<f64>()
        .map_err(|_| "is not a fraction or a percentage")?
        / scale;
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err("is not more than 0 and at most 1 (100%)")
    }
}

impl Pool {
    /// The pool's consistent-hash ring, all servers live.
    pub fn ring(&self) -> Ring {
        let servers = self.servers.iter().map(ServerSpec::ring_server).collect();
        Ring::new(servers, self.distribution, self.hash).with_hash_tag(self.hash_tag)
    }

    /// What the router sends a Redis backend as `AUTH`: `(user, password)`, the
    /// `redis_backend_*` pair when set, else `redis_auth` for the default user.
    pub fn backend_auth(&self) -> Option<(Option<&str>, &str)> {
        match (&self.redis_backend_auth, &self.redis_auth) {
            (Some(pw), _) => Some((self.redis_backend_user.as_deref(), pw)),
            (None, Some(pw)) => Some((None, pw)),
            (None, None) => None,
        }
    }

    /// What the router sends a `redis_sentinel` pool's Sentinels as `AUTH`: `(user,
    /// password)` from `redis_sentinel_user`/`redis_sentinel_auth`, else nothing.
    pub fn sentinel_auth(&self) -> Option<(Option<&str>, &str)> {
        let pw = self.redis_sentinel_auth.as_deref()?;
        Some((self.redis_sentinel_user.as_deref(), pw))
    }
}

impl Config {
    /// Parses and validates nutcracker.yml text.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        yaml::check_tokens(text)?;
        let pools = yaml::parse_pools(text)?;
        validate(pools)
    }

    /// Reads and validates a configuration file; the error names the file.
    pub fn load(path: &std::path::Path) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_yaml_str(&text).map_err(|error| LoadError::Invalid {
            path: path.to_owned(),
            error,
        })
    }

    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// Applies defaults and twemproxy's post-parse checks (nc_conf.c conf_validate_pool and
/// conf_post_validate).
fn validate(raw: Vec<RawPool>) -> Result<Config, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::File {
            msg: "configuration has no pools".into(),
        });
    }
    let mut pools = Vec::with_capacity(raw.len());
    let mut dns = Vec::new();
    for r in raw {
        let fail = |msg: &str| ConfigError::Pool {
            pool: r.name.clone(),
            msg: msg.to_owned(),
        };
        let Some(listen) = r.listen.clone() else {
            return Err(fail("is missing directive \"listen:\""));
        };
        if r.server_connections == Some(0) {
            return Err(fail(
                "has directive \"server_connections:\" 0; it cannot be 0",
            ));
        }
        r.tls.check().map_err(fail)?;
        let redis = r.redis.unwrap_or(false);
        if !redis && r.redis_auth.is_some() {
            return Err(fail(
                "has directive \"redis_auth:\", which is only valid for a redis pool",
            ));
        }
        let topology = redis_topology(&r, redis).map_err(fail)?;
        sentinel_auth_fits(&r, &topology).map_err(fail)?;
        if r.servers.is_empty() && r.dns.is_empty() {
            return Err(fail("has no servers"));
        }
        if !r.dns.is_empty() {
            dns.push(PoolDns {
                pool: pools.len(),
                refresh: Duration::from_millis(
                    r.dns_refresh_ms
                        .filter(|&ms| ms > 0)
                        .unwrap_or(DEFAULT_DNS_REFRESH_MS)
                        .into(),
                ),
                names: r.dns.clone(),
            });
        } else if r.dns_refresh_ms.is_some() {
            return Err(fail(
                "has directive \"dns_refresh_ms:\" but no \"dns:\" or \"srv:\" servers",
            ));
        }
        let mut names: Vec<&str> = r.servers.iter().map(|s| s.ketama_name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(fail(&format!("has servers with same name '{}'", w[0])));
        }
        let [gr, gb, sr, sb, dr, db] = r.rates;
        let rates = PoolRates {
            gets: token_rate("gets", gr, gb).map_err(|m| fail(&m))?,
            sets: token_rate("sets", sr, sb).map_err(|m| fail(&m))?,
            deletes: token_rate("deletes", dr, db).map_err(|m| fail(&m))?,
        };
        if redis && rates.any() {
            return Err(fail(
                "has rate limits (gets_rate, ...), which apply to memcached pools only",
            ));
        }
        pools.push(Pool {
            listen,
            hash: r.hash.unwrap_or(DEFAULT_HASH),
            hash_tag: r.hash_tag,
            distribution: r.distribution.unwrap_or(DEFAULT_DISTRIBUTION),
            timeout: r
                .timeout
                .filter(|&ms| ms > 0)
                .map(|ms| Duration::from_millis(ms.into())),
            backlog: r.backlog.unwrap_or(DEFAULT_BACKLOG),
            client_connections: r.client_connections.unwrap_or(0),
            redis,
            redis_auth: r.redis_auth,
            redis_db: r.redis_db.unwrap_or(0),
            redis_topology: topology,
            redis_read_from: r.redis_read_from.unwrap_or_default(),
            redis_backend_user: r.redis_backend_user,
            redis_backend_auth: r.redis_backend_auth,
            redis_sentinel_user: r.redis_sentinel_user,
            redis_sentinel_auth: r.redis_sentinel_auth,
            preconnect: r.preconnect.unwrap_or(false),
            tcpkeepalive: r.tcpkeepalive.unwrap_or(false),
            reuseport: r.reuseport.unwrap_or(false),
            auto_eject_hosts: r.auto_eject_hosts.unwrap_or(false),
            server_connections: r.server_connections.unwrap_or(DEFAULT_SERVER_CONNECTIONS),
            server_retry_timeout: Duration::from_millis(
                r.server_retry_timeout
                    .unwrap_or(DEFAULT_SERVER_RETRY_TIMEOUT_MS)
                    .into(),
            ),
            server_failure_limit: r
                .server_failure_limit
                .unwrap_or(DEFAULT_SERVER_FAILURE_LIMIT),
            servers: r.servers,
            client_auth: r.client_auth,
            tls: r.tls,
            item_size_max: r.item_size_max.unwrap_or(DEFAULT_ITEM_SIZE_MAX),
            server_max_inflight: r.server_max_inflight.unwrap_or(0),
            big_value_split_threshold: r.big_value_split_threshold.unwrap_or(0),
            big_value_batch_size: r
                .big_value_batch_size
                .unwrap_or(DEFAULT_BIG_VALUE_BATCH_SIZE),
            big_value_hide_reply_flag: r.big_value_hide_reply_flag.unwrap_or(true),
            hot_keys: HotKeys {
                enabled: r.hot_keys.unwrap_or(false),
                ttl_ms: r.hot_key_ttl.unwrap_or(DEFAULT_HOT_KEY_TTL_MS),
                share: r.hot_key_share.unwrap_or(DEFAULT_HOT_KEY_SHARE),
                max: r.hot_key_max.unwrap_or(DEFAULT_HOT_KEY_MAX),
                sample: r.hot_key_sample.unwrap_or(DEFAULT_HOT_KEY_SAMPLE),
            },
            active_req_limit: r.active_req_limit.unwrap_or(0),
            rates,
            name: r.name,
        });
    }
    let listen_key = |l: &Listen| match l {
        Listen::Tcp { host, port } => format!("{host}:{port}"),
        Listen::Unix { path, .. } => path.clone(),
    };
    for (i, a) in pools.iter().enumerate() {
        for b in &pools[i + 1..] {
            if a.name == b.name {
                return Err(ConfigError::File {
                    msg: format!("has pools with same name '{}'", a.name),
                });
            }
            if listen_key(&a.listen) == listen_key(&b.listen) {
                return Err(ConfigError::File {
                    msg: format!(
                        "pools '{}' and '{}' have the same listen address '{}'",
                        a.name,
                        b.name,
                        listen_key(&a.listen)
                    ),
                });
            }
        }
    }
    Ok(Config { pools, dns })
}

#[cfg(test)]
mod tests;
