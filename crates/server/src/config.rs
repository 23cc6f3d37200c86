//! `memfleet serve` settings: memcached's own command-line flags, so memfleet can replace memcached
//! in an init script or a test harness unchanged.

use clap::{ArgAction, Args};

/// The version string clients see (`version`, `stats`); see [`proto::reply::VERSION`].
pub const VERSION: &str = proto::reply::VERSION;

/// memcached-compatible flags. Long names follow memcached 1.6 (`--port`, `--memory-limit`, ...).
#[derive(Args, Debug, Clone)]
#[command(disable_version_flag = true)]
pub struct ServeArgs {
    /// TCP port to listen on (0 = off, -1 = any free port) [default: 11211, or -U's port]
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    pub port: Option<i32>,
    /// UDP port to listen on (0 = off, -1 = any free port)
    #[arg(
        short = 'U',
        long = "udp-port",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub udp_port: i32,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket")]
    pub unix_socket: Option<String>,
    /// access mask for the UNIX socket, in octal
    #[arg(short = 'a', long = "unix-mask", default_value = "700")]
    pub unix_mask: String,
    /// enable the ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// interface(s) to listen on: repeat or separate with commas; `addr:port` overrides -p;
    /// with -Z, a `notls:` prefix makes that listener plain
    #[arg(short = 'l', long = "listen", action = ArgAction::Append)]
    pub listen: Vec<String>,
    /// run as a daemon
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// maximize core file limit (accepted for compatibility)
    #[arg(short = 'r', long = "enable-coredumps")]
    pub enable_coredumps: bool,
    /// assume identity of <username> (only when run as root)
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// item memory in megabytes
    #[arg(
        short = 'm',
        long = "memory-limit",
        alias = "memory",
        default_value_t = 64
    )]
    pub memory_limit_mb: u64,
    /// return an error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// max simultaneous connections
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,
    /// lock down all paged memory (accepted for compatibility)
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// verbose; -vv also prints client commands
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
    /// print version and exit
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// print the license and exit
    #[arg(short = 'i', long = "license")]
    pub license: bool,
    /// save PID in <file>
    #[arg(short = 'P', long = "pidfile")]
    pub pidfile: Option<String>,
    /// slab growth factor (accepted for compatibility; memfleet has no slab classes)
    #[arg(short = 'f', long = "slab-growth-factor")]
    pub slab_growth_factor: Option<f64>,
    /// min slab chunk size (accepted for compatibility)
    #[arg(short = 'n', long = "slab-min-size")]
    pub slab_min_size: Option<u64>,
    /// use large pages (accepted for compatibility)
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// number of worker threads
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    pub threads: usize,
    /// max requests per event before yielding to other connections
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    pub max_reqs_per_event: usize,
    /// disable CAS (accepted; CAS values are still returned)
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// listen backlog
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    pub backlog: i32,
    /// protocol: auto (negotiated per connection from its first byte), ascii or binary
    /// (default auto; binary with -S, ascii with -Y)
    #[arg(short = 'B', long = "protocol")]
    pub protocol: Option<String>,
    /// SASL authentication (binary protocol only): users from the file named by
    /// $MEMCACHED_SASL_PWDB (`user:password` lines)
    #[arg(short = 'S', long = "enable-sasl")]
    pub sasl: bool,
    /// max item size, e.g. 1m, 512k, 2097152 (min 1k, max 1024m)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    pub max_item_size: String,
    /// disable flush_all
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// disable stats cachedump (accepted for compatibility)
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// disable watch (accepted for compatibility)
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// per-prefix stats delimiter (accepted for compatibility)
    #[arg(short = 'D')]
    pub prefix_delimiter: Option<String>,
    /// warm restart: on SIGUSR1 save items to <file>; start from it with the same -m and -I
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<String>,
    /// password file of `user:password` lines: text-protocol clients must log in first
    #[arg(short = 'Y', long = "auth-file")]
    pub auth_file: Option<String>,
    /// enable TLS on the TCP listeners (-o ssl_chain_cert=..,ssl_key=.. ; see docs/operations.md)
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// comma separated extended options: idle_timeout=SECONDS, io_engine=uring|epoll,
    /// metrics=ADDR:PORT (Prometheus /metrics), latency=on|off, hotkeys=RATE (sample one
    /// request in RATE for `stats hotkeys`), ssl_chain_cert=FILE, ssl_key=FILE,
    /// ssl_ca_cert=FILE, ssl_verify_mode=0-3, ssl_min_version=2|3 (TLS 1.2, 1.3),
    /// ssl_wbuf_size, ssl_session_cache, ssl_keyformat, ssl_ciphers (ignored). memcached's
    /// tuning knobs (hashpower, slab_*, lru_*, modern, ...) are accepted and ignored;
    /// ext_path=FILE:SIZE (repeatable), ext_page_size, ext_wbuf_size (MB), ext_item_size,
    /// ext_low_ttl, ext_recache_rate put evicted items on flash (docs/storage.md, "Flash"),
    /// ext_item_age=SECONDS idle ones too, ahead of eviction, read for text gets by
    /// ext_threads I/O threads (default 1), ext_io_depth reads under way per connection
    /// (default 16), ext_compact_under, ext_max_frag, ext_drop_unread and
    /// ext_drop_under tune compaction; other ext_* options, temporary_ttl (other than 0) and proxy_config are refused, as
    /// they would change what is kept; other unknown options are ignored with a warning
    #[arg(short = 'o', long = "extended", action = ArgAction::Append)]
    pub extended: Vec<String>,
}

/// `binding_protocol` values, as `stats settings` prints them.
pub const AUTO: &str = "auto-negotiate";
pub const ASCII: &str = "ascii";
pub const BINARY: &str = "binary";

/// Settings after validation, in the units the server uses.
#[derive(Debug, Clone)]
pub struct Settings {
    pub tcp: Vec<std::net::SocketAddr>,
    /// Those of `tcp` given as `notls:` (plain even with -Z).
    pub notls: Vec<std::net::SocketAddr>,
    pub udp: Vec<std::net::SocketAddr>,
    pub unix_socket: Option<(String, u32)>,
    pub mem_limit: usize,
    pub item_size_max: usize,
    pub conn_limit: usize,
    pub threads: usize,
    pub backlog: i32,
    pub verbose: u8,
    pub enable_shutdown: bool,
    pub disable_flush_all: bool,
    pub evictions: bool,
    /// `-B` as `stats settings` names it: "auto-negotiate", "ascii" or "binary".
    pub binding_protocol: &'static str,
    /// `-S`: binary connections must authenticate (SASL PLAIN) first.
    pub sasl: bool,
    /// `-R`, at least 1; a connection's budget per turn is counted in a u32 (`Conn::budget`).
    pub max_reqs_per_event: u32,
    pub idle_timeout: u32,
    /// `-W` turns `watch` off.
    pub watch_enabled: bool,
    /// `-o watcher_logbuf_size=KB`: bytes each `watch` connection may have queued.
    pub watcher_buf: usize,
    /// `-o track_max_keys=N`, `-o track_total_keys=N`: near-cache registrations per
    /// listener and in all (`crate::tracking`).
    pub track_max_keys: usize,
    pub track_total_keys: usize,
    pub daemon: bool,
    pub pidfile: Option<String>,
    pub user: Option<String>,
    /// `-e`: where items are saved on SIGUSR1 and restored from at start-up.
    pub memory_file: Option<String>,
    /// `-Y`: the password file clients log in with.
    pub auth_file: Option<String>,
    /// `-o` options we recognised and applied, for `stats settings`.
    pub warnings: Vec<String>,
    /// `-Z` and the `-o ssl_*` options.
    pub tls: crate::tls::options::TlsOptions,
    /// `-o metrics=ADDR:PORT`: where `/metrics` is served (off by default).
    pub metrics: Option<String>,
    /// `-o latency=on|off`: per-command latency histograms (on by default).
    pub latency: bool,
    /// `-o hotkeys=RATE`: one request in RATE feeds the hot-key sketch (0, the default: off).
    pub hotkeys_rate: u32,
    /// `-o io_engine=auto|uring|epoll`: the workers' event loop as asked for; `serve`
    /// replaces it with the one that runs (`engine::resolve`).
    pub io_engine: crate::engine::IoEngine,
    /// What the io_uring loop may use of the kernel's io_uring (set by `serve` with
    /// `io_engine`).
    pub uring_kernel: crate::engine::UringKernel,
    /// `-o ext_path=...` and the other `ext_*` options: the flash tier, if any.
    pub flash: Option<crate::flash::options::FlashOptions>,
}

impl ServeArgs {
    /// Validates flags the way memcached does and resolves listen addresses.
    pub fn settings(&self) -> Result<Settings, String> {
        let item_size_max = crate::size::parse_size(&self.max_item_size)?;
        if item_size_max < 1024 {
            return Err("Item max size cannot be less than 1024 bytes.".into());
        }
        if item_size_max > 1 << 30 {
            return Err("Cannot set item size limit higher than 1 gigabyte.".into());
        }
        let mem_limit = (self.memory_limit_mb as usize)
            .checked_mul(1 << 20)
            .ok_or("memory limit too large")?;
        if item_size_max > mem_limit / 2 && mem_limit > 0 {
            return Err("Cannot set item size limit higher than 1/2 of memory max.".to_string());
        }
        if self.threads == 0 {
            return Err("Number of threads must be greater than 0".into());
        }
        // As memcached: -Y logs in through the text protocol only, so it implies -B ascii and
        // refuses any other -B given with it; SASL implies the binary protocol unless -B says
        // otherwise.
        if self.auth_file.is_some() && self.protocol.as_deref().is_some_and(|p| p != "ascii") {
            return Err(
                "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."
                    .into(),
            );
        }
        let binding_protocol = match self.protocol.as_deref() {
            None if self.auth_file.is_some() => ASCII,
            None if self.sasl => BINARY,
            None | Some("auto") => AUTO,
            Some("ascii") => ASCII,
            Some("binary") => BINARY,
            Some(other) => return Err(format!("Invalid value for binding protocol: {other}")),
        };
        if self.sasl && binding_protocol != BINARY {
            return Err("You cannot allow the ASCII protocol while using SASL.".into());
        }
        let unix_mask = u32::from_str_radix(&self.unix_mask, 8)
            .map_err(|_| format!("invalid unix socket mask '{}'", self.unix_mask))?;

        let mut warnings = Vec::new();
        let mut idle_timeout = 0;
        let mut watcher_buf = crate::watch::DEFAULT_BUF;
        let mut track_max_keys = crate::tracking::DEFAULT_MAX_KEYS;
        let mut track_total_keys = crate::tracking::DEFAULT_TOTAL_KEYS;
        let mut tls = crate::tls::options::TlsOptions {
            enabled: self.enable_ssl,
            ..Default::default()
        };
        let mut metrics = None;
        let mut latency = true;
        let mut hotkeys_rate = 0;
        let mut io_engine = crate::engine::IoEngine::default();
        let mut flash = None;
        for opt in self.extended.iter().flat_map(|o| o.split(',')) {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            if let Some(applied) = tls.apply(name, value, &mut warnings) {
                applied?;
                continue;
            }
            if crate::flash::options::apply(&mut flash, name, value)? {
                continue;
            }
            match name {
                "" => {}
                // Items with a short TTL kept apart from eviction: ignoring it would evict
                // what the operator asked to be kept.
                "temporary_ttl" if value.parse::<u32>() != Ok(0) => {
                    return Err(format!(
                        "-o temporary_ttl={value}: memfleet evicts short-TTL items like any \
                         other; start without it (or with temporary_ttl=0)"
                    ))
                }
                "proxy_config" => {
                    return Err("-o proxy_config: memfleet serve is a cache, not a proxy; \
                         run `memfleet route` for memcached's proxy"
                        .to_string())
                }
                "idle_timeout" => {
                    idle_timeout = value
                        .parse()
                        .map_err(|_| format!("invalid idle_timeout '{value}'"))?
                }
                "watcher_logbuf_size" => {
                    let kb: usize = value
                        .parse()
                        .map_err(|_| format!("invalid watcher_logbuf_size '{value}'"))?;
                    watcher_buf = kb.saturating_mul(1024);
                }
                "track_max_keys" => {
                    track_max_keys = value
                        .parse()
                        .map_err(|_| format!("invalid track_max_keys '{value}'"))?
                }
                "track_total_keys" => {
                    track_total_keys = value
                        .parse()
                        .map_err(|_| format!("invalid track_total_keys '{value}'"))?
                }
                "metrics" if value.is_empty() => {
                    return Err("metrics needs an address: -o metrics=ADDR:PORT".into())
                }
                "metrics" => metrics = Some(value.to_string()),
                "latency" => {
                    latency = match value {
                        "on" | "" => true,
                        "off" => false,
                        _ => return Err(format!("invalid latency '{value}' (on or off)")),
                    }
                }
                "hotkeys" => {
                    hotkeys_rate = value.parse().map_err(|_| {
                        format!("invalid hotkeys '{value}': sample one request in RATE (0: off)")
                    })?
                }
                "io_engine" => io_engine = crate::engine::IoEngine::parse(value)?,
                // memcached tuning knobs that have no meaning for memfleet's engine.
                "maxconns_fast"
                | "no_maxconns_fast"
                | "hashpower"
                | "modern"
                | "no_modern"
                | "lru_crawler"
                | "no_lru_crawler"
                | "lru_maintainer"
                | "no_lru_maintainer"
                | "hash_algorithm"
                | "slab_reassign"
                | "slab_automove"
                | "tail_repair_time"
                | "lru_crawler_sleep"
                | "lru_crawler_tocrawl"
                | "hot_lru_pct"
                | "warm_lru_pct"
                | "hot_max_factor"
                | "warm_max_factor"
                | "temporary_ttl"
                | "track_sizes"
                | "no_hashexpand"
                | "read_buf_mem_limit"
                | "slab_chunk_max"
                | "worker_logbuf_size" => {}
                _ => warnings.push(format!("unknown -o option '{name}' ignored")),
            }
        }

        crate::flash::options::validate(&flash)?;

        let mut tcp = Vec::new();
        let mut notls = Vec::new();
        let mut udp = Vec::new();
        if self.unix_socket.is_none() {
            let hosts: Vec<String> = if self.listen.is_empty() {
                vec!["0.0.0.0".to_string()]
            } else {
                self.listen
                    .iter()
                    .flat_map(|l| l.split(','))
                    .map(str::to_string)
                    .collect()
            };
            // As memcached: -U without -p puts TCP on the UDP port too.
            let tcp_port = match self.port {
                Some(p) => p,
                None if self.udp_port != 0 => self.udp_port,
                None => 11211,
            };
            let tcp_port = bind_port(tcp_port)?;
            let udp_port = bind_port(self.udp_port)?;
            for host in hosts {
                let (host, plain) = match host.strip_prefix("notls:") {
                    Some(h) => (h.to_string(), true),
                    None => (host, false),
                };
                let (addr, explicit) = split_host_port(&host)?;
                // `host:port` overrides -p for that address.
                if let Some(port) = explicit.or(tcp_port) {
                    let addrs = resolve(&addr, port)?;
                    if plain {
                        notls.extend(&addrs);
                    }
                    tcp.extend(addrs);
                }
                if let Some(port) = udp_port {
                    udp.extend(resolve(&addr, port)?);
                }
            }
        }
        if self.auth_file.is_some() && !udp.is_empty() {
            return Err(
                "Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into(),
            );
        }
        tls.validate(!tcp.is_empty())?;
        Ok(Settings {
            tcp,
            notls,
            udp,
            unix_socket: self.unix_socket.clone().map(|p| (p, unix_mask)),
            mem_limit,
            item_size_max,
            conn_limit: self.conn_limit.max(1),
            threads: self.threads,
            backlog: self.backlog,
            verbose: self.verbose,
            enable_shutdown: self.enable_shutdown,
            disable_flush_all: self.disable_flush_all,
            evictions: !self.disable_evictions,
            binding_protocol,
            sasl: self.sasl,
            max_reqs_per_event: u32::try_from(self.max_reqs_per_event.max(1)).unwrap_or(u32::MAX),
            idle_timeout,
            watch_enabled: !self.disable_watch,
            watcher_buf,
            track_max_keys,
            track_total_keys,
            daemon: self.daemon,
            pidfile: self.pidfile.clone(),
            user: self.user.clone(),
            memory_file: self.memory_file.clone(),
            auth_file: self.auth_file.clone(),
            warnings,
            tls,
            metrics,
            latency,
            hotkeys_rate,
            io_engine,
            uring_kernel: crate::engine::UringKernel::default(),
            flash,
        })
    }
}

/// A -p/-U value as the port to bind: None for 0 (off), Some(0) for -1 (any free port, which
/// `MEMCACHED_PORT_FILENAME` then reports), as memcached.
fn bind_port(port: i32) -> Result<Option<u16>, String> {
    match port {
        0 => Ok(None),
        -1 => Ok(Some(0)),
        1..=65535 => Ok(Some(port as u16)),
        _ => Err(format!("ERROR: Invalid port number {port}.")),
    }
}

/// Splits `host`, `host:port`, `[v6]:port` or a bare IPv6 address; the port if given.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    let bad = || format!("invalid listen address '{s}'");
    if let Some(rest) = s.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or_else(bad)?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| bad())?),
            None if tail.is_empty() => None,
            None => return Err(bad()),
        };
        return Ok((host.to_string(), port));
    }
    match s.matches(':').count() {
        0 => Ok((s.to_string(), None)),
        1 => {
            let (h, p) = s.split_once(':').ok_or_else(bad)?;
            Ok((h.to_string(), Some(p.parse().map_err(|_| bad())?)))
        }
        _ => Ok((s.to_string(), None)),
    }
}

fn resolve(host: &str, port: u16) -> Result<Vec<std::net::SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let addrs: Vec<_> = format!("{host}:{port}")
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve listen address '{host}': {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("no address for '{host}'"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn settings(args: &[&str]) -> Result<Settings, String> {
        let mut argv = vec!["memfleet"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .serve
            .settings()
    }

    #[test]
    fn defaults_match_memcached() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.mem_limit, 64 << 20);
        assert_eq!(s.item_size_max, 1 << 20);
        assert_eq!(s.conn_limit, 1024);
        assert_eq!(s.threads, 4);
        assert_eq!(s.tcp[0].port(), 11211);
        assert!(s.udp.is_empty());
        assert_eq!(s.io_engine, crate::engine::IoEngine::Auto);
    }

    #[test]
    fn memcached_style_flags() {
        let s = settings(&[
            "-p",
            "12000",
            "-U",
            "12001",
            "-l",
            "127.0.0.1",
            "-m",
            "128",
            "-c",
            "10",
            "-t",
            "2",
            "-I",
            "2m",
            "-vv",
            "-o",
            "idle_timeout=5,frobnicate",
        ])
        .unwrap();
        assert_eq!(s.tcp, vec!["127.0.0.1:12000".parse().unwrap()]);
        assert_eq!(s.udp, vec!["127.0.0.1:12001".parse().unwrap()]);
        assert_eq!(s.mem_limit, 128 << 20);
        assert_eq!(s.item_size_max, 2 << 20);
        assert_eq!(s.verbose, 2);
        assert_eq!(s.idle_timeout, 5);
        assert_eq!(s.warnings.len(), 1);
    }

    #[test]
    fn telemetry_options() {
        let s = settings(&[]).unwrap();
        assert_eq!((s.metrics, s.latency, s.hotkeys_rate), (None, true, 0));
        let s = settings(&["-o", "metrics=127.0.0.1:9150,hotkeys=100,latency=off"]).unwrap();
        assert_eq!(s.metrics.as_deref(), Some("127.0.0.1:9150"));
        assert_eq!((s.latency, s.hotkeys_rate), (false, 100));
        assert!(s.warnings.is_empty());
        assert!(settings(&["-o", "metrics"]).is_err());
        assert!(settings(&["-o", "hotkeys=-1"]).is_err());
        assert!(settings(&["-o", "latency=maybe"]).is_err());
    }

    #[test]
    fn several_listen_addresses_and_ports() {
        let s = settings(&[
            "-p",
            "12000",
            "-l",
            "127.0.0.1,127.0.0.2:13000",
            "-l",
            "[::1]:14000",
        ])
        .unwrap();
        let ports: Vec<u16> = s.tcp.iter().map(|a| a.port()).collect();
        assert_eq!(ports, vec![12000, 13000, 14000]);
    }

    #[test]
    fn minus_one_is_any_free_port_and_zero_is_off() {
        let s = settings(&["-p", "-1", "-U", "-1", "-l", "127.0.0.1"]).unwrap();
        assert_eq!(s.tcp, vec!["127.0.0.1:0".parse().unwrap()]);
        assert_eq!(s.udp, vec!["127.0.0.1:0".parse().unwrap()]);
        let s = settings(&["-p", "0", "-U", "12001", "-l", "127.0.0.1"]).unwrap();
        assert!(s.tcp.is_empty());
        assert!(settings(&["-p", "-2"]).is_err());
        assert!(settings(&["-p", "65536"]).is_err());
    }

    #[test]
    fn udp_port_without_tcp_port_serves_tcp_there_too() {
        let s = settings(&["-U", "12001", "-l", "127.0.0.1"]).unwrap();
        assert_eq!(s.tcp, vec!["127.0.0.1:12001".parse().unwrap()]);
        let s = settings(&["-U", "-1", "-l", "127.0.0.1"]).unwrap();
        assert_eq!(s.tcp, vec!["127.0.0.1:0".parse().unwrap()]);
    }

    #[test]
    fn auth_file_implies_ascii_and_refuses_other_protocols() {
        let s = settings(&["-Y", "/dev/null"]).unwrap();
        assert_eq!(s.binding_protocol, "ascii");
        assert_eq!(settings(&[]).unwrap().binding_protocol, "auto-negotiate");
        assert!(settings(&["-Y", "/dev/null", "-B", "auto"]).is_err());
        assert!(settings(&["-Y", "/dev/null", "-B", "ascii"]).is_ok());
    }

    #[test]
    fn unix_socket_disables_network() {
        let s = settings(&["-s", "/tmp/x.sock", "-a", "766"]).unwrap();
        assert!(s.tcp.is_empty());
        assert_eq!(s.unix_socket, Some(("/tmp/x.sock".to_string(), 0o766)));
    }

    #[test]
    fn protocol_choice_as_memcached() {
        let proto = |args: &[&str]| settings(args).unwrap().binding_protocol;
        assert_eq!(proto(&[]), AUTO);
        assert_eq!(proto(&["-B", "ascii"]), ASCII);
        assert_eq!(proto(&["-B", "binary"]), BINARY);
        assert_eq!(proto(&["-S"]), BINARY);
        assert_eq!(proto(&["-S", "-B", "binary"]), BINARY);
    }

    #[test]
    fn rejects_what_memcached_rejects() {
        assert!(settings(&["-I", "512"]).is_err());
        assert!(settings(&["-I", "2g"]).is_err());
        assert!(settings(&["-m", "1", "-I", "1m"]).is_err());
        assert!(settings(&["-B", "bin"]).is_err());
        assert!(settings(&["-S", "-B", "auto"]).is_err());
        assert!(settings(&["-S", "-B", "ascii"]).is_err());
        assert!(settings(&["-t", "0"]).is_err());
    }
}
