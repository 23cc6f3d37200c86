//! `memfleet route`'s command line: nutcracker's flags, mcrouter's, and memfleet's own.

use std::path::PathBuf;

use crate::{asynclog, mcrouter, mcrouter_tls};

/// nutcracker's default stats port.
const DEFAULT_STATS_PORT: u16 = 22222;
/// mcrouter's default: 100 MB of memory at the ~3 KB it measured per outstanding request.
const DEFAULT_MAX_CLIENT_OUTSTANDING_REQS: u32 = 100 * 1024 * 1024 / (3 * 1024);

/// The configuration dialect a command line runs with, decided once from its flags: it
/// settles what `-p` and the stats port mean.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dialect {
    /// nutcracker.yml (`-c`): `-p` is the pid file; stats on port 22222 unless `-s`.
    Nutcracker,
    /// An mcrouter config (`--config`, `--config-file` or `--config-str`): `-p` is a port
    /// to listen on; no stats port unless `-s` (mcrouter has none).
    Mcrouter,
}

/// nutcracker's command line, plus `-T/--threads`.
#[derive(clap::Args, Debug, Clone)]
pub struct RouteArgs {
    /// Configuration file (nutcracker.yml).
    #[arg(short = 'c', long = "conf-file", default_value = "conf/nutcracker.yml")]
    pub conf_file: PathBuf,
    /// Test the configuration for syntax errors and exit.
    #[arg(short = 't', long = "test-conf")]
    pub test_conf: bool,
    /// Stats monitoring port (default 22222; with an mcrouter config, none unless given).
    #[arg(short = 's', long = "stats-port")]
    pub stats_port: Option<u16>,
    /// Stats monitoring address.
    #[arg(short = 'a', long = "stats-addr", default_value = "0.0.0.0")]
    pub stats_addr: String,
    /// Stats aggregation interval in msec (accepted for compatibility: memfleet's stats are live).
    #[arg(short = 'i', long = "stats-interval", default_value_t = 30_000)]
    pub stats_interval: u64,
    /// Logging level (nutcracker's 0..11; 5 = notice).
    #[arg(short = 'v', long = "verbose", default_value_t = 5)]
    pub verbose: u8,
    /// Run as a daemon.
    #[arg(short = 'd', long = "daemonize")]
    pub daemonize: bool,
    /// nutcracker: the process id file; with an mcrouter config (--config...): the port.
    #[arg(short = 'p', value_name = "PID_FILE|PORT")]
    pub p: Option<String>,
    /// Process id file.
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Log file (default stderr); `-L/--log-path` is mcrouter's spelling.
    #[arg(
        short = 'o',
        long = "output",
        visible_short_alias = 'L',
        visible_alias = "log-path"
    )]
    pub output: Option<PathBuf>,
    /// mbuf chunk size (accepted for compatibility; memfleet sizes buffers per request).
    #[arg(short = 'm', long = "mbuf-size")]
    pub mbuf_size: Option<usize>,
    /// Print the stats description and exit.
    #[arg(short = 'D', long = "describe-stats")]
    pub describe_stats: bool,
    /// Worker threads (default: number of cores); `--num-proxies` is mcrouter's spelling.
    #[arg(short = 'T', long = "threads", visible_alias = "num-proxies")]
    pub threads: Option<usize>,
    /// mcrouter: check the mcrouter config and exit (`exit`, the default) with 0 or 1.
    #[arg(long = "validate-config", num_args = 0..=1, require_equals = true,
          default_missing_value = "exit", value_name = "exit|run")]
    pub validate_config: Option<String>,
    /// memfleet: print the mcrouter config with its JSONM macros expanded, and exit.
    #[arg(long = "print-expanded-config")]
    pub print_expanded_config: bool,
    /// mcrouter: the config, as `file:PATH` or inline JSON.
    #[arg(long = "config", value_name = "file:PATH|JSON")]
    pub config: Option<String>,
    /// mcrouter (deprecated there): the config file.
    #[arg(long = "config-file", value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// mcrouter (deprecated there): the config as a JSON string.
    #[arg(long = "config-str", value_name = "JSON")]
    pub config_str: Option<String>,
    /// mcrouter: runtime variables (JSON; WeightedCh3Rv's `hash_route_weights`), read with
    /// the config: at start and on each reload (SIGHUP or a changed config file).
    #[arg(long = "runtime-vars-file", value_name = "PATH")]
    pub runtime_vars_file: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR:PORT/metrics (off by default).
    #[arg(long = "metrics", value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// mcrouter: the default routing prefix (`/region/cluster/`).
    #[arg(short = 'R', long = "route-prefix", default_value = routetree::DEFAULT_ROUTE_PREFIX)]
    pub route_prefix: String,
    /// mcrouter: the port(s) to listen on (also `-p` with an mcrouter config).
    #[arg(long = "port", value_name = "PORT")]
    pub port: Vec<u16>,
    /// mcrouter: comma-separated addresses to listen on (default: all).
    #[arg(long = "listen-addresses", value_name = "ADDR,...")]
    pub listen_addresses: Option<String>,
    /// mcrouter: server timeout in ms.
    #[arg(long = "server-timeout", value_name = "MS",
          default_value_t = mcrouter::DEFAULT_SERVER_TIMEOUT_MS)]
    pub server_timeout: u64,
    /// mcrouter: the server timeout of pools in another region than `--route-prefix`'s (by
    /// the pool's `region` and `cluster`), ms; 0: not set. Over every other timeout.
    #[arg(
        long = "cross-region-timeout-ms",
        value_name = "MS",
        default_value_t = 0
    )]
    pub cross_region_timeout_ms: u64,
    /// mcrouter: the same for pools in `--route-prefix`'s region and another cluster.
    #[arg(
        long = "cross-cluster-timeout-ms",
        value_name = "MS",
        default_value_t = 0
    )]
    pub cross_cluster_timeout_ms: u64,
    /// mcrouter: the same for pools in `--route-prefix`'s region and cluster.
    #[arg(
        long = "within-cluster-timeout-ms",
        value_name = "MS",
        default_value_t = 0
    )]
    pub within_cluster_timeout_ms: u64,
    /// mcrouter: consecutive timeouts that mark a server TKO (soft); 0: never.
    #[arg(long = "timeouts-until-tko", default_value_t = mcrouter::DEFAULT_TIMEOUTS_UNTIL_TKO)]
    pub timeouts_until_tko: u32,
    /// mcrouter: first delay before probing a TKO server, ms (doubles after each failure).
    #[arg(short = 'r', long = "probe-timeout-initial", value_name = "MS",
          default_value_t = mcrouter::DEFAULT_PROBE_INITIAL_MS)]
    pub probe_timeout_initial: u64,
    /// mcrouter: longest delay between probes of a TKO server, ms.
    #[arg(long = "probe-timeout-max", value_name = "MS",
          default_value_t = mcrouter::DEFAULT_PROBE_MAX_MS)]
    pub probe_timeout_max: u64,
    /// mcrouter: the asynclog spool directory: deletes that a PoolRoute with `asynclog`
    /// could not deliver are spooled here and replayed (none without it).
    #[arg(long = "async-dir", value_name = "DIR")]
    pub async_dir: Option<PathBuf>,
    /// mcrouter: do not spool failed deletes; their errors go to the client.
    #[arg(long = "asynclog-disable")]
    pub asynclog_disable: bool,
    /// Largest asynclog spool per destination, bytes; beyond it the oldest deletes are
    /// dropped (logged and counted).
    #[arg(long = "asynclog-max-bytes", value_name = "BYTES",
          default_value_t = asynclog::DEFAULT_MAX_BYTES)]
    pub asynclog_max_bytes: u64,
    /// The nameserver for `dns:`/`srv:` servers (default: /etc/resolv.conf's); also
    /// MEMFLEET_DNS_SERVER.
    #[arg(long = "dns-server", value_name = "IP:PORT")]
    pub dns_server: Option<std::net::SocketAddr>,
    /// mcrouter: look the servers' host names up again every MS (0: only at start and on
    /// reload); a changed address is installed as a reload. nutcracker configs set this
    /// per pool (`dns_refresh_ms`).
    #[arg(long = "dns-refresh-ms", value_name = "MS", default_value_t = 30_000)]
    pub dns_refresh_ms: u64,
    /// mcrouter configs: the largest value that crosses the router, bytes: a server's reply
    /// announcing more closes its connection; a larger client item is refused. nutcracker
    /// configs set this per pool (`item_size_max`).
    #[arg(long = "item-size-max", value_name = "BYTES",
          default_value_t = nutconf::DEFAULT_ITEM_SIZE_MAX,
          value_parser = clap::value_parser!(u32).range(
              i64::from(*nutconf::ITEM_SIZE_MAX_RANGE.start())
                  ..=i64::from(*nutconf::ITEM_SIZE_MAX_RANGE.end())))]
    pub item_size_max: u32,
    /// mcrouter: values longer than this are split into chunks across the servers and
    /// reassembled on reads (0: off). nutcracker configs set this per pool
    /// (`big_value_split_threshold`).
    #[arg(
        long = "big-value-split-threshold",
        value_name = "BYTES",
        default_value_t = 0
    )]
    pub big_value_split_threshold: u32,
    /// mcrouter: chunks of a big value written or read at a time (0: all at once).
    #[arg(long = "big-value-batch-size", value_name = "N",
          default_value_t = nutconf::DEFAULT_BIG_VALUE_BATCH_SIZE)]
    pub big_value_batch_size: u32,
    /// mcrouter: reassembled values come back without the big-value flag bit (0x8000).
    #[arg(long = "big-value-hide-reply-flag", num_args = 0..=1, default_missing_value = "true")]
    pub big_value_hide_reply_flag: bool,
    /// mcrouter: requests one server connection may have in flight (0: no limit). With
    /// it, `--target-max-pending-requests` more may wait; past both, a request to that
    /// server fails at once (`local_error`). nutcracker configs set the total per pool
    /// (`server_max_inflight`).
    #[arg(
        long = "target-max-inflight-requests",
        value_name = "N",
        default_value_t = 0
    )]
    pub target_max_inflight_requests: u32,
    /// mcrouter: requests that may wait beyond `--target-max-inflight-requests`.
    #[arg(
        long = "target-max-pending-requests",
        value_name = "N",
        default_value_t = 100_000
    )]
    pub target_max_pending_requests: u32,
    /// Client requests the whole router may have in flight to servers (0: no limit), as
    /// memcached's proxy `active_req_limit`: past it, a request is answered at once with
    /// `SERVER_ERROR active request limit reached`. Split evenly over the worker threads.
    #[arg(long = "active-req-limit", value_name = "N", default_value_t = 0)]
    pub active_req_limit: u32,
    /// mcrouter: requests one client connection may have outstanding; past it the client is
    /// not read until replies go out (0: no limit but the router's own, 16384).
    #[arg(
        long = "max-client-outstanding-reqs",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CLIENT_OUTSTANDING_REQS
    )]
    pub max_client_outstanding_reqs: u32,
    /// mcrouter: answer gets of hot keys (found by sampling) from a small cache in the
    /// router. nutcracker configs set this per pool (`hot_keys`).
    #[arg(long = "hot-keys", num_args = 0..=1, default_missing_value = "true")]
    pub hot_keys: bool,
    /// mcrouter: the longest a hot key's value is served from the router's cache, ms
    /// (`hot_key_ttl`).
    #[arg(long = "hot-key-ttl-ms", value_name = "MS",
          default_value_t = nutconf::DEFAULT_HOT_KEY_TTL_MS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub hot_key_ttl_ms: u32,
    /// mcrouter: the share of gets (fraction, or percentage with `%`) that makes a key hot
    /// (`hot_key_share`).
    #[arg(long = "hot-key-share", value_name = "SHARE", default_value = "0.01",
          value_parser = parse_share)]
    pub hot_key_share: f64,
    /// mcrouter: the most keys hot at once (`hot_key_max`).
    #[arg(long = "hot-key-max", value_name = "N",
          default_value_t = nutconf::DEFAULT_HOT_KEY_MAX,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub hot_key_max: u32,
    /// mcrouter: one get in N (on average) is sampled to find hot keys (`hot_key_sample`).
    #[arg(long = "hot-key-sample", value_name = "N",
          default_value_t = nutconf::DEFAULT_HOT_KEY_SAMPLE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub hot_key_sample: u32,
    #[command(flatten)]
    pub mc_tls: mcrouter_tls::McTlsArgs,
}

fn parse_share(s: &str) -> Result<f64, String> {
    nutconf::parse_share(s).map_err(|e| format!("'{s}' {e}"))
}

impl RouteArgs {
    /// The `--hot-key*` options (mcrouter configs).
    pub fn hot_keys(&self) -> nutconf::HotKeys {
        nutconf::HotKeys {
            enabled: self.hot_keys,
            ttl_ms: self.hot_key_ttl_ms,
            share: self.hot_key_share,
            max: self.hot_key_max,
            sample: self.hot_key_sample,
        }
    }

    pub fn dialect(&self) -> Dialect {
        if self.config.is_some() || self.config_file.is_some() || self.config_str.is_some() {
            Dialect::Mcrouter
        } else {
            Dialect::Nutcracker
        }
    }

    /// The pid file: `--pid-file`, or nutcracker's `-p`.
    pub fn pid_path(&self, dialect: Dialect) -> Option<PathBuf> {
        match (&self.pid_file, &self.p, dialect) {
            (Some(p), _, _) => Some(p.clone()),
            (None, Some(p), Dialect::Nutcracker) => Some(PathBuf::from(p)),
            _ => None,
        }
    }

    /// The stats port, if any.
    pub fn stats_port(&self, dialect: Dialect) -> Option<u16> {
        match (self.stats_port, dialect) {
            (Some(port), _) => Some(port),
            (None, Dialect::Nutcracker) => Some(DEFAULT_STATS_PORT),
            (None, Dialect::Mcrouter) => None,
        }
    }
}
