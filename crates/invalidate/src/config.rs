//! `invalidate.yml`: what to read (source, tables and key templates) and where to send
//! deletes (targets). Pure: text in, a checked `Config` or one-line error out.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use nutconf::ServerAddr;
use ring::{Distribution, Hash};
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::{Yaml, YamlLoader};

use crate::template::Template;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// libpq keyword/value string or `postgres://` URL.
    pub dsn: String,
    pub slot: String,
    pub publication: String,
    /// A streaming standby whose replay gates the deletes (same DSN forms as `dsn`).
    pub replica_dsn: Option<String>,
    /// How often the standby is asked for its replay position while deletes wait on it.
    pub replica_poll: Duration,
    /// Most keys (plus one per transaction) held waiting for the standby before the
    /// stream is no longer read.
    pub replica_max_held_keys: usize,
}

/// Where a server listens: `host:port` or a unix socket path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    Tcp(String),
    Unix(PathBuf),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp(a) => f.write_str(a),
            Addr::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolServer {
    pub addr: Addr,
    pub ring: ring::Server,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// One memcached server or `memfleet route` listener: every key goes there.
    Memcached(Addr),
    /// Servers a key is spread over as the router spreads it: each key goes to one.
    Pool {
        servers: Vec<PoolServer>,
        hash: Hash,
        distribution: Distribution,
        hash_tag: Option<[u8; 2]>,
    },
}

/// Which row changes of a table cause deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changes {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
}

impl Changes {
    pub const ALL: Changes = Changes {
        insert: true,
        update: true,
        delete: true,
    };
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSpec {
    pub schema: String,
    pub name: String,
    pub templates: Vec<Template>,
    pub changes: Changes,
}

impl TableSpec {
    /// `schema.name`, each part double-quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }

    pub fn display_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub source: Source,
    pub targets: Vec<TargetSpec>,
    pub tables: Vec<TableSpec>,
    /// Most keys written to one target in one batch.
    pub max_batch_keys: usize,
    /// How long to wait before giving up on a batch's replies.
    pub ack_timeout: Duration,
    pub connect_timeout: Duration,
    /// How often to try a target again whose deletes are spooled.
    pub retry_interval: Duration,
    pub spool_dir: PathBuf,
    /// `host:port` for the stats listener, if any.
    pub stats: Option<String>,
    /// What a key's invalidation sends.
    pub invalidate_with: InvalidateWith,
    /// `remote_markers`: the prefix of the marker key deleted with each key, if any.
    pub remote_markers: Option<Vec<u8>>,
    /// `remote_markers_release`: what removes a marker.
    pub remote_markers_release: MarkerRelease,
}

/// `remote_markers_release`: `change` deletes a key's marker with every invalidation of the
/// key, whoever wrote it; `message` removes a marker only when the transaction that set it
/// (named by the token in its logical decoding message) is invalidated, and only if the marker
/// still holds that token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MarkerRelease {
    #[default]
    Change,
    Message,
}

/// `invalidate_with`: a delete, or meta `md <key> I T<ttl>` (mark stale, keep the value for
/// `ttl` seconds so readers are served it while one of them refills).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidateWith {
    Delete,
    Stale { ttl: u32 },
}

pub const DEFAULT_STALE_TTL: u32 = 30;

pub const DEFAULT_MAX_BATCH_KEYS: usize = 8192;
pub const DEFAULT_ACK_TIMEOUT_MS: u64 = 2000;
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1000;
pub const DEFAULT_RETRY_INTERVAL_MS: u64 = 1000;
pub const DEFAULT_SPOOL_DIR: &str = "memfleet-invalidate.spool";
pub const DEFAULT_REPLICA_POLL_MS: u64 = 2;
pub const DEFAULT_REPLICA_MAX_HELD_KEYS: usize = 1_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

fn get<'a>(map: &'a Yaml, key: &str) -> Option<&'a Yaml> {
    map.as_hash()?.get(&Yaml::String(key.to_owned()))
}

fn string(y: &Yaml, what: &str) -> Result<String, ConfigError> {
    match y {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Integer(i) => Ok(i.to_string()),
        _ => err(format!("{what} must be a string")),
    }
}

fn millis(root: &Yaml, key: &str, default: u64) -> Result<Duration, ConfigError> {
    match get(root, key) {
        None => Ok(Duration::from_millis(default)),
        Some(Yaml::Integer(n)) if *n > 0 => Ok(Duration::from_millis(*n as u64)),
        Some(_) => err(format!("{key} must be a positive number of milliseconds")),
    }
}

fn check_keys(map: &Yaml, what: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    let Some(h) = map.as_hash() else {
        return err(format!("{what} must be a mapping"));
    };
    for k in h.keys() {
        let k = k.as_str().unwrap_or("?");
        if !allowed.contains(&k) {
            return err(format!(
                "{what}: unknown key {k:?} (known: {})",
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

/// Slot and publication names go into replication commands unquoted, so they are held
/// to PostgreSQL's slot-name rule: lower-case letters, digits and underscores.
fn check_name(name: &str, what: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        err(format!(
            "source.{what} {name:?} must be 1-63 lower-case letters, digits or underscores"
        ))
    }
}

fn parse_addr(s: &str, what: &str) -> Result<Addr, ConfigError> {
    if s.starts_with('/') {
        return Ok(Addr::Unix(PathBuf::from(s)));
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(Addr::Tcp(s.to_owned()))
        }
        _ => err(format!(
            "{what} {s:?} is not host:port or /unix/socket/path"
        )),
    }
}

/// A pool server as nutcracker.yml writes it (`host:port:weight [name]`,
/// `/unix/path:weight [name]`), read by the router's own parser so keys are placed exactly
/// as `memfleet route` places them; the weight may be left out (1).
fn parse_pool_server(s: &str) -> Result<PoolServer, ConfigError> {
    let spec = nutconf::parse_server(s).or_else(|why| {
        let (entry, name) = match s.rsplit_once(' ') {
            Some((entry, name)) => (entry, Some(name)),
            None => (s, None),
        };
        // Only the weight-less shape gets the default weight: one ':' less than nutcracker's.
        let colons = if s.starts_with('/') { 0 } else { 1 };
        if entry.matches(':').count() != colons {
            return Err(why);
        }
        let weighted = match name {
            Some(name) => format!("{entry}:1 {name}"),
            None => format!("{entry}:1"),
        };
        nutconf::parse_server(&weighted).map_err(|_| why)
    });
    let spec = spec.map_err(|why| ConfigError(format!("pool server {s:?} {why}")))?;
    let addr = match &spec.addr {
        // The router refuses an empty host only when it connects; refused here up front.
        ServerAddr::Tcp { host, .. } if host.is_empty() => {
            return err(format!("pool server {s:?} has no host"))
        }
        ServerAddr::Tcp { host, port } => Addr::Tcp(format!("{host}:{port}")),
        ServerAddr::Unix { path } => Addr::Unix(PathBuf::from(path)),
    };
    Ok(PoolServer {
        addr,
        ring: spec.ring_server(),
    })
}

fn parse_target(y: &Yaml) -> Result<TargetSpec, ConfigError> {
    if let Some(addr) = get(y, "memcached") {
        check_keys(y, "a memcached target", &["memcached"])?;
        let addr = string(addr, "targets[].memcached")?;
        return Ok(TargetSpec::Memcached(parse_addr(&addr, "target")?));
    }
    let Some(pool) = get(y, "pool") else {
        return err("each target must be {memcached: host:port} or {pool: {servers: [...]}}");
    };
    check_keys(
        pool,
        "pool",
        &["servers", "hash", "distribution", "hash_tag"],
    )?;
    let servers = match get(pool, "servers").and_then(Yaml::as_vec) {
        Some(v) if !v.is_empty() => v
            .iter()
            .map(|s| parse_pool_server(&string(s, "pool.servers[]")?))
            .collect::<Result<Vec<_>, _>>()?,
        _ => return err("pool.servers must be a non-empty list"),
    };
    let hash = match get(pool, "hash") {
        None => Hash::Fnv1a64,
        Some(h) => {
            let h = string(h, "pool.hash")?;
            Hash::from_name(&h)
                .ok_or_else(|| ConfigError(format!("pool.hash {h:?} is not a known hash")))?
        }
    };
    let distribution = match get(pool, "distribution") {
        None => Distribution::Ketama,
        Some(d) => {
            let d = string(d, "pool.distribution")?;
            match Distribution::from_name(&d) {
                Some(d @ (Distribution::Ketama | Distribution::Modula)) => d,
                _ => return err(format!("pool.distribution {d:?} must be ketama or modula")),
            }
        }
    };
    let hash_tag = match get(pool, "hash_tag") {
        None => None,
        Some(t) => match string(t, "pool.hash_tag")?.as_bytes() {
            &[l, r] => Some([l, r]),
            _ => return err("pool.hash_tag must be two characters"),
        },
    };
    Ok(TargetSpec::Pool {
        servers,
        hash,
        distribution,
        hash_tag,
    })
}

fn parse_table(name: &str, y: &Yaml) -> Result<TableSpec, ConfigError> {
    let (schema, table) = match name.split_once('.') {
        Some((s, t)) => (s, t),
        None => ("public", name),
    };
    if schema.is_empty() || table.is_empty() || table.contains('.') {
        return err(format!("table {name:?} must be schema.table or table"));
    }
    let (keys, changes) = match y {
        Yaml::Array(_) => (y, Changes::ALL),
        Yaml::Hash(_) => {
            check_keys(y, &format!("table {name}"), &["keys", "changes"])?;
            let keys = get(y, "keys")
                .ok_or_else(|| ConfigError(format!("table {name}: keys is missing")))?;
            let changes = match get(y, "changes") {
                None => Changes::ALL,
                Some(list) => {
                    let mut c = Changes {
                        insert: false,
                        update: false,
                        delete: false,
                    };
                    for item in list.as_vec().map(Vec::as_slice).unwrap_or_default() {
                        match item.as_str() {
                            Some("insert") => c.insert = true,
                            Some("update") => c.update = true,
                            Some("delete") => c.delete = true,
                            _ => {
                                return err(format!(
                                    "table {name}: changes lists insert, update or delete"
                                ))
                            }
                        }
                    }
                    if c == (Changes {
                        insert: false,
                        update: false,
                        delete: false,
                    }) {
                        return err(format!("table {name}: changes must list at least one of insert, update, delete"));
                    }
                    c
                }
            };
            (keys, changes)
        }
        _ => return err(format!("table {name}: give a list of key templates")),
    };
    let templates = match keys.as_vec() {
        Some(v) if !v.is_empty() => v
            .iter()
            .map(|t| {
                let t = string(t, "a key template")?;
                Template::parse(&t).map_err(|e| ConfigError(format!("table {name}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => {
            return err(format!(
                "table {name}: give a non-empty list of key templates"
            ))
        }
    };
    Ok(TableSpec {
        schema: schema.to_owned(),
        name: table.to_owned(),
        templates,
        changes,
    })
}

/// Most YAML nodes a config may stand for, an alias counted as all the nodes it names. A real
/// config has hundreds; `YamlLoader` copies an alias's nodes at every use, so without a limit
/// a few lines of aliases of aliases ("billion laughs") would expand into gigabytes.
const MAX_NODES: u64 = 100_000;

/// Refuses YAML whose aliases expand past `MAX_NODES`, counting from the parser's events
/// before anything is built.
fn check_expansion(text: &str) -> Result<(), ConfigError> {
    let mut parser = Parser::new_from_str(text);
    let mut anchors: HashMap<usize, u64> = HashMap::new();
    // The collections open around the current event: their anchor and `nodes` at their start.
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut nodes: u64 = 0;
    loop {
        let (event, _) = parser
            .next_token()
            .map_err(|e| ConfigError(format!("YAML: {e}")))?;
        match event {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                open.push((anchor, nodes));
                nodes += 1;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = open.pop() {
                    if anchor > 0 {
                        anchors.insert(anchor, nodes - start);
                    }
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                if anchor > 0 {
                    anchors.insert(anchor, 1);
                }
                nodes += 1;
            }
            Event::Alias(anchor) => {
                nodes = nodes.saturating_add(anchors.get(&anchor).copied().unwrap_or(1));
            }
            _ => {}
        }
        if nodes > MAX_NODES {
            return err(format!(
                "YAML: aliases expand to more than {MAX_NODES} nodes"
            ));
        }
    }
}

impl Config {
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigError> {
        check_expansion(text)?;
        let docs =
            YamlLoader::load_from_str(text).map_err(|e| ConfigError(format!("YAML: {e}")))?;
        let [root] = docs.as_slice() else {
            return err("the file must hold exactly one YAML document");
        };
        check_keys(
            root,
            "the top level",
            &[
                "source",
                "targets",
                "tables",
                "max_batch_keys",
                "ack_timeout_ms",
                "connect_timeout_ms",
                "retry_interval_ms",
                "spool_dir",
                "stats",
                "invalidate_with",
                "stale_ttl",
                "remote_markers",
                "remote_markers_release",
            ],
        )?;
        let source_y =
            get(root, "source").ok_or_else(|| ConfigError("source is missing".into()))?;
        check_keys(
            source_y,
            "source",
            &[
                "dsn",
                "slot",
                "publication",
                "replica_dsn",
                "replica_poll_ms",
                "replica_max_held_keys",
            ],
        )?;
        let field = |k: &str, default: &str| -> Result<String, ConfigError> {
            match get(source_y, k) {
                Some(v) => string(v, &format!("source.{k}")),
                None if !default.is_empty() => Ok(default.to_owned()),
                None => err(format!("source.{k} is missing")),
            }
        };
        let source = Source {
            dsn: field("dsn", "")?,
            slot: field("slot", "memfleet")?,
            publication: field("publication", "memfleet")?,
            replica_dsn: get(source_y, "replica_dsn")
                .map(|v| string(v, "source.replica_dsn"))
                .transpose()?,
            replica_poll: millis(source_y, "replica_poll_ms", DEFAULT_REPLICA_POLL_MS)
                .map_err(|e| ConfigError(format!("source.{e}")))?,
            replica_max_held_keys: match get(source_y, "replica_max_held_keys") {
                None => DEFAULT_REPLICA_MAX_HELD_KEYS,
                Some(Yaml::Integer(n)) if *n > 0 => *n as usize,
                Some(_) => return err("source.replica_max_held_keys must be a positive number"),
            },
        };
        if source.replica_dsn.is_none() {
            for k in ["replica_poll_ms", "replica_max_held_keys"] {
                if get(source_y, k).is_some() {
                    return err(format!("source.{k} needs source.replica_dsn"));
                }
            }
        }
        check_name(&source.slot, "slot")?;
        check_name(&source.publication, "publication")?;

        let targets = match get(root, "targets").and_then(Yaml::as_vec) {
            Some(v) if !v.is_empty() => {
                v.iter().map(parse_target).collect::<Result<Vec<_>, _>>()?
            }
            _ => return err("targets must be a non-empty list"),
        };
        let tables = match get(root, "tables").and_then(Yaml::as_hash) {
            Some(h) if !h.is_empty() => h
                .iter()
                .map(|(k, v)| parse_table(&string(k, "a table name")?, v))
                .collect::<Result<Vec<_>, _>>()?,
            _ => return err("tables must be a non-empty mapping of table: [key templates]"),
        };
        for (i, t) in tables.iter().enumerate() {
            if tables[..i]
                .iter()
                .any(|u| u.schema == t.schema && u.name == t.name)
            {
                return err(format!("table {} is listed twice", t.display_name()));
            }
        }
        let max_batch_keys = match get(root, "max_batch_keys") {
            None => DEFAULT_MAX_BATCH_KEYS,
            Some(Yaml::Integer(n)) if *n > 0 => *n as usize,
            Some(_) => return err("max_batch_keys must be a positive number"),
        };
        Ok(Config {
            source,
            targets,
            tables,
            max_batch_keys,
            ack_timeout: millis(root, "ack_timeout_ms", DEFAULT_ACK_TIMEOUT_MS)?,
            connect_timeout: millis(root, "connect_timeout_ms", DEFAULT_CONNECT_TIMEOUT_MS)?,
            retry_interval: millis(root, "retry_interval_ms", DEFAULT_RETRY_INTERVAL_MS)?,
            spool_dir: PathBuf::from(match get(root, "spool_dir") {
                Some(d) => string(d, "spool_dir")?,
                None => DEFAULT_SPOOL_DIR.to_owned(),
            }),
            stats: get(root, "stats").map(|s| string(s, "stats")).transpose()?,
            invalidate_with: invalidate_with(root)?,
            remote_markers: remote_markers(root)?,
            remote_markers_release: remote_markers_release(root)?,
        })
    }
}

fn invalidate_with(root: &Yaml) -> Result<InvalidateWith, ConfigError> {
    let ttl = match get(root, "stale_ttl") {
        None => DEFAULT_STALE_TTL,
        // memcached reads a TTL above 30 days as a Unix time: refused rather than guessed at.
        Some(Yaml::Integer(n)) if (1..=2_592_000).contains(n) => *n as u32,
        Some(_) => return err("stale_ttl must be a number of seconds from 1 to 2592000"),
    };
    match get(root, "invalidate_with")
        .map(|m| string(m, "invalidate_with"))
        .transpose()?
    {
        None => Ok(InvalidateWith::Delete),
        Some(m) if m == "delete" => Ok(InvalidateWith::Delete),
        Some(m) if m == "stale" => Ok(InvalidateWith::Stale { ttl }),
        Some(m) => err(format!("invalidate_with {m:?} must be delete or stale")),
    }
}

fn remote_markers(root: &Yaml) -> Result<Option<Vec<u8>>, ConfigError> {
    let Some(p) = get(root, "remote_markers") else {
        return Ok(None);
    };
    let p = string(p, "remote_markers")?;
    // The prefix is the start of a key: it must be one, and leave room for the key.
    if p.is_empty() || p.len() >= 250 || crate::template::check_key(p.as_bytes()).is_err() {
        return err(format!(
            "remote_markers {p:?} must be a non-empty key prefix without spaces or control characters"
        ));
    }
    Ok(Some(p.into_bytes()))
}

/// The logical decoding message prefix of remote marker tokens (`pg_logical_emit_message`),
/// the one the Python client's `remote_write` emits.
pub const MARKER_MESSAGE_PREFIX: &str = "memfleet.remote_marker";

fn remote_markers_release(root: &Yaml) -> Result<MarkerRelease, ConfigError> {
    let Some(r) = get(root, "remote_markers_release") else {
        return Ok(MarkerRelease::Change);
    };
    if get(root, "remote_markers").is_none() {
        return err("remote_markers_release needs remote_markers");
    }
    match string(r, "remote_markers_release")?.as_str() {
        "change" => Ok(MarkerRelease::Change),
        "message" => Ok(MarkerRelease::Message),
        m => err(format!(
            "remote_markers_release {m:?} must be change or message"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
source:
  dsn: "host=/run/postgresql port=5432 user=postgres dbname=app"
  slot: memfleet
  publication: memfleet
targets:
  - memcached: 127.0.0.1:11211
  - pool:
      servers: ["10.0.0.1:11211:1", "10.0.0.2:11212:2 beta"]
      hash: md5
      hash_tag: "{}"
tables:
  public.users: ["user:{id}", "email:{email}"]
  orders:
    keys: ["order:{id}"]
    changes: [update, delete]
"#;

    #[test]
    fn parses_the_sample() {
        let c = Config::from_yaml_str(SAMPLE).unwrap();
        assert_eq!(c.source.slot, "memfleet");
        assert_eq!(
            c.targets[0],
            TargetSpec::Memcached(Addr::Tcp("127.0.0.1:11211".into()))
        );
        let TargetSpec::Pool {
            servers,
            hash,
            distribution,
            hash_tag,
        } = &c.targets[1]
        else {
            panic!("not a pool");
        };
        assert_eq!(*hash, Hash::Md5);
        assert_eq!(*distribution, Distribution::Ketama);
        assert_eq!(*hash_tag, Some(*b"{}"));
        assert_eq!(servers[1].ring.point_label(), "beta");
        assert_eq!(servers[1].ring.weight, 2);
        assert_eq!(servers[0].ring.point_label(), "10.0.0.1");
        assert_eq!(c.tables[0].display_name(), "public.users");
        assert_eq!(c.tables[0].templates.len(), 2);
        assert_eq!(c.tables[1].display_name(), "public.orders");
        assert!(!c.tables[1].changes.insert && c.tables[1].changes.update);
        assert_eq!(c.max_batch_keys, DEFAULT_MAX_BATCH_KEYS);
        assert_eq!(c.source.replica_dsn, None);
    }

    #[test]
    fn replica_settings() {
        let text = "source: {dsn: x, replica_dsn: \"host=b port=5433\", replica_poll_ms: 5, replica_max_held_keys: 10}\n\
                    targets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}";
        let c = Config::from_yaml_str(text).unwrap();
        assert_eq!(c.source.replica_dsn.as_deref(), Some("host=b port=5433"));
        assert_eq!(c.source.replica_poll, Duration::from_millis(5));
        assert_eq!(c.source.replica_max_held_keys, 10);
        let c = Config::from_yaml_str("source: {dsn: x, replica_dsn: y}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}").unwrap();
        assert_eq!(
            c.source.replica_poll,
            Duration::from_millis(DEFAULT_REPLICA_POLL_MS)
        );
        assert_eq!(
            c.source.replica_max_held_keys,
            DEFAULT_REPLICA_MAX_HELD_KEYS
        );
    }

    #[test]
    fn refuses_bad_configs() {
        let base = "source: {dsn: x}\ntargets: [{memcached: 127.0.0.1:1}]\n";
        let cases = [
            ("", "exactly one"),
            ("source: {dsn: x}\ntables: {t: [\"k:{id}\"]}", "targets"),
            (&format!("{base}tables: {{t: []}}"), "non-empty list"),
            (&format!("{base}tables: {{t: [\"k:{{id\"]}}"), "unclosed"),
            (&format!("{base}tables: {{a.b.c: [\"k\"]}}"), "schema.table"),
            (&format!("{base}tables: {{t: [k]}}\nbogus: 1"), "unknown key \"bogus\""),
            ("source: {dsn: x, slot: Bad-Slot}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}", "lower-case"),
            ("source: {dsn: x}\ntargets: [{memcached: nohost}]\ntables: {t: [k]}", "host:port"),
            ("source: {dsn: x}\ntargets: [{pool: {servers: [\"h:1:0\"]}}]\ntables: {t: [k]}", "zero weight"),
            ("source: {dsn: x}\ntargets: [{pool: {servers: [\"h:1\"], hash: nope}}]\ntables: {t: [k]}", "known hash"),
            (&format!("{base}tables: {{t: {{keys: [k], changes: [merge]}}}}"), "insert, update or delete"),
            (&format!("{base}tables: {{t: [k], public.t: [j]}}"), "twice"),
            (&format!("{base}tables: {{t: [k]}}\ninvalidate_with: touch"), "delete or stale"),
            (&format!("{base}tables: {{t: [k]}}\ninvalidate_with: stale\nstale_ttl: 0"), "stale_ttl"),
            (&format!("{base}tables: {{t: [k]}}\nstale_ttl: 2592001"), "stale_ttl"),
            (&format!("{base}tables: {{t: [k]}}\nremote_markers: \"\""), "remote_markers"),
            (&format!("{base}tables: {{t: [k]}}\nremote_markers: \"r m:\""), "remote_markers"),
            (&format!("{base}tables: {{t: [k]}}\nremote_markers_release: message"), "needs remote_markers"),
            (&format!("{base}tables: {{t: [k]}}\nremote_markers: \"rm:\"\nremote_markers_release: key"), "change or message"),
            ("source: {dsn: x, replica_poll_ms: 5}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}", "source.replica_poll_ms needs source.replica_dsn"),
            ("source: {dsn: x, replica_dsn: y, replica_poll_ms: 0}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}", "source.replica_poll_ms must be a positive"),
            ("source: {dsn: x, replica_dsn: y, replica_max_held_keys: -1}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}", "replica_max_held_keys must be a positive"),
        ];
        for (text, want) in cases {
            let e = Config::from_yaml_str(text).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }
    #[test]
    fn invalidation_kind_and_markers() {
        let base = "source: {dsn: x}\ntargets: [{memcached: 127.0.0.1:1}]\ntables: {t: [k]}\n";
        let c = Config::from_yaml_str(base).unwrap();
        assert_eq!(c.invalidate_with, InvalidateWith::Delete);
        assert_eq!(c.remote_markers, None);
        let c = Config::from_yaml_str(&format!("{base}invalidate_with: stale")).unwrap();
        assert_eq!(
            c.invalidate_with,
            InvalidateWith::Stale {
                ttl: DEFAULT_STALE_TTL
            }
        );
        let c = Config::from_yaml_str(&format!(
            "{base}invalidate_with: stale\nstale_ttl: 5\nremote_markers: \"rm:\""
        ))
        .unwrap();
        assert_eq!(c.invalidate_with, InvalidateWith::Stale { ttl: 5 });
        assert_eq!(c.remote_markers.as_deref(), Some(&b"rm:"[..]));
        assert_eq!(c.remote_markers_release, MarkerRelease::Change);
        let c = Config::from_yaml_str(&format!(
            "{base}remote_markers: \"rm:\"\nremote_markers_release: message"
        ))
        .unwrap();
        assert_eq!(c.remote_markers_release, MarkerRelease::Message);
    }

    /// Pool servers are read by the router's parser: the same entries are refused, and the
    /// accepted ones sit on the ring under the router's names (the raw port text included).
    #[test]
    fn pool_servers_as_the_router_reads_them() {
        let server = |line: &str| parse_pool_server(line).map_err(|e| e.0);
        for line in [
            "h:011212:1",
            "h:11212:3 beta",
            "[::1]:11211:1",
            "/tmp/m.sock:2 m",
        ] {
            let ours = server(line).unwrap();
            let routes = nutconf::parse_server(line).unwrap().ring_server();
            assert_eq!(ours.ring, routes, "{line}");
        }
        assert_eq!(server("h:011212:1").unwrap().ring.point_label(), "h:011212");
        assert_eq!(
            server("/tmp/m.sock:2").unwrap().addr,
            Addr::Unix("/tmp/m.sock".into())
        );
        // Without a weight: weight 1, as documented.
        let bare = server("10.0.0.2:11212 beta").unwrap();
        assert_eq!(bare.ring, server("10.0.0.2:11212:1 beta").unwrap().ring);
        assert_eq!(bare.addr, Addr::Tcp("10.0.0.2:11212".into()));
        for (line, why) in [
            ("h:+1:1", "invalid port"),
            ("h:1:+1", "invalid weight"),
            ("h:1:1 two words", "invalid weight"),
            ("h:0:5", "invalid port"),
            (":1:1", "no host"),
            ("/a:b:1", "format string"),
        ] {
            let e = server(line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }

    /// Aliases of aliases: 6 lines stand for a million nodes, which `YamlLoader` would build
    /// (the invalidate_config fuzz target ran out of memory on 9 such lines).
    #[test]
    fn alias_expansion_is_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..6 {
            let uses = vec![format!("*a{}", i - 1); 10].join(", ");
            text += &format!("a{i}: &a{i} [{uses}]\n");
        }
        text += "source: {dsn: x}\ntargets: *a5\ntables: {t: [\"k:{id}\"]}\n";
        let e = Config::from_yaml_str(&text).unwrap_err().0;
        assert!(e.contains("aliases expand"), "{e}");
        // Aliases within the limit still work.
        let shared = "source: {dsn: x}\ntargets: [&m {memcached: /tmp/m.sock}]\n\
                      tables: {a: &k [\"k:{id}\"], b: *k}\n";
        let c = Config::from_yaml_str(shared).unwrap();
        assert_eq!(c.tables[0].templates, c.tables[1].templates);
    }
}
