//! nutcracker.yml (twemproxy 0.5) configuration: parsing, defaults and validation.
//!
//! A file that `nutcracker -t` accepts parses here to the same pools, and the files it
//! rejects are rejected with the same reason, in the same words where twemproxy has them
//! (`directive "hash" is not a valid hash`). Two deliberate differences:
//! - host names are not resolved here (twemproxy resolves `listen:` while parsing); the
//!   router resolves when it binds or connects, so an unresolvable name fails there;
//! - memfleet-only directives (`client_auth`, the `tls*` and `listen_tls*` ones) are
//!   accepted, and `reuseport`
//!   from twemproxy's master branch too.
//!
//! YAML is read with `yaml-rust2` at the token and event level, as twemproxy does with
//! libyaml: scalars stay raw strings (so `preconnect: yes` is an error, not a bool), and
//! flow style, anchors, aliases, tags and `---`/`...` markers are refused like nutcracker
//! refuses them. A serde-based reader would lose both.

use std::fmt;
use std::time::Duration;

use ring::{Distribution, Hash, Ring, KETAMA_DEFAULT_PORT};
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, Scanner, TokenType};

/// twemproxy defaults (nc_conf.h).
pub const DEFAULT_HASH: Hash = Hash::Fnv1a64;
pub const DEFAULT_DISTRIBUTION: Distribution = Distribution::Ketama;
pub const DEFAULT_BACKLOG: u32 = 512;
pub const DEFAULT_SERVER_CONNECTIONS: u32 = 1;
pub const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u32 = 30_000;
pub const DEFAULT_SERVER_FAILURE_LIMIT: u32 = 2;

/// A parsed, validated configuration: pools in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub pools: Vec<Pool>,
    /// Pools whose servers come (partly) from DNS; their `servers` hold only the fixed
    /// entries until `dns::expand` adds the resolved ones.
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

/// One DNS `servers:` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsName {
    pub lookup: DnsLookup,
    pub weight: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsLookup {
    /// `dns:HOST:PORT:WEIGHT`: every A/AAAA address of HOST, at PORT.
    Addresses { host: String, port: u16 },
    /// `srv:NAME:WEIGHT`: every target and port of the SRV records of NAME.
    Srv { name: String },
}

/// `dns_refresh_ms` when a pool has DNS servers and does not say.
pub const DEFAULT_DNS_REFRESH_MS: u32 = 30_000;

/// Where a pool accepts clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `host:port`; `host` is unresolved, as written.
    Tcp { host: String, port: u16 },
    /// `/path/to.sock [mode]`; `mode` is the octal permission, `None` when absent or 0.
    Unix { path: String, mode: Option<u32> },
}

/// Where a backend lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp { host: String, port: u16 },
    Unix { path: String },
}

/// One `servers:` entry: `host:port:weight [name]` or `/path:weight [name]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// The entry without its node name (twemproxy's `pname`, used in stats).
    pub pname: String,
    pub addr: ServerAddr,
    pub weight: u32,
    /// Node name, when one was given.
    pub name: Option<String>,
    /// The string ketama hashes for this server (twemproxy's `server->name`): the node
    /// name, else the address, plus `:port` unless the port is 11211. Also the identity
    /// that must be unique within a pool.
    pub ketama_name: String,
}

impl ServerSpec {
    /// The ring entry for this server, placed exactly as twemproxy places it.
    pub fn ring_server(&self) -> ring::Server {
        let (host, port) = match &self.addr {
            ServerAddr::Tcp { host, port } => (host.clone(), *port),
            ServerAddr::Unix { path } => (path.clone(), 0),
        };
        ring::Server::new(host, port, self.weight).named(self.ketama_name.clone())
    }
}

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
}

/// A pool's TLS directives (memfleet extension; twemproxy has none, see its issue #647).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolTls {
    /// `tls: true`: connections to the servers speak TLS.
    pub enabled: Option<bool>,
    /// `tls_ca_file`: PEM CAs the servers' certificates must chain to (default: the system's).
    pub ca_file: Option<String>,
    /// `tls_cert_file` / `tls_key_file`: the router's client certificate (mutual TLS).
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    /// `tls_server_name`: name sent as SNI and verified (default: each server's host).
    pub server_name: Option<String>,
    /// `listen_tls_cert_file` / `listen_tls_key_file`: the listener speaks TLS.
    pub listen_cert_file: Option<String>,
    pub listen_key_file: Option<String>,
    /// `listen_tls_ca_file`: clients must present a certificate from these CAs.
    pub listen_ca_file: Option<String>,
}

impl PoolTls {
    pub fn to_servers(&self) -> bool {
        self.enabled == Some(true)
    }

    /// Directives that only make sense together.
    fn check(&self) -> Result<(), &'static str> {
        let server_side = self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name.is_some();
        if server_side && !self.to_servers() {
            return Err("has tls_* directives without \"tls: true\"");
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("needs both \"tls_cert_file:\" and \"tls_key_file:\"");
        }
        if self.listen_cert_file.is_some() != self.listen_key_file.is_some() {
            return Err("needs both \"listen_tls_cert_file:\" and \"listen_tls_key_file:\"");
        }
        if self.listen_ca_file.is_some() && self.listen_cert_file.is_none() {
            return Err("has \"listen_tls_ca_file:\" without \"listen_tls_cert_file:\"");
        }
        Ok(())
    }
}

impl Pool {
    /// The pool's consistent-hash ring, all servers live.
    pub fn ring(&self) -> Ring {
        let servers = self.servers.iter().map(ServerSpec::ring_server).collect();
        Ring::new(servers, self.distribution, self.hash).with_hash_tag(self.hash_tag)
    }
}

/// Why a configuration was refused. `Display` gives one line naming the pool,
/// directive and YAML line where known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not YAML at all.
    Yaml {
        line: usize,
        col: usize,
        msg: String,
    },
    /// YAML that nutcracker refuses (flow style, anchors, wrong nesting, ...).
    Structure { line: usize, msg: String },
    /// A bad directive value: `directive "<key>" <msg>`.
    Directive {
        pool: String,
        key: String,
        line: usize,
        msg: String,
    },
    /// A pool that fails validation after parsing.
    Pool { pool: String, msg: String },
    /// A whole-file problem (no pools, duplicate listen addresses, ...).
    File { msg: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Yaml { line, col, msg } => {
                write!(f, "conf: invalid YAML at line {line} column {col}: {msg}")
            }
            ConfigError::Structure { line, msg } => write!(f, "conf: line {line}: {msg}"),
            ConfigError::Directive {
                pool,
                key,
                line,
                msg,
            } => write!(
                f,
                "conf: pool '{pool}' line {line}: directive \"{key}\" {msg}"
            ),
            ConfigError::Pool { pool, msg } => write!(f, "conf: pool '{pool}' {msg}"),
            ConfigError::File { msg } => write!(f, "conf: {msg}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses and validates nutcracker.yml text.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        check_tokens(text)?;
        let pools = parse_pools(text)?;
        validate(pools)
    }

    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }
}

fn line_of(m: &Marker) -> usize {
    m.line()
}

/// Refuses the YAML features nutcracker's token pass refuses.
fn check_tokens(text: &str) -> Result<(), ConfigError> {
    let mut scanner = Scanner::new(text.chars());
    for token in &mut scanner {
        let what = match token.1 {
            TokenType::VersionDirective(..) => "a %YAML directive",
            TokenType::TagDirective(..) => "a %TAG directive",
            TokenType::DocumentStart => "a document start marker '---'",
            TokenType::DocumentEnd => "a document end marker '...'",
            TokenType::FlowSequenceStart
            | TokenType::FlowSequenceEnd
            | TokenType::FlowMappingStart
            | TokenType::FlowMappingEnd
            | TokenType::FlowEntry => {
                "flow style ([...], {...}); quote the value or use block style"
            }
            TokenType::Alias(_) => "an alias",
            TokenType::Anchor(_) => "an anchor",
            TokenType::Tag(..) => "a tag",
            _ => continue,
        };
        return Err(ConfigError::Structure {
            line: line_of(&token.0),
            msg: format!("{what} is not allowed"),
        });
    }
    match scanner.get_error() {
        Some(e) => Err(yaml_error(&e)),
        None => Ok(()),
    }
}

fn yaml_error(e: &yaml_rust2::ScanError) -> ConfigError {
    ConfigError::Yaml {
        line: e.marker().line(),
        col: e.marker().col() + 1,
        msg: e.info().to_owned(),
    }
}

struct Events<'a> {
    parser: Parser<std::str::Chars<'a>>,
}

impl Events<'_> {
    fn next(&mut self) -> Result<(Event, Marker), ConfigError> {
        self.parser.next_token().map_err(|e| yaml_error(&e))
    }
}

/// Directive values of one pool as written, before defaults.
#[derive(Default)]
struct RawPool {
    name: String,
    listen: Option<Listen>,
    hash: Option<Hash>,
    hash_tag: Option<[u8; 2]>,
    distribution: Option<Distribution>,
    timeout: Option<u32>,
    backlog: Option<u32>,
    client_connections: Option<u32>,
    redis: Option<bool>,
    redis_auth: Option<String>,
    redis_db: Option<u32>,
    preconnect: Option<bool>,
    tcpkeepalive: Option<bool>,
    reuseport: Option<bool>,
    auto_eject_hosts: Option<bool>,
    server_connections: Option<u32>,
    server_retry_timeout: Option<u32>,
    server_failure_limit: Option<u32>,
    servers: Vec<ServerSpec>,
    client_auth: Option<String>,
    tls: PoolTls,
    dns: Vec<DnsName>,
    dns_refresh_ms: Option<u32>,
}

fn parse_pools(text: &str) -> Result<Vec<RawPool>, ConfigError> {
    let mut ev = Events {
        parser: Parser::new_from_str(text),
    };
    let structure = |m: &Marker, msg: &str| ConfigError::Structure {
        line: line_of(m),
        msg: msg.to_owned(),
    };
    let (e, m) = ev.next()?;
    if e != Event::StreamStart {
        return Err(structure(&m, "unexpected start of stream"));
    }
    let (e, m) = ev.next()?;
    if e == Event::StreamEnd {
        return Err(ConfigError::File {
            msg: "configuration is empty; it must contain 1 document".into(),
        });
    }
    if e != Event::DocumentStart {
        return Err(structure(&m, "expected a YAML document"));
    }
    let (e, m) = ev.next()?;
    if !matches!(e, Event::MappingStart(..)) {
        return Err(structure(
            &m,
            "top level must be a mapping of pool names to pool settings",
        ));
    }
    let mut pools = Vec::new();
    loop {
        let (e, m) = ev.next()?;
        match e {
            Event::MappingEnd => break,
            Event::Scalar(name, ..) => {
                if name.is_empty() {
                    return Err(structure(&m, "pool name is empty"));
                }
                let (e, vm) = ev.next()?;
                if !matches!(e, Event::MappingStart(..)) {
                    return Err(structure(
                        &vm,
                        &format!("pool '{name}' must be a mapping of directives"),
                    ));
                }
                pools.push(parse_pool(&mut ev, name)?);
            }
            _ => return Err(structure(&m, "pool names must be plain strings")),
        }
    }
    let (e, m) = ev.next()?;
    if e != Event::DocumentEnd {
        return Err(structure(&m, "unexpected content after the pools"));
    }
    let (e, m) = ev.next()?;
    if e != Event::StreamEnd {
        return Err(structure(&m, "configuration must contain only 1 document"));
    }
    Ok(pools)
}

fn parse_pool(ev: &mut Events<'_>, name: String) -> Result<RawPool, ConfigError> {
    let mut pool = RawPool {
        name,
        ..RawPool::default()
    };
    let mut seen_sequence = false;
    loop {
        let (e, km) = ev.next()?;
        let key = match e {
            Event::MappingEnd => break,
            Event::Scalar(key, ..) => key,
            _ => {
                return Err(ConfigError::Structure {
                    line: line_of(&km),
                    msg: format!("pool '{}' has a non-scalar directive name", pool.name),
                })
            }
        };
        if key.is_empty() {
            return Err(ConfigError::Structure {
                line: line_of(&km),
                msg: format!("pool '{}' has an empty directive name", pool.name),
            });
        }
        let (e, vm) = ev.next()?;
        match e {
            Event::Scalar(value, ..) => set_directive(&mut pool, &key, &value, line_of(&vm))?,
            Event::SequenceStart(..) => {
                // nutcracker allows one sequence per pool and feeds each element to the
                // directive, so only `servers:` is useful as a list.
                if seen_sequence {
                    return Err(ConfigError::Structure {
                        line: line_of(&vm),
                        msg: format!("pool '{}' has more than one sequence directive", pool.name),
                    });
                }
                seen_sequence = true;
                loop {
                    let (e, im) = ev.next()?;
                    match e {
                        Event::SequenceEnd => break,
                        Event::Scalar(item, ..) => {
                            set_directive(&mut pool, &key, &item, line_of(&im))?
                        }
                        _ => {
                            return Err(ConfigError::Structure {
                                line: line_of(&im),
                                msg: format!(
                                    "pool '{}' directive \"{key}\" items must be plain strings \
                                     (nesting deeper than 2 levels)",
                                    pool.name
                                ),
                            })
                        }
                    }
                }
            }
            _ => {
                return Err(ConfigError::Structure {
                    line: line_of(&vm),
                    msg: format!(
                        "pool '{}' directive \"{key}\" has a nested mapping (depth greater than 2)",
                        pool.name
                    ),
                })
            }
        }
    }
    if !seen_sequence {
        return Err(ConfigError::Pool {
            pool: pool.name,
            msg: "has no \"servers:\" sequence".into(),
        });
    }
    Ok(pool)
}

/// Applies one `key: value` (or one sequence element of `key:`), like nc_conf.c's
/// command table.
fn set_directive(
    pool: &mut RawPool,
    key: &str,
    value: &str,
    line: usize,
) -> Result<(), ConfigError> {
    let err = |msg: &str| ConfigError::Directive {
        pool: pool.name.clone(),
        key: key.to_owned(),
        line,
        msg: msg.to_owned(),
    };
    // twemproxy refuses empty scalars before looking at the directive.
    if value.is_empty() {
        return Err(err("has an empty value"));
    }
    fn once<T>(slot: &mut Option<T>, v: T) -> Result<(), &'static str> {
        if slot.is_some() {
            return Err("is a duplicate");
        }
        *slot = Some(v);
        Ok(())
    }
    let result = match key {
        "listen" => parse_listen(value).and_then(|l| once(&mut pool.listen, l)),
        "hash" => Hash::from_name(value)
            .ok_or("is not a valid hash")
            .and_then(|h| once(&mut pool.hash, h)),
        "hash_tag" => match value.as_bytes() {
            &[l, r] => once(&mut pool.hash_tag, [l, r]),
            _ => Err("is not a valid hash tag string with two characters"),
        },
        "distribution" => Distribution::from_name(value)
            .ok_or("is not a valid distribution")
            .and_then(|d| once(&mut pool.distribution, d)),
        "timeout" => parse_num(value).and_then(|n| once(&mut pool.timeout, n)),
        "backlog" => parse_num(value).and_then(|n| once(&mut pool.backlog, n)),
        "client_connections" => {
            parse_num(value).and_then(|n| once(&mut pool.client_connections, n))
        }
        "redis" => parse_bool(value).and_then(|b| once(&mut pool.redis, b)),
        "tcpkeepalive" => parse_bool(value).and_then(|b| once(&mut pool.tcpkeepalive, b)),
        "reuseport" => parse_bool(value).and_then(|b| once(&mut pool.reuseport, b)),
        "redis_auth" => once(&mut pool.redis_auth, value.to_owned()),
        "redis_db" => parse_num(value).and_then(|n| once(&mut pool.redis_db, n)),
        "preconnect" => parse_bool(value).and_then(|b| once(&mut pool.preconnect, b)),
        "auto_eject_hosts" => parse_bool(value).and_then(|b| once(&mut pool.auto_eject_hosts, b)),
        "server_connections" => {
            parse_num(value).and_then(|n| once(&mut pool.server_connections, n))
        }
        "server_retry_timeout" => {
            parse_num(value).and_then(|n| once(&mut pool.server_retry_timeout, n))
        }
        "server_failure_limit" => {
            parse_num(value).and_then(|n| once(&mut pool.server_failure_limit, n))
        }
        "servers" => match parse_dns_server(value) {
            Some(d) => d.map(|d| pool.dns.push(d)),
            None => parse_server(value).map(|s| pool.servers.push(s)),
        },
        "dns_refresh_ms" => parse_num(value).and_then(|n| once(&mut pool.dns_refresh_ms, n)),
        // ---- memfleet-only directives (nutcracker rejects them) ----
        "client_auth" => once(&mut pool.client_auth, value.to_owned()),
        "tls" => parse_bool(value).and_then(|b| once(&mut pool.tls.enabled, b)),
        "tls_ca_file" => once(&mut pool.tls.ca_file, value.to_owned()),
        "tls_cert_file" => once(&mut pool.tls.cert_file, value.to_owned()),
        "tls_key_file" => once(&mut pool.tls.key_file, value.to_owned()),
        "tls_server_name" => once(&mut pool.tls.server_name, value.to_owned()),
        "listen_tls_cert_file" => once(&mut pool.tls.listen_cert_file, value.to_owned()),
        "listen_tls_key_file" => once(&mut pool.tls.listen_key_file, value.to_owned()),
        "listen_tls_ca_file" => once(&mut pool.tls.listen_ca_file, value.to_owned()),
        _ => Err("is unknown"),
    };
    result.map_err(err)
}

/// nc_atoi: ASCII digits only, into a C int (wrapping as the C does), negative = invalid.
fn nc_atoi(s: &str) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    let mut v: i32 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.wrapping_mul(10).wrapping_add(i32::from(b - b'0'));
    }
    u32::try_from(v).ok()
}

fn parse_num(s: &str) -> Result<u32, &'static str> {
    nc_atoi(s).ok_or("is not a number")
}

fn parse_bool(s: &str) -> Result<bool, &'static str> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("is not \"true\" or \"false\""),
    }
}

fn valid_port(s: &str) -> Option<u16> {
    nc_atoi(s)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
}

fn parse_listen(value: &str) -> Result<Listen, &'static str> {
    if value.starts_with('/') {
        let Some((path, perm)) = value.rsplit_once(' ') else {
            return Ok(Listen::Unix {
                path: value.to_owned(),
                mode: None,
            });
        };
        let mode = strtol_octal(perm)
            .filter(|&m| (0..=0o777).contains(&m))
            .ok_or("has an invalid file permission in \"socket_path permission\" format string")?;
        return Ok(Listen::Unix {
            path: path.to_owned(),
            mode: (mode != 0).then_some(mode as u32),
        });
    }
    let (host, port) = value
        .rsplit_once(':')
        .ok_or("has an invalid \"hostname:port\" format string")?;
    let port = valid_port(port).ok_or("has an invalid port in \"hostname:port\" format string")?;
    // twemproxy resolves the name here; without doing I/O we can at least refuse what
    // no resolver accepts (empty names, characters outside host names and IP literals).
    if !plausible_host(host) {
        return Err("has an invalid value");
    }
    Ok(Listen::Tcp {
        host: host.to_owned(),
        port,
    })
}

fn plausible_host(host: &str) -> bool {
    host.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')))
}

/// C `strtol(s, NULL, 8)`: leading blanks, optional sign, the longest octal prefix;
/// `None` on overflow (errno ERANGE).
fn strtol_octal(s: &str) -> Option<i64> {
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(|b| (b'0'..=b'7').contains(b)) {
        v = v.checked_mul(8)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// A `dns:HOST:PORT:WEIGHT` or `srv:NAME:WEIGHT` entry; `None` for any other entry.
fn parse_dns_server(value: &str) -> Option<Result<DnsName, &'static str>> {
    const FORMAT: &str =
        "has an invalid \"dns:hostname:port:weight\" or \"srv:name:weight\" format string";
    let weight = |w: &str| match nc_atoi(w) {
        Some(0) | None => Err(FORMAT),
        Some(w) => Ok(w),
    };
    if let Some(rest) = value.strip_prefix("dns:") {
        return Some((|| {
            let (rest, w) = rest.rsplit_once(':').ok_or(FORMAT)?;
            let (host, port) = rest.rsplit_once(':').ok_or(FORMAT)?;
            let port = valid_port(port).ok_or(FORMAT)?;
            if host.is_empty() || host.contains([' ', ':']) {
                return Err(FORMAT);
            }
            Ok(DnsName {
                lookup: DnsLookup::Addresses {
                    host: host.to_owned(),
                    port,
                },
                weight: weight(w)?,
            })
        })());
    }
    let rest = value.strip_prefix("srv:")?;
    Some((|| {
        let (name, w) = rest.rsplit_once(':').ok_or(FORMAT)?;
        if name.is_empty() || name.contains([' ', ':']) {
            return Err(FORMAT);
        }
        Ok(DnsName {
            lookup: DnsLookup::Srv {
                name: name.to_owned(),
            },
            weight: weight(w)?,
        })
    })())
}

/// Parses a `servers:` entry from its end, as twemproxy's `conf_add_server` does:
/// optional ` name` after the last space, then `:weight`, then (TCP only) `:port`.
fn parse_server(value: &str) -> Result<ServerSpec, &'static str> {
    const FORMAT: &str = "has an invalid \"hostname:port:weight [name]\"or \"/path/unix_socket:weight [name]\" format string";
    let unix = value.starts_with('/');
    let (rest, name) = match value.rsplit_once(' ') {
        Some((rest, name)) => (rest, Some(name)),
        None => (value, None),
    };
    let (rest, weight) = rest.rsplit_once(':').ok_or(FORMAT)?;
    // A unix path must not contain another ':'; a TCP entry needs one before the port.
    let (addr, port) = match rest.rsplit_once(':') {
        Some((addr, port)) if !unix => (addr, port),
        Some(_) => return Err(FORMAT),
        None if unix => (rest, ""),
        None => return Err(FORMAT),
    };
    let weight = match nc_atoi(weight) {
        None => {
            return Err("has an invalid weight in \"hostname:port:weight [name]\" format string")
        }
        Some(0) => {
            return Err("has a zero weight in \"hostname:port:weight [name]\" format string")
        }
        Some(w) => w,
    };
    let (server_addr, port_num) = if unix {
        (
            ServerAddr::Unix {
                path: addr.to_owned(),
            },
            0,
        )
    } else {
        let port = valid_port(port)
            .ok_or("has an invalid port in \"hostname:port:weight [name]\" format string")?;
        (
            ServerAddr::Tcp {
                host: addr.to_owned(),
                port,
            },
            port,
        )
    };
    let ketama_name = match name {
        Some(name) => name.to_owned(),
        None if port_num == KETAMA_DEFAULT_PORT => addr.to_owned(),
        // The address plus the raw ":port" text; for a unix path that is "/path:".
        None => value[..addr.len() + 1 + port.len()].to_owned(),
    };
    // twemproxy only trims a non-empty name off the printable name.
    let pname = match name {
        Some(name) if !name.is_empty() => &value[..value.len() - name.len() - 1],
        _ => value,
    };
    Ok(ServerSpec {
        pname: pname.to_owned(),
        addr: server_addr,
        weight,
        name: name.map(str::to_owned),
        ketama_name,
    })
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::from_yaml_str(text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"))
    }

    fn reject(text: &str) -> String {
        match Config::from_yaml_str(text) {
            Ok(c) => panic!("accepted: {c:?}\n---\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn dns_servers_are_kept_apart_from_written_ones() {
        let c = parse(
            "a:\n  listen: 127.0.0.1:22121\n  dns_refresh_ms: 500\n  servers:\n   - 10.0.0.9:11211:1\n   - dns:cache.ns.svc:11211:2\n   - srv:_memcache._tcp.cache.ns.svc:1\nb:\n  listen: 127.0.0.1:22122\n  servers:\n   - dns:other:11311:1\n",
        );
        assert_eq!(c.pools[0].servers.len(), 1);
        assert!(c.pools[1].servers.is_empty());
        assert_eq!(c.dns.len(), 2);
        assert_eq!(c.dns[0].pool, 0);
        assert_eq!(c.dns[0].refresh, Duration::from_millis(500));
        assert_eq!(
            c.dns[0].names,
            vec![
                DnsName {
                    lookup: DnsLookup::Addresses {
                        host: "cache.ns.svc".into(),
                        port: 11211
                    },
                    weight: 2
                },
                DnsName {
                    lookup: DnsLookup::Srv {
                        name: "_memcache._tcp.cache.ns.svc".into()
                    },
                    weight: 1
                },
            ]
        );
        assert_eq!(c.dns[1].pool, 1);
        assert_eq!(
            c.dns[1].refresh,
            Duration::from_millis(DEFAULT_DNS_REFRESH_MS.into())
        );
    }

    #[test]
    fn bad_dns_servers_are_refused() {
        let pool =
            |entry: &str| format!("a:\n  listen: 127.0.0.1:22121\n  servers:\n   - {entry}\n");
        for bad in [
            "dns:cache:11211",
            "dns::11211:1",
            "dns:cache:0:1",
            "dns:cache:11211:0",
            "dns:cache:x:1",
            "srv::1",
            "srv:_memcache._tcp.x",
            "srv:_memcache._tcp.x:0",
        ] {
            assert!(reject(&pool(bad)).contains("format string"), "{bad}");
        }
        let refresh_alone = "a:\n  listen: 127.0.0.1:22121\n  dns_refresh_ms: 100\n  servers:\n   - 127.0.0.1:11211:1\n";
        assert!(reject(refresh_alone).contains("dns_refresh_ms"));
    }

    /// The structure of twemproxy's conf/nutcracker.yml (five pools, every common key).
    const FIVE_POOLS: &str = "\
alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: true
  redis: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:6379:1

beta:
  listen: 127.0.0.1:22122
  hash: fnv1a_64
  hash_tag: \"{}\"
  distribution: ketama
  auto_eject_hosts: false
  timeout: 400
  redis: true
  servers:
   - 127.0.0.1:6380:1 server1
   - 127.0.0.1:6381:1 server2
   - 127.0.0.1:6382:1 server3
   - 127.0.0.1:6383:1 server4

gamma:
  listen: 127.0.0.1:22123
  hash: fnv1a_64
  distribution: ketama
  timeout: 400
  backlog: 1024
  preconnect: true
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 3
  servers:
   - 127.0.0.1:11212:1
   - 127.0.0.1:11213:1

delta:
  listen: 127.0.0.1:22124
  hash: fnv1a_64
  distribution: ketama
  timeout: 100
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:11214:1
   - 127.0.0.1:11215:1
   - 127.0.0.1:11216:1
   - 127.0.0.1:11217:1
   - 127.0.0.1:11218:1
   - 127.0.0.1:11219:1
   - 127.0.0.1:11220:1
   - 127.0.0.1:11221:1
   - 127.0.0.1:11222:1
   - 127.0.0.1:11223:1

omega:
  listen: /tmp/gamma
  hash: hsieh
  distribution: ketama
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:11214:100000
   - 127.0.0.1:11215:1
";

    /// The structure of conf/nutcracker.leaf.yml.
    const LEAF: &str = "\
leaf:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: true
  server_retry_timeout: 2000
  server_failure_limit: 1
  servers:
   - 127.0.0.1:11212:1
   - 127.0.0.1:11213:1
";

    /// The structure of conf/nutcracker.root.yml.
    const ROOT: &str = "\
root:
  listen: 127.0.0.1:22120
  hash: fnv1a_64
  distribution: ketama
  preconnect: true
  auto_eject_hosts: false
  servers:
   - 127.0.0.1:22121:1
";

    const MINIMAL: &str = "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n";

    #[test]
    fn twemproxy_sample_configs_parse() {
        let c = parse(FIVE_POOLS);
        let names: Vec<_> = c.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "gamma", "delta", "omega"]);

        let alpha = c.pool("alpha").unwrap();
        assert!(alpha.redis && alpha.auto_eject_hosts);
        assert_eq!(alpha.server_retry_timeout, Duration::from_millis(2000));
        assert_eq!(alpha.server_failure_limit, 1);
        assert_eq!(alpha.timeout, None);

        let beta = c.pool("beta").unwrap();
        assert_eq!(beta.hash_tag, Some(*b"{}"));
        assert_eq!(beta.timeout, Some(Duration::from_millis(400)));
        assert_eq!(beta.servers.len(), 4);
        assert_eq!(beta.servers[0].name.as_deref(), Some("server1"));
        assert_eq!(beta.servers[0].pname, "127.0.0.1:6380:1");
        assert_eq!(beta.servers[0].ketama_name, "server1");

        let gamma = c.pool("gamma").unwrap();
        assert_eq!(gamma.backlog, 1024);
        assert!(gamma.preconnect);
        assert_eq!(gamma.servers[0].ketama_name, "127.0.0.1:11212");

        assert_eq!(c.pool("delta").unwrap().servers.len(), 10);

        let omega = c.pool("omega").unwrap();
        assert_eq!(
            omega.listen,
            Listen::Unix {
                path: "/tmp/gamma".into(),
                mode: None
            }
        );
        assert_eq!(omega.hash, Hash::Hsieh);
        assert_eq!(omega.servers[0].weight, 100_000);

        let leaf = parse(LEAF);
        assert_eq!(leaf.pools[0].servers.len(), 2);
        let root = parse(ROOT);
        assert_eq!(
            root.pools[0].listen,
            Listen::Tcp {
                host: "127.0.0.1".into(),
                port: 22120
            }
        );
        assert!(root.pools[0].preconnect);
    }

    #[test]
    fn defaults_match_twemproxy() {
        let p = &parse(MINIMAL).pools[0];
        assert_eq!(p.hash, Hash::Fnv1a64);
        assert_eq!(p.distribution, Distribution::Ketama);
        assert_eq!(p.hash_tag, None);
        assert_eq!(p.timeout, None);
        assert_eq!(p.backlog, 512);
        assert_eq!(p.client_connections, 0);
        assert!(!p.redis && !p.preconnect && !p.tcpkeepalive && !p.reuseport);
        assert!(!p.auto_eject_hosts);
        assert_eq!(p.redis_db, 0);
        assert_eq!(p.redis_auth, None);
        assert_eq!(p.server_connections, 1);
        assert_eq!(p.server_retry_timeout, Duration::from_secs(30));
        assert_eq!(p.server_failure_limit, 2);
        assert_eq!(p.client_auth, None);
        // Port 11211 is left out of the ketama name.
        assert_eq!(p.servers[0].ketama_name, "127.0.0.1");
    }

    #[test]
    fn every_directive_is_read() {
        let c = parse(
            "pool:
  listen: /var/run/mf.sock 0660
  hash: murmur
  hash_tag: \"$$\"
  distribution: modula
  timeout: 250
  backlog: 128
  client_connections: 4096
  redis: true
  redis_auth: s3cret
  redis_db: 3
  preconnect: true
  tcpkeepalive: true
  reuseport: true
  auto_eject_hosts: true
  server_connections: 4
  server_retry_timeout: 500
  server_failure_limit: 5
  client_auth: letmein
  servers:
   - /tmp/mc.sock:2 local
   - /tmp/mc2.sock:1
   - 10.0.0.1:11211:3
",
        );
        let p = &c.pools[0];
        assert_eq!(
            p.listen,
            Listen::Unix {
                path: "/var/run/mf.sock".into(),
                mode: Some(0o660)
            }
        );
        assert_eq!(p.hash, Hash::Murmur);
        assert_eq!(p.hash_tag, Some(*b"$$"));
        assert_eq!(p.distribution, Distribution::Modula);
        assert_eq!(p.timeout, Some(Duration::from_millis(250)));
        assert_eq!(p.backlog, 128);
        assert_eq!(p.client_connections, 4096);
        assert!(p.redis && p.preconnect && p.tcpkeepalive && p.reuseport && p.auto_eject_hosts);
        assert_eq!(p.redis_auth.as_deref(), Some("s3cret"));
        assert_eq!(p.redis_db, 3);
        assert_eq!(p.server_connections, 4);
        assert_eq!(p.server_retry_timeout, Duration::from_millis(500));
        assert_eq!(p.server_failure_limit, 5);
        assert_eq!(p.client_auth.as_deref(), Some("letmein"));
        assert_eq!(
            p.servers[0].addr,
            ServerAddr::Unix {
                path: "/tmp/mc.sock".into()
            }
        );
        assert_eq!(p.servers[0].ketama_name, "local");
        // twemproxy keeps the ':' before the weight in a unix server's ketama name.
        assert_eq!(p.servers[1].ketama_name, "/tmp/mc2.sock:");
        assert_eq!(p.servers[2].weight, 3);
    }

    #[test]
    fn ring_uses_twemproxy_point_names() {
        let c = parse(FIVE_POOLS);
        let beta = c.pool("beta").unwrap().ring();
        assert_eq!(beta.hash_tag(), Some(*b"{}"));
        assert_eq!(beta.servers()[0].point_label(), "server1");
        assert_eq!(beta.server_for(b"a{x}"), beta.server_for(b"b{x}"));
        let gamma = c.pool("gamma").unwrap().ring();
        assert_eq!(gamma.servers()[1].point_label(), "127.0.0.1:11213");
        assert_eq!(gamma.continuum().len(), 320);
    }

    #[test]
    fn quoting_and_comments_are_plain_yaml() {
        let c = parse(
            "# memfleet
a:   # pool
  listen: '127.0.0.1:22121' # trailing
  hash: \"md5\"
  servers:
   - \"127.0.0.1:11211:1\"
",
        );
        assert_eq!(c.pools[0].hash, Hash::Md5);
    }

    #[test]
    fn bad_values_are_refused_with_reasons() {
        let with = |line: &str| {
            format!("a:\n  listen: 127.0.0.1:22121\n  {line}\n  servers:\n   - 127.0.0.1:11211:1\n")
        };
        let cases: &[(&str, &str)] = &[
            ("hash: md6", "directive \"hash\" is not a valid hash"),
            ("distribution: vnode", "is not a valid distribution"),
            (
                "hash_tag: \"{{}\"",
                "is not a valid hash tag string with two characters",
            ),
            ("timeout: -1", "directive \"timeout\" is not a number"),
            ("timeout: 1.5", "is not a number"),
            ("preconnect: yes", "is not \"true\" or \"false\""),
            ("redis: True", "is not \"true\" or \"false\""),
            ("timeout:", "has an empty value"),
            (
                "client_connection: 5",
                "directive \"client_connection\" is unknown",
            ),
            (
                "listen: 127.0.0.1:22122",
                "directive \"listen\" is a duplicate",
            ),
            ("redis_auth: pw", "only valid for a redis pool"),
            ("server_connections: 0", "cannot be 0"),
        ];
        for (line, want) in cases {
            let err = reject(&with(line));
            assert!(err.contains(want), "{line}: got {err}");
        }
    }

    #[test]
    fn bad_files_are_refused_with_reasons() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("# only a comment\n", "empty"),
            ("---\na:\n  listen: 1.2.3.4:1\n", "'---'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers: [127.0.0.1:11211:1]\n", "flow style"),
            ("a:\n  listen: 127.0.0.1:1\n  hash_tag: {}\n  servers:\n   - 127.0.0.1:11211:1\n", "flow style"),
            ("a: &x\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "anchor"),
            ("a:\n  listen: !!str 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "tag"),
            ("a: b\n", "must be a mapping"),
            ("- a\n", "top level must be a mapping"),
            ("a:\n  listen: 127.0.0.1:1\n  hash: md5\n", "no \"servers:\" sequence"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - host: x\n", "items must be plain strings"),
            ("a:\n  listen: 127.0.0.1:1\n  x:\n    y: z\n  servers:\n   - 127.0.0.1:11211:1\n", "depth greater than 2"),
            ("a:\n  listen: 127.0.0.1:1\n  hash:\n   - md5\n  servers:\n   - 127.0.0.1:11211:1\n", "more than one sequence"),
            ("a:\n  listen: 127.0.0.1:1\n  hash:\n   - md5\n", "has no servers"),
            ("a:\n  servers:\n   - 127.0.0.1:11211:1\n", "missing directive \"listen:\""),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11211:2\n", "same name '127.0.0.1'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:1:1 x\n   - 127.0.0.1:2:1 x\n", "same name 'x'"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\nb:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\n", "same listen address"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1\na:\n  listen: 127.0.0.1:2\n  servers:\n   - 127.0.0.1:11211:1\n", "pools with same name"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:0\n", "zero weight"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:x\n", "invalid weight"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:0:1\n", "invalid port"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - localhost:1\n", "format string"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n   - /tmp/a:b.sock:1\n", "format string"),
            ("a:\n  listen: 127.0.0.1\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid \"hostname:port\""),
            ("a:\n  listen: 127.0.0.1:99999\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid port"),
            ("a:\n  listen: :22121\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: 127.0.0.1#:22121\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: \"[::1]:22121\"\n  servers:\n   - 127.0.0.1:11211:1\n", "invalid value"),
            ("a:\n  listen: /tmp/x.sock 1777\n  servers:\n   - 127.0.0.1:11211:1\n", "file permission"),
            ("a:\n  listen: 127.0.0.1:1\n  servers:\n  - 127.0.0.1:11211:1\n - x\n", "invalid YAML"),
        ];
        for (text, want) in cases {
            let err = reject(text);
            assert!(err.contains(want), "{text:?}: got {err}");
        }
    }

    #[test]
    fn errors_name_pool_and_line() {
        let err = reject(
            "alpha:\n  listen: 127.0.0.1:1\n  hash: md6\n  servers:\n   - 127.0.0.1:11211:1\n",
        );
        assert_eq!(
            err,
            "conf: pool 'alpha' line 3: directive \"hash\" is not a valid hash"
        );
    }

    #[test]
    fn c_number_and_permission_quirks() {
        // nc_atoi wraps like the C int it fills: nutcracker -t accepts this weight.
        let c = parse("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:99999999999\n");
        assert_eq!(c.pools[0].servers[0].weight, 1_215_752_191);
        // strtol(.., 8) stops at the first non-octal digit: "0999" is mode 0 (default).
        let c = parse("a:\n  listen: /tmp/x.sock 0999\n  servers:\n   - 127.0.0.1:11211:1\n");
        assert_eq!(
            c.pools[0].listen,
            Listen::Unix {
                path: "/tmp/x.sock".into(),
                mode: None
            }
        );
        // Two servers on the same address with different node names are distinct.
        parse("a:\n  listen: 127.0.0.1:1\n  servers:\n   - 127.0.0.1:11211:1 x\n   - 127.0.0.1:11211:1 y\n");
        // IPv6 literal without brackets: the port is after the last ':'.
        let c = parse("a:\n  listen: ::1:22121\n  servers:\n   - ::1:11211:1\n");
        assert_eq!(
            c.pools[0].servers[0].addr,
            ServerAddr::Tcp {
                host: "::1".into(),
                port: 11211
            }
        );
    }

    #[test]
    fn tls_directives() {
        let c = parse(
            "pool:
  listen: 127.0.0.1:22121
  tls: true
  tls_ca_file: /etc/ca.pem
  tls_cert_file: /etc/client.pem
  tls_key_file: /etc/client.key
  tls_server_name: cache.internal
  listen_tls_cert_file: /etc/server.pem
  listen_tls_key_file: /etc/server.key
  listen_tls_ca_file: /etc/clients-ca.pem
  servers:
   - 127.0.0.1:11211:1
",
        );
        let t = &c.pools[0].tls;
        assert!(t.to_servers());
        assert_eq!(t.ca_file.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(t.cert_file.as_deref(), Some("/etc/client.pem"));
        assert_eq!(t.key_file.as_deref(), Some("/etc/client.key"));
        assert_eq!(t.server_name.as_deref(), Some("cache.internal"));
        assert_eq!(t.listen_cert_file.as_deref(), Some("/etc/server.pem"));
        assert_eq!(t.listen_key_file.as_deref(), Some("/etc/server.key"));
        assert_eq!(t.listen_ca_file.as_deref(), Some("/etc/clients-ca.pem"));
        assert!(!parse(MINIMAL).pools[0].tls.to_servers());
        let pool = |extra: &str| {
            format!("p:\n  listen: 127.0.0.1:22121\n{extra}  servers:\n   - 127.0.0.1:11211:1\n")
        };
        for (extra, why) in [
            ("  tls_ca_file: /ca.pem\n", "without \"tls: true\""),
            ("  tls: true\n  tls_cert_file: /c.pem\n", "needs both"),
            ("  listen_tls_key_file: /k.pem\n", "needs both"),
            (
                "  listen_tls_ca_file: /ca.pem\n",
                "without \"listen_tls_cert_file:\"",
            ),
            ("  tls: yes\n", "is not \"true\" or \"false\""),
        ] {
            let e = reject(&pool(extra));
            assert!(e.contains(why), "{extra}: {e}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Arbitrary text, and YAML-ish line soup, never panics the parser.
        #[test]
        fn never_panics(text in "\\PC{0,200}") {
            let _ = Config::from_yaml_str(&text);
        }

        #[test]
        fn yamlish_never_panics(lines in proptest::collection::vec(
            "( {0,4})(-|[a-z_]{1,8}:)( [ -~]{0,20})?", 0..12)) {
            let _ = Config::from_yaml_str(&lines.join("\n"));
        }
    }

    /// Runs the installed nutcracker 0.5.0 (`-t`) on configs and checks it agrees.
    #[test]
    fn verdicts_agree_with_nutcracker() {
        let Some(nutcracker) = find_nutcracker() else {
            eprintln!("WARNING: nutcracker not on PATH; skipping verdict comparison");
            return;
        };
        let cases: Vec<String> = vec![
            FIVE_POOLS.into(),
            LEAF.into(),
            ROOT.into(),
            MINIMAL.into(),
            "a:\n  listen: 127.0.0.1:22121\n  hash: md6\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  preconnect: yes\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers: [127.0.0.1:11211:1]\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11211:2\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1 x\n   - 127.0.0.1:11211:1 y\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:0\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:99999999999\n".into(),
            "a:\n  listen: /tmp/x.sock 0666\n  servers:\n   - /tmp/mc.sock:1 one\n   - /tmp/mc2.sock:1\n".into(),
            "a:\n  listen: /tmp/x.sock 0999\n  servers:\n   - /tmp/mc.sock:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - /tmp/a:b.sock:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  timeout:\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  timeout: 0\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  hash:\n   - md5\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  redis_auth: pw\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_auth: >\n    pass word\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  server_connections: 0\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: :22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: ::1:22121\n  servers:\n   - ::1:11211:1\n".into(),
            "a:\n  listen: 1#27.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: \"[::1]:22121\"\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: localhost:22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n...\n".into(),
            "a: b\n".into(),
            "".into(),
        ];
        let dir = std::env::temp_dir().join(format!("memfleet-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (i, text) in cases.iter().enumerate() {
            let path = dir.join(format!("case{i}.yml"));
            std::fs::write(&path, text).unwrap();
            let out = std::process::Command::new(&nutcracker)
                .arg("-t")
                .arg("-c")
                .arg(&path)
                .output()
                .expect("run nutcracker -t");
            let theirs = String::from_utf8_lossy(&out.stderr).contains("syntax is ok");
            let ours = Config::from_yaml_str(text);
            assert_eq!(ours.is_ok(), theirs, "case {i} ours={ours:?}\n{text}");
        }
        std::fs::remove_dir_all(&dir).ok();
        eprintln!("{} configs: verdicts agree with nutcracker -t", cases.len());
    }

    fn find_nutcracker() -> Option<std::path::PathBuf> {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| std::path::Path::new(d).join("nutcracker"))
            .find(|p| p.is_file())
    }
}
