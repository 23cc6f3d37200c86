//! Command-line options (memtier_benchmark-style) and their validation.

use std::fmt;
use std::str::FromStr;

use proto::KEY_MAX_LENGTH;

use crate::error::{ArgError, BenchError};

/// Options of `memfleet bench`. Names and defaults follow memtier_benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Server address (host name or IP).
    #[arg(short = 's', long, default_value = "127.0.0.1")]
    pub server: String,

    /// Server TCP port.
    #[arg(short = 'p', long, default_value_t = 11211)]
    pub port: u16,

    /// Connect to a unix socket instead of TCP.
    #[arg(short = 'S', long, value_name = "PATH")]
    pub unix_socket: Option<String>,

    /// Number of load threads.
    #[arg(short = 't', long, default_value_t = 4)]
    pub threads: usize,

    /// Connections per thread.
    #[arg(short = 'c', long, default_value_t = 50)]
    pub clients: usize,

    /// Requests each connection keeps in flight.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,

    /// SET:GET ratio, e.g. 1:10 (one set for every ten gets), 1:0 (sets only).
    #[arg(long, default_value = "1:10")]
    pub ratio: Ratio,

    /// Prefix of every key.
    #[arg(long, default_value = "memtier-")]
    pub key_prefix: String,

    /// Smallest key number.
    #[arg(long, default_value_t = 0)]
    pub key_minimum: u64,

    /// Largest key number (inclusive).
    #[arg(long, default_value_t = 10_000_000)]
    pub key_maximum: u64,

    /// Key distribution, one letter or SET:GET pair: R random uniform, G gaussian,
    /// Z zipf, S sequential (every connection walks the whole range), P parallel (every
    /// connection walks its own slice of the range). E.g. `R:R`, `P:P`, `G`.
    #[arg(long, default_value = "R:R")]
    pub key_pattern: KeyPatterns,

    /// Exponent of the zipf distribution (pattern Z).
    #[arg(long, default_value_t = 1.0)]
    pub key_zipf_exp: f64,

    /// Standard deviation of the gaussian pattern (default: key range / 6).
    #[arg(long)]
    pub key_stddev: Option<f64>,

    /// Centre of the gaussian pattern (default: middle of the key range).
    #[arg(long)]
    pub key_median: Option<f64>,

    /// Value size in bytes.
    #[arg(
        short = 'd',
        long,
        default_value_t = 32,
        conflicts_with = "data_size_range"
    )]
    pub data_size: usize,

    /// Uniformly random value size, MIN-MAX bytes.
    #[arg(long, value_name = "MIN-MAX")]
    pub data_size_range: Option<SizeRange>,

    /// Keys per get request (1 = plain single-key gets; memtier's 0 means the same).
    #[arg(long, default_value_t = 1)]
    pub multi_key_get: usize,

    /// Run for this many seconds (instead of --requests).
    #[arg(long, value_name = "SECS", conflicts_with = "requests")]
    pub test_time: Option<u64>,

    /// Requests per connection (default 10000 unless --test-time is given), or `allkeys`:
    /// as many as it takes to cover the key range once.
    #[arg(short = 'n', long)]
    pub requests: Option<Requests>,

    /// Total request rate over all connections (requests/s). Latency is then measured
    /// from each request's intended send time, so server stalls are not hidden.
    #[arg(long, conflicts_with = "rate_limiting")]
    pub rate: Option<u64>,

    /// memtier's rate per connection (requests/s); the same as --rate of this times the
    /// number of connections.
    #[arg(long, value_name = "N")]
    pub rate_limiting: Option<u64>,

    /// Wire protocol: text (get/set; memtier's `memcache_text`), meta (mg/ms) or redis
    /// (RESP2 SET/GET/MGET; also `resp2`).
    #[arg(short = 'P', long, default_value = "text")]
    pub protocol: Protocol,

    /// Run the whole test this many times; each run is reported, then their aggregate.
    #[arg(short = 'x', long, default_value_t = 1)]
    pub run_count: u32,

    /// Latency percentiles shown in the report table, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "50,99,99.9")]
    pub print_percentiles: Percentiles,

    /// Every connection draws its own random stream (always the case in memfleet bench;
    /// accepted for memtier command lines).
    #[arg(long)]
    pub distinct_client_seed: bool,

    /// Seed from the clock (the default here unless --seed is given; memtier's default
    /// seed is a constant).
    #[arg(long, conflicts_with = "seed")]
    pub randomize: bool,

    /// Values are random printable bytes (always the case; accepted for memtier command
    /// lines).
    #[arg(short = 'R', long)]
    pub random_data: bool,

    /// Expiry of each stored item drawn uniformly from MIN-MAX seconds.
    #[arg(long, value_name = "MIN-MAX", conflicts_with = "ttl")]
    pub expiry_range: Option<SizeRange>,

    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,

    /// memtier options memfleet bench does not have, caught to say so by name.
    #[command(flatten)]
    pub unsupported: Unsupported,

    /// Write the final report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json_out_file: Option<String>,

    /// Do not print the latency distribution table.
    #[arg(long)]
    pub hide_histogram: bool,

    /// Expiry time of stored items, in seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    pub ttl: u32,

    /// Before the measured run, write every key of the range once (not measured).
    #[arg(long)]
    pub prepopulate: bool,

    /// Random seed (default: from the clock). Same seed, same key sequence.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Do not print the per-second progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// memtier_benchmark options that memfleet bench refuses, each with the reason. They are
/// parsed (hidden from --help) only so that the refusal names them and says why, rather than
/// clap's generic "unexpected argument".
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Unsupported {
    #[arg(long, hide = true)]
    cluster_mode: bool,
    #[arg(long, hide = true, value_name = "CMD")]
    command: Option<String>,
    #[arg(long, hide = true)]
    data_size_list: Option<String>,
    #[arg(long, hide = true)]
    data_size_pattern: Option<String>,
    #[arg(long, hide = true)]
    data_offset: Option<String>,
    #[arg(long, hide = true)]
    data_import: Option<String>,
    #[arg(long, hide = true)]
    data_verify: bool,
    #[arg(long, hide = true)]
    verify_only: bool,
    #[arg(long, hide = true)]
    wait_ratio: Option<String>,
    #[arg(long, hide = true)]
    select_db: Option<String>,
    #[arg(long, hide = true)]
    reconnect_interval: Option<String>,
    #[arg(short = 'a', long, hide = true)]
    authenticate: Option<String>,
    #[arg(long, hide = true)]
    print_all_runs: bool,
}

impl Unsupported {
    /// The first refused option given, as an error message.
    pub fn check(&self) -> Result<(), ArgError> {
        let given: [(bool, &str, &str); 12] = [
            (self.cluster_mode, "--cluster-mode", "Redis Cluster is not spoken; point it at `memfleet route` instead"),
            (self.command.is_some(), "--command", "arbitrary commands are not supported; only the set/get mix"),
            (self.data_size_list.is_some(), "--data-size-list", "not supported yet; use --data-size-range"),
            (self.data_size_pattern.is_some(), "--data-size-pattern", "not supported yet; sizes from --data-size-range are uniformly random"),
            (self.data_offset.is_some(), "--data-offset", "SETRANGE/GETRANGE are not sent, only SET/GET/MGET"),
            (self.data_import.is_some(), "--data-import", "importing data is not supported"),
            (self.data_verify || self.verify_only, "--data-verify/--verify-only", "data verification is not supported"),
            (self.wait_ratio.is_some(), "--wait-ratio", "WAIT (replication) is not sent"),
            (self.select_db.is_some(), "--select-db", "not supported yet; Redis database 0 is used (a Redis pool of memfleet route selects its redis_db itself)"),
            (self.reconnect_interval.is_some(), "--reconnect-interval", "not supported yet; connections stay open for the whole run"),
            (self.authenticate.is_some(), "--authenticate", "authentication is not supported yet"),
            (self.print_all_runs, "--print-all-runs", "every run is always printed"),
        ];
        match given.iter().find(|g| g.0) {
            Some(&(_, option, why)) => Err(ArgError::Unsupported { option, why }),
            None => Ok(()),
        }
    }
}

fn invalid(message: impl Into<String>) -> ArgError {
    ArgError::Invalid(message.into())
}

/// `A<sep>B`, both halves parsed; `bad` is the message for no separator, a bad A, a bad B.
fn parse_pair<T: FromStr>(s: &str, sep: char, bad: [String; 3]) -> Result<(T, T), ArgError> {
    let [shape, first, second] = bad;
    let (a, b) = s.split_once(sep).ok_or_else(|| invalid(shape))?;
    let a = a.trim().parse().map_err(|_| invalid(first))?;
    let b = b.trim().parse().map_err(|_| invalid(second))?;
    Ok((a, b))
}

/// `-n`: a count, or memtier's `allkeys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requests {
    Count(u64),
    AllKeys,
}

impl FromStr for Requests {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        if s.eq_ignore_ascii_case("allkeys") {
            return Ok(Requests::AllKeys);
        }
        s.parse()
            .map(Requests::Count)
            .map_err(|_| invalid(format!("requests `{s}` must be a number or `allkeys`")))
    }
}

/// `--print-percentiles 50,90,99.9`.
#[derive(Debug, Clone, PartialEq)]
pub struct Percentiles(pub Vec<f64>);

impl FromStr for Percentiles {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let list = s
            .split(',')
            .map(|p| match p.trim().parse::<f64>() {
                Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
                _ => Err(invalid(format!(
                    "percentile `{p}` must be a number from 0 to 100"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Percentiles(list))
    }
}

/// SET:GET mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    pub set: u32,
    pub get: u32,
}

impl FromStr for Ratio {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let (set, get): (u32, u32) = parse_pair(
            s,
            ':',
            [
                format!("ratio `{s}` must be SET:GET, e.g. 1:10"),
                format!("bad SET part in ratio `{s}`"),
                format!("bad GET part in ratio `{s}`"),
            ],
        )?;
        if set == 0 && get == 0 {
            return Err(invalid("ratio 0:0 sends nothing"));
        }
        Ok(Ratio { set, get })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.set, self.get)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPattern {
    Random,
    Gaussian,
    Zipf,
    Sequential,
    Parallel,
}

impl KeyPattern {
    fn from_letter(s: &str) -> Result<Self, ArgError> {
        match s.trim() {
            "R" | "r" => Ok(KeyPattern::Random),
            "G" | "g" => Ok(KeyPattern::Gaussian),
            "Z" | "z" => Ok(KeyPattern::Zipf),
            "S" | "s" => Ok(KeyPattern::Sequential),
            "P" | "p" => Ok(KeyPattern::Parallel),
            other => Err(invalid(format!(
                "unknown key pattern `{other}` (R random, G gaussian, Z zipf, S sequential, P parallel)"
            ))),
        }
    }
}

/// Key patterns for sets and for gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPatterns {
    pub set: KeyPattern,
    pub get: KeyPattern,
}

impl FromStr for KeyPatterns {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        match s.split_once(':') {
            Some((a, b)) => Ok(KeyPatterns {
                set: KeyPattern::from_letter(a)?,
                get: KeyPattern::from_letter(b)?,
            }),
            None => {
                let p = KeyPattern::from_letter(s)?;
                Ok(KeyPatterns { set: p, get: p })
            }
        }
    }
}

/// Inclusive value-size range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRange {
    pub min: usize,
    pub max: usize,
}

impl FromStr for SizeRange {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let (min, max): (usize, usize) = parse_pair(
            s,
            '-',
            [
                format!("data size range `{s}` must be MIN-MAX"),
                format!("bad MIN in `{s}`"),
                format!("bad MAX in `{s}`"),
            ],
        )?;
        if min > max {
            return Err(invalid(format!("data size range `{s}`: MIN > MAX")));
        }
        Ok(SizeRange { min, max })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Text,
    Meta,
    /// RESP2: `SET`, `GET`, `MGET` (memtier's `redis`/`resp2`).
    Redis,
}

impl FromStr for Protocol {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        match s {
            "text" | "memcache_text" | "memcache" => Ok(Protocol::Text),
            "meta" | "memcache_meta" => Ok(Protocol::Meta),
            "redis" | "resp2" => Ok(Protocol::Redis),
            "resp3" | "memcache_binary" => Err(invalid(format!(
                "protocol `{s}` is not supported by memfleet bench (memcache_text, meta, redis)"
            ))),
            _ => Err(invalid(format!(
                "unknown protocol `{s}` (memcache_text, meta, redis)"
            ))),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
            Protocol::Redis => "redis",
        })
    }
}

/// When a connection stops sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Requests(u64),
    Seconds(u64),
}

/// Largest value we agree to send: memcached's default item limit is 1 MB, and a
/// bigger one would only measure the server's refusal.
pub const MAX_DATA_SIZE: usize = 16 << 20;

/// Validated, ready-to-run settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub args: BenchArgs,
    pub limit: Limit,
    pub size: SizeRange,
    pub seed: u64,
    /// Each connection sends exactly its parallel slice of keys (prepopulation, `-n allkeys`
    /// with `P:P`).
    pub one_pass: bool,
    /// `--tls`: the client config every connection shares.
    pub tls: Option<crate::tls::TlsClient>,
}

impl BenchArgs {
    pub fn validate(&self) -> Result<Config, BenchError> {
        if self.threads == 0 || self.clients == 0 {
            return Err(invalid("--threads and --clients must be at least 1").into());
        }
        if self.pipeline == 0 {
            return Err(invalid("--pipeline must be at least 1").into());
        }
        self.unsupported.check()?;
        if self.run_count == 0 {
            return Err(invalid("--run-count must be at least 1").into());
        }
        if self.print_percentiles.0.is_empty() {
            return Err(invalid("--print-percentiles needs at least one percentile").into());
        }
        if self.key_minimum > self.key_maximum {
            return Err(invalid("--key-minimum is larger than --key-maximum").into());
        }
        let longest_key = self.key_prefix.len() + self.key_maximum.to_string().len();
        if longest_key > KEY_MAX_LENGTH {
            return Err(invalid(format!(
                "keys would be {longest_key} bytes long; memcached allows {KEY_MAX_LENGTH}"
            ))
            .into());
        }
        if self.key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(
                invalid("--key-prefix must not contain spaces or control characters").into(),
            );
        }
        let uses = |p: KeyPattern| self.key_pattern.set == p || self.key_pattern.get == p;
        if uses(KeyPattern::Zipf) && !(self.key_zipf_exp > 0.0 && self.key_zipf_exp.is_finite()) {
            return Err(invalid("--key-zipf-exp must be a positive number").into());
        }
        if let Some(sd) = self.key_stddev {
            if !(sd > 0.0 && sd.is_finite()) {
                return Err(invalid("--key-stddev must be positive").into());
            }
        }
        let size = match self.data_size_range {
            Some(r) => r,
            None => SizeRange {
                min: self.data_size,
                max: self.data_size,
            },
        };
        if size.max > MAX_DATA_SIZE {
            return Err(invalid(format!("data size above {MAX_DATA_SIZE} bytes")).into());
        }
        let conns = (self.threads * self.clients) as u64;
        let range = self.key_maximum - self.key_minimum + 1;
        let parallel = self.key_pattern
            == KeyPatterns {
                set: KeyPattern::Parallel,
                get: KeyPattern::Parallel,
            };
        let limit = match (self.test_time, self.requests) {
            (Some(0), _) => return Err(invalid("--test-time must be at least 1").into()),
            (Some(t), _) => Limit::Seconds(t),
            (None, Some(Requests::Count(0))) => {
                return Err(invalid("--requests must be at least 1").into())
            }
            (None, Some(Requests::Count(n))) => Limit::Requests(n),
            (None, Some(Requests::AllKeys)) => Limit::Requests(range.div_ceil(conns)),
            (None, None) => Limit::Requests(10_000),
        };
        let rate = match (self.rate, self.rate_limiting) {
            (Some(0), _) => return Err(invalid("--rate must be at least 1").into()),
            (_, Some(0)) => return Err(invalid("--rate-limiting must be at least 1").into()),
            (_, Some(per_conn)) => Some(per_conn.saturating_mul(conns)),
            (r, None) => r,
        };
        if let Some(r) = self.expiry_range {
            if r.max > u32::MAX as usize {
                return Err(invalid("--expiry-range above 2^32 seconds").into());
            }
        }
        if self.tls.tls && self.unix_socket.is_some() {
            return Err(invalid("--tls runs over TCP only, not --unix-socket").into());
        }
        let seed = self.seed.filter(|_| !self.randomize).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed)
        });
        let mut args = self.clone();
        args.multi_key_get = self.multi_key_get.max(1);
        args.rate = rate;
        Ok(Config {
            args,
            limit,
            size,
            seed,
            one_pass: parallel && self.requests == Some(Requests::AllKeys),
            tls: self.tls.client(&self.server)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TlsError;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn parse(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
        let mut v = vec!["bench"];
        v.extend_from_slice(argv);
        Cli::try_parse_from(v).map(|c| c.args)
    }

    #[test]
    fn defaults_match_memtier() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.server, "127.0.0.1");
        assert_eq!(a.port, 11211);
        assert_eq!(a.threads, 4);
        assert_eq!(a.clients, 50);
        assert_eq!(a.pipeline, 1);
        assert_eq!(a.ratio, Ratio { set: 1, get: 10 });
        assert_eq!(a.key_prefix, "memtier-");
        assert_eq!(a.key_minimum, 0);
        assert_eq!(a.key_maximum, 10_000_000);
        assert_eq!(
            a.key_pattern,
            KeyPatterns {
                set: KeyPattern::Random,
                get: KeyPattern::Random
            }
        );
        assert_eq!(a.protocol, Protocol::Text);
        assert_eq!(a.multi_key_get, 1);
        let c = a.validate().unwrap();
        assert_eq!(c.limit, Limit::Requests(10_000));
        assert_eq!(c.size, SizeRange { min: 32, max: 32 });
    }

    #[test]
    fn ratio_parsing() {
        assert_eq!("1:10".parse::<Ratio>(), Ok(Ratio { set: 1, get: 10 }));
        assert_eq!("1:0".parse::<Ratio>(), Ok(Ratio { set: 1, get: 0 }));
        assert_eq!("0:1".parse::<Ratio>(), Ok(Ratio { set: 0, get: 1 }));
        assert!("0:0".parse::<Ratio>().is_err());
        assert!("1".parse::<Ratio>().is_err());
        assert!("a:b".parse::<Ratio>().is_err());
        assert!("-1:2".parse::<Ratio>().is_err());
        assert!(parse(&["--ratio", "3:x"]).is_err());
    }

    #[test]
    fn key_pattern_pairs_and_single_letters() {
        let p: KeyPatterns = "S:R".parse().unwrap();
        assert_eq!(p.set, KeyPattern::Sequential);
        assert_eq!(p.get, KeyPattern::Random);
        let p: KeyPatterns = "G".parse().unwrap();
        assert_eq!((p.set, p.get), (KeyPattern::Gaussian, KeyPattern::Gaussian));
        let p: KeyPatterns = "Z:Z".parse().unwrap();
        assert_eq!(p.get, KeyPattern::Zipf);
        assert!("X:R".parse::<KeyPatterns>().is_err());
        assert!("".parse::<KeyPatterns>().is_err());
        let a = parse(&["--key-pattern=S:S"]).unwrap();
        assert_eq!(a.key_pattern.set, KeyPattern::Sequential);
    }

    #[test]
    fn data_size_and_range() {
        let c = parse(&["--data-size", "100"]).unwrap().validate().unwrap();
        assert_eq!(c.size, SizeRange { min: 100, max: 100 });
        let c = parse(&["--data-size-range", "10-2000"])
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.size, SizeRange { min: 10, max: 2000 });
        assert!("20-10".parse::<SizeRange>().is_err());
        assert!("20".parse::<SizeRange>().is_err());
        assert!(parse(&["--data-size", "5", "--data-size-range", "1-2"]).is_err());
    }

    #[test]
    fn limits_and_validation() {
        let c = parse(&["--test-time", "5"]).unwrap().validate().unwrap();
        assert_eq!(c.limit, Limit::Seconds(5));
        let c = parse(&["-n", "7"]).unwrap().validate().unwrap();
        assert_eq!(c.limit, Limit::Requests(7));
        assert!(parse(&["--test-time", "5", "--requests", "3"]).is_err());
        assert!(parse(&["--threads", "0"]).unwrap().validate().is_err());
        assert!(parse(&["--pipeline", "0"]).unwrap().validate().is_err());
        assert!(parse(&["--key-minimum", "10", "--key-maximum", "5"])
            .unwrap()
            .validate()
            .is_err());
        assert!(parse(&["--key-prefix", "a b"]).unwrap().validate().is_err());
        let long = "k".repeat(245);
        assert!(parse(&["--key-prefix", &long]).unwrap().validate().is_err());
        assert!(parse(&["--key-pattern", "Z", "--key-zipf-exp", "0"])
            .unwrap()
            .validate()
            .is_err());
    }

    #[test]
    fn protocol_and_misc() {
        let a = parse(&[
            "--protocol",
            "meta",
            "--unix-socket",
            "/tmp/x.sock",
            "--rate",
            "1000",
            "--seed",
            "9",
            "--multi-key-get",
            "10",
            "--json-out-file",
            "o.json",
            "--hide-histogram",
            "--ttl",
            "60",
        ])
        .unwrap();
        assert_eq!(a.protocol, Protocol::Meta);
        assert_eq!(a.unix_socket.as_deref(), Some("/tmp/x.sock"));
        assert_eq!(a.rate, Some(1000));
        assert_eq!(a.multi_key_get, 10);
        assert!(a.hide_histogram);
        assert_eq!(a.ttl, 60);
        assert_eq!(a.validate().unwrap().seed, 9);
        assert!(parse(&["--protocol", "binary"]).is_err());
    }

    #[test]
    fn memtier_command_lines() {
        let a = parse(&[
            "-s",
            "10.0.0.5",
            "-p",
            "6379",
            "-P",
            "memcache_text",
            "-c",
            "8",
            "-t",
            "2",
            "-n",
            "500",
            "-d",
            "100",
            "-R",
            "--ratio=1:4",
            "--pipeline=4",
            "--key-pattern=P:P",
            "--key-minimum=1",
            "--key-maximum=999",
            "--distinct-client-seed",
            "--randomize",
            "--print-percentiles",
            "50,90,99.99",
            "-x",
            "3",
            "--expiry-range=10-20",
            "--hide-histogram",
        ])
        .unwrap();
        assert_eq!(a.protocol, Protocol::Text);
        assert_eq!(a.key_pattern.set, KeyPattern::Parallel);
        assert_eq!(a.run_count, 3);
        assert_eq!(a.print_percentiles, Percentiles(vec![50.0, 90.0, 99.99]));
        assert_eq!(a.expiry_range, Some(SizeRange { min: 10, max: 20 }));
        assert!(a.randomize && a.distinct_client_seed && a.random_data);
        let c = a.validate().unwrap();
        assert_eq!(c.limit, Limit::Requests(500));
        assert!(parse(&["--randomize", "--seed", "1"]).is_err());
        assert!(parse(&["--ttl", "5", "--expiry-range", "1-2"]).is_err());
        for p in ["redis", "resp2"] {
            assert_eq!(parse(&["-P", p]).unwrap().protocol, Protocol::Redis);
        }
        for p in ["resp3", "memcache_binary"] {
            let e = parse(&["--protocol", p]).unwrap_err().to_string();
            assert!(e.contains("not supported"), "{e}");
        }
        assert!(parse(&["--print-percentiles", "50,101"]).is_err());
        assert!(parse(&["-x", "0"]).unwrap().validate().is_err());
        // memtier's "no multi-get" is 0.
        let c = parse(&["--multi-key-get", "0"])
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.args.multi_key_get, 1);
    }

    #[test]
    fn allkeys_and_per_connection_rate() {
        let c = parse(&[
            "-n",
            "allkeys",
            "--key-pattern",
            "P:P",
            "--key-maximum",
            "99",
            "-t",
            "2",
            "-c",
            "3",
        ])
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(c.limit, Limit::Requests(17));
        assert!(c.one_pass);
        let c = parse(&["-n", "ALLKEYS", "--key-maximum", "99", "-t", "1", "-c", "4"])
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!((c.limit, c.one_pass), (Limit::Requests(25), false));
        assert!(parse(&["-n", "some"]).is_err());
        let c = parse(&["--rate-limiting", "100", "-t", "2", "-c", "5"])
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.args.rate, Some(1000));
        assert!(parse(&["--rate", "5", "--rate-limiting", "1"]).is_err());
    }

    #[test]
    fn tls_options_need_tls_and_come_in_pairs() {
        assert!(parse(&["--cacert", "ca.pem"]).unwrap().validate().is_err());
        assert!(parse(&["--tls", "--cert", "c.pem"]).is_err());
        let e = parse(&["--tls", "--cacert", "/nonexistent/ca.pem"])
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, BenchError::Tls(TlsError::Certs { path, .. }) if path == "/nonexistent/ca.pem"),
            "{e}"
        );
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let c = parse(&["--tls", "--tls-skip-verify", "--sni", "cache.example"])
            .unwrap()
            .validate()
            .unwrap();
        assert!(c.tls.is_some());
        assert!(parse(&[]).unwrap().validate().unwrap().tls.is_none());
    }

    #[test]
    fn unsupported_memtier_options_are_named() {
        for (argv, name) in [
            (&["--cluster-mode"][..], "--cluster-mode"),
            (&["--command", "SET __key__ __data__"][..], "--command"),
            (&["--data-size-list", "10:1,20:1"][..], "--data-size-list"),
            (&["--select-db", "2"][..], "--select-db"),
            (&["--reconnect-interval", "10"][..], "--reconnect-interval"),
            (&["-a", "pw"][..], "--authenticate"),
            (&["--wait-ratio", "1:1"][..], "--wait-ratio"),
        ] {
            let e = parse(argv).unwrap().validate().unwrap_err();
            assert!(
                matches!(e, BenchError::Args(ArgError::Unsupported { option, .. }) if option == name),
                "{e}"
            );
            let e = e.to_string();
            assert!(e.starts_with(name) && e.contains("not supported"), "{e}");
        }
    }
}
