//! Routing with an mcrouter JSON config (`--config file:PATH`, `--config-file`,
//! `--config-str`). The config becomes one generation of [`Shared`]: a listening pool per
//! listen address (clients arrive there; it has no servers) followed by one backend pool
//! per mcrouter pool, whose servers keep the config's order (the route tree names them by
//! index) and carry TKO state. Requests are planned by `routetree` and carried out by
//! `routetree::exec::Exec` in the worker (`worker/mcrouter.rs`); the pure parts of
//! carrying out a request (`exec`, `request`, `reply`, `lease`, `tko`) live in `routetree`.
//!
//! The asynclog file of a destination is the `spool` crate's; the worker and
//! `crate::asynclog` do the network I/O.

mod host_ips;
pub mod options;

use std::time::{Duration, Instant};

use crate::dns::Dns;
use crate::error::RouteError;
use crate::mcrouter_tls::server_security;
use crate::shared::{HostAddrs, McRoutes, PoolRt, Shared};
use crate::RouteArgs;
use nutconf::{Listen, Pool, PoolTls, ServerAddr, ServerSpec, DEFAULT_DISTRIBUTION, DEFAULT_HASH};
use routetree::timeouts::Timeouts;
use routetree::tko::TkoSettings;

/// mcrouter's default `--server-timeout`, ms.
pub const DEFAULT_SERVER_TIMEOUT_MS: u64 = 1000;
/// mcrouter's default `--timeouts-until-tko`.
pub const DEFAULT_TIMEOUTS_UNTIL_TKO: u32 = 3;
/// mcrouter's default `--probe-timeout-initial`, ms.
pub const DEFAULT_PROBE_INITIAL_MS: u64 = 10_000;
/// mcrouter's default `--probe-timeout-max`, ms.
pub const DEFAULT_PROBE_MAX_MS: u64 = 60_000;

/// The config's name (for messages) and its text.
pub fn source(args: &RouteArgs) -> Result<(String, String), RouteError> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|text| (path.to_owned(), text))
            .map_err(|e| {
                RouteError::McrouterSource(format!("cannot read config file '{path}': {e}"))
            })
    };
    match (&args.config, &args.config_file, &args.config_str) {
        (Some(config), _, _) => match config.strip_prefix("file:") {
            Some(path) => read(path),
            None if !looks_like_json(config) => Err(RouteError::McrouterSource(format!(
                "--config '{config}' is neither file:PATH nor inline JSON: a path needs \
                 mcrouter's file: prefix (--config file:{config})"
            ))),
            None => Ok(("--config".to_owned(), config.clone())),
        },
        (None, Some(path), _) => read(&path.to_string_lossy()),
        (None, None, Some(json)) => Ok(("--config-str".to_owned(), json.clone())),
        (None, None, None) => Err(RouteError::McrouterSource(
            "an mcrouter config is needed: --config file:PATH (or --config-file PATH, \
             --config-str JSON)"
                .into(),
        )),
    }
}

/// Runs `f` with what mcrouter expands JSONM with: the globals of the default routing prefix,
/// and `@import(path)` read relative to the config file's directory (`file:PATH` as given;
/// relative to the working directory for an inline config).
pub fn with_jsonm_env<T>(args: &RouteArgs, f: impl FnOnce(&routetree::jsonm::Env) -> T) -> T {
    let dir = config_path(args).and_then(|p| p.parent().map(std::path::Path::to_path_buf));
    let import = |path: &str| {
        let full = match (path.strip_prefix("file:"), &dir) {
            (Some(p), _) => std::path::PathBuf::from(p),
            (None, Some(dir)) => dir.join(path),
            (None, None) => std::path::PathBuf::from(path),
        };
        std::fs::read_to_string(&full).map_err(|e| format!("Can not read {}: {e}", full.display()))
    };
    let local_ips = host_ips::host_ips();
    // As mcrouter: a runtime vars file that is not there (yet) is no error.
    let vars = args.runtime_vars_file.as_ref().and_then(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        Some((p.to_string_lossy().into_owned(), text))
    });
    f(&routetree::jsonm::Env {
        globals: routetree::jsonm::route_globals(&args.route_prefix),
        import: &import,
        local_ips: Some(&local_ips),
        runtime_vars: vars
            .as_ref()
            .map(|(file, text)| routetree::jsonm::RuntimeVars { file, text }),
        ..Default::default()
    })
}

/// Inline config text: JSON(M) starts with an object, or with a comment before it.
fn looks_like_json(text: &str) -> bool {
    let text = text.trim_start();
    text.starts_with('{') || text.starts_with("//") || text.starts_with("/*")
}

/// The file to watch for changes, when the config came from one.
pub fn config_path(args: &RouteArgs) -> Option<std::path::PathBuf> {
    match (&args.config, &args.config_file) {
        (Some(c), _) => c.strip_prefix("file:").map(std::path::PathBuf::from),
        (None, Some(p)) => Some(p.clone()),
        _ => None,
    }
}

/// The addresses clients connect to: every `--listen-addresses` entry on every port, and
/// on every `--ssl-port` with TLS.
pub fn listen_addresses(args: &RouteArgs) -> Result<Vec<(Listen, PoolTls)>, RouteError> {
    let mut ports = args.port.clone();
    if let Some(p) = &args.p {
        ports.push(p.parse::<u16>().map_err(|_| {
            RouteError::Usage(format!("-p {p}: with an mcrouter config -p is the port"))
        })?);
    }
    let ssl_ports = &args.mc_tls.ssl_port;
    if ports.is_empty() && ssl_ports.is_empty() {
        return Err(RouteError::Usage(
            "no port to listen on: give -p/--port (or --ssl-port)".into(),
        ));
    }
    let mut out: Vec<(Listen, PoolTls)> = listen_on(args, &ports)
        .into_iter()
        .map(|l| (l, PoolTls::default()))
        .collect();
    if !ssl_ports.is_empty() {
        let tls = args.mc_tls.listener().map_err(RouteError::Tls)?;
        out.extend(
            listen_on(args, ssl_ports)
                .into_iter()
                .map(|l| (l, tls.clone())),
        );
    }
    Ok(out)
}

fn listen_on(args: &RouteArgs, ports: &[u16]) -> Vec<Listen> {
    let hosts: Vec<String> = match &args.listen_addresses {
        Some(list) => list
            .split(',')
            .map(|h| {
                h.trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned()
            })
            .filter(|h| !h.is_empty())
            .collect(),
        None => vec!["0.0.0.0".to_owned()],
    };
    let mut out = Vec::new();
    for &port in ports {
        for host in &hosts {
            out.push(Listen::Tcp {
                host: host.clone(),
                port,
            });
        }
    }
    out
}

/// TKO settings from the command line.
pub fn tko_settings(args: &RouteArgs) -> TkoSettings {
    TkoSettings {
        timeouts_until_tko: args.timeouts_until_tko,
        probe_initial_ms: args.probe_timeout_initial,
        probe_max_ms: args.probe_timeout_max.max(args.probe_timeout_initial),
    }
}

/// The timeout settings from the command line, from which each pool gets its own.
pub fn timeouts(args: &RouteArgs) -> Timeouts {
    Timeouts {
        server_ms: args.server_timeout,
        cross_region_ms: args.cross_region_timeout_ms,
        cross_cluster_ms: args.cross_cluster_timeout_ms,
        within_cluster_ms: args.within_cluster_timeout_ms,
    }
}

/// The servers' host names (IP literals aside), each once.
fn host_names(config: &routetree::Config) -> std::collections::BTreeSet<&str> {
    config
        .pools
        .iter()
        .flat_map(|p| &p.servers)
        .map(|s| s.host.as_str())
        .filter(|h| h.parse::<std::net::IpAddr>().is_err())
        .collect()
}

/// Reads and validates the config, looks its servers' host names up with `dns` and builds
/// a generation from it; the names' addresses come back to be compared at the next
/// refresh. `quiet`: the config's warnings were logged already (a DNS refresh).
pub fn load(
    args: &RouteArgs,
    threads: usize,
    started: Instant,
    dns: &mut Dns,
    quiet: bool,
) -> Result<(Shared, HostAddrs), RouteError> {
    let (name, text) = source(args)?;
    let config = with_jsonm_env(args, |env| {
        routetree::validate_with(&name, &text, &args.route_prefix, env)
    })?;
    if !quiet {
        for warning in &config.warnings {
            crate::log::warn(&format!("config: {warning}"));
        }
    }
    crate::mcrouter_tls::check_servers(&config).map_err(RouteError::Server)?;
    let mut names = HostAddrs::new();
    for host in host_names(&config) {
        names.insert(host.to_owned(), dns.lookup_host(host)?);
    }
    let refresh = (args.dns_refresh_ms > 0 && !names.is_empty())
        .then(|| Duration::from_millis(args.dns_refresh_ms));
    dns.schedule(refresh);
    let listens = listen_addresses(args)?;
    let mut pools = Vec::new();
    // One hot-key cache for every listen address: a write through one hides the value
    // from gets through the others.
    let mut hot = None;
    for (listen, tls) in &listens {
        let mut cfg = pool_cfg(
            format!("listen-{}", listen_name(listen)),
            listen.clone(),
            Vec::new(),
            None,
            args.item_size_max,
        );
        cfg.tls = tls.clone();
        cfg.big_value_split_threshold = args.big_value_split_threshold;
        cfg.big_value_batch_size = args.big_value_batch_size;
        cfg.big_value_hide_reply_flag = args.big_value_hide_reply_flag;
        cfg.hot_keys = args.hot_keys();
        // Hot-key caching stays off where values are split (a BigValueRoute as the option).
        if config.has_big_value() {
            cfg.hot_keys.enabled = false;
        }
        let mut rt = PoolRt::new(cfg, threads, started)?;
        match &hot {
            Some(h) => rt.hot = Some(std::sync::Arc::clone(h)),
            None => hot = rt.hot.clone(),
        }
        pools.push(std::sync::Arc::new(rt));
    }
    let timeouts = timeouts(args);
    let tko = tko_settings(args);
    let mut index = Vec::with_capacity(config.pools.len());
    for pool in &config.pools {
        let servers: Vec<ServerSpec> = pool
            .servers
            .iter()
            .map(|s| ServerSpec {
                pname: format!("{}:{}", s.host, s.port),
                addr: ServerAddr::Tcp {
                    host: s.host.clone(),
                    port: s.port,
                },
                weight: 1,
                name: None,
                ketama_name: format!("{}:{}", s.host, s.port),
                // Checked above.
                tls: server_security(s.security.as_deref()).unwrap_or(None),
            })
            .collect();
        let any_ssl = servers.iter().any(|s| s.tls == Some(true));
        let mut cfg = pool_cfg(
            pool.name.clone(),
            Listen::Tcp {
                host: String::new(),
                port: 0,
            },
            servers,
            Some(Duration::from_millis(
                timeouts.for_pool(pool, &args.route_prefix).max(1),
            )),
            args.item_size_max,
        );
        cfg.tls = args.mc_tls.to_servers(any_ssl).map_err(RouteError::Tls)?;
        cfg.server_max_inflight = max_outstanding(args);
        index.push(pools.len());
        pools.push(std::sync::Arc::new(PoolRt::backend(
            cfg, tko, threads, started, &names,
        )?));
    }
    // Spooled deletes are replayed over TLS to the servers that speak it.
    let mut tls_to = Vec::new();
    for (id, pool) in config.pools.iter().enumerate() {
        let rt = &pools[index[id]];
        for (s, server) in pool.servers.iter().enumerate() {
            if let Some((tls, name)) = rt.server_tls(s) {
                let dest = format!("{}:{}", server.host, server.port);
                tls_to.push((dest, (tls.clone(), name.to_owned())));
            }
        }
    }
    crate::asynclog::set_tls_destinations(tls_to);
    let big_values = config.has_big_value();
    let shared = Shared {
        listening: listens.len(),
        pools,
        mcrouter: Some(std::sync::Arc::new(McRoutes {
            config,
            prefix: args.route_prefix.clone(),
            pools: index,
            leases: Default::default(),
            loaded: Instant::now(),
            config_file: config_file(args),
            timeouts,
            options: options::startup_options(args, threads),
            big_values,
        })),
    };
    Ok((shared, names))
}

/// The config file as mcrouter's `config_file` command names it: `--config file:PATH`'s
/// path, else `--config-file`.
fn config_file(args: &RouteArgs) -> Option<String> {
    match (&args.config, &args.config_file) {
        (Some(config), _) => config.strip_prefix("file:").map(str::to_owned),
        (None, Some(path)) => Some(path.to_string_lossy().into_owned()),
        (None, None) => None,
    }
}

/// Requests a server connection may hold before further ones fail: mcrouter sends at most
/// `--target-max-inflight-requests` and queues `--target-max-pending-requests` more, then
/// fails requests fast; memfleet writes them all out, so its limit is the sum (0: none).
fn max_outstanding(args: &RouteArgs) -> u32 {
    match args.target_max_inflight_requests {
        0 => 0,
        n => n.saturating_add(args.target_max_pending_requests),
    }
}

/// `host (old -> new)` for every name whose address changed.
pub fn changed_hosts(old: &HostAddrs, new: &HostAddrs) -> Vec<String> {
    new.iter()
        .filter_map(|(host, ip)| match old.get(host) {
            Some(was) if was != ip => Some(format!("{host} ({was} -> {ip})")),
            None => Some(format!("{host} (new: {ip})")),
            _ => None,
        })
        .collect()
}

fn listen_name(listen: &Listen) -> String {
    match listen {
        Listen::Tcp { host, port } => format!("{host}:{port}"),
        Listen::Unix { path, .. } => path.clone(),
    }
}

fn pool_cfg(
    name: String,
    listen: Listen,
    servers: Vec<ServerSpec>,
    timeout: Option<Duration>,
    item_size_max: u32,
) -> Pool {
    Pool {
        name,
        listen,
        hash: DEFAULT_HASH,
        hash_tag: None,
        distribution: DEFAULT_DISTRIBUTION,
        timeout,
        backlog: 1024,
        client_connections: 0,
        redis: false,
        redis_auth: None,
        redis_db: 0,
        redis_topology: nutconf::RedisTopology::Fixed,
        redis_read_from: nutconf::ReadFrom::Primary,
        redis_backend_user: None,
        redis_backend_auth: None,
        redis_sentinel_user: None,
        redis_sentinel_auth: None,
        preconnect: false,
        tcpkeepalive: false,
        reuseport: false,
        auto_eject_hosts: false,
        server_connections: 1,
        server_retry_timeout: Duration::from_secs(30),
        server_failure_limit: 2,
        servers,
        client_auth: None,
        tls: Default::default(),
        item_size_max,
        big_value_split_threshold: 0,
        big_value_batch_size: nutconf::DEFAULT_BIG_VALUE_BATCH_SIZE,
        big_value_hide_reply_flag: false,
        server_max_inflight: 0,
        hot_keys: Default::default(),
        active_req_limit: 0,
        rates: Default::default(),
    }
}
