//! Command-line options (memtier_benchmark-style) and their validation.

use std::fmt;
use std::str::FromStr;

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
    /// Z zipf, S sequential. E.g. `R:R`, `S:S`, `G`.
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

    /// Keys per get request (1 = plain single-key gets).
    #[arg(long, default_value_t = 1)]
    pub multi_key_get: usize,

    /// Run for this many seconds (instead of --requests).
    #[arg(long, value_name = "SECS", conflicts_with = "requests")]
    pub test_time: Option<u64>,

    /// Requests per connection (default 10000 unless --test-time is given).
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,

    /// Total request rate over all connections (requests/s). Latency is then measured
    /// from each request's intended send time, so server stalls are not hidden.
    #[arg(long)]
    pub rate: Option<u64>,

    /// Wire protocol: text (get/set) or meta (mg/ms).
    #[arg(long, default_value = "text")]
    pub protocol: Protocol,

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

/// SET:GET mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ratio {
    pub set: u32,
    pub get: u32,
}

impl FromStr for Ratio {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once(':')
            .ok_or_else(|| format!("ratio `{s}` must be SET:GET, e.g. 1:10"))?;
        let set: u32 = a
            .trim()
            .parse()
            .map_err(|_| format!("bad SET part in ratio `{s}`"))?;
        let get: u32 = b
            .trim()
            .parse()
            .map_err(|_| format!("bad GET part in ratio `{s}`"))?;
        if set == 0 && get == 0 {
            return Err("ratio 0:0 sends nothing".into());
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
}

impl KeyPattern {
    fn from_letter(s: &str) -> Result<Self, String> {
        match s.trim() {
            "R" | "r" => Ok(KeyPattern::Random),
            "G" | "g" => Ok(KeyPattern::Gaussian),
            "Z" | "z" => Ok(KeyPattern::Zipf),
            "S" | "s" => Ok(KeyPattern::Sequential),
            other => Err(format!(
                "unknown key pattern `{other}` (R random, G gaussian, Z zipf, S sequential)"
            )),
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once('-')
            .ok_or_else(|| format!("data size range `{s}` must be MIN-MAX"))?;
        let min: usize = a.trim().parse().map_err(|_| format!("bad MIN in `{s}`"))?;
        let max: usize = b.trim().parse().map_err(|_| format!("bad MAX in `{s}`"))?;
        if min > max {
            return Err(format!("data size range `{s}`: MIN > MAX"));
        }
        Ok(SizeRange { min, max })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Text,
    Meta,
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" | "memcache_text" | "memcache" => Ok(Protocol::Text),
            "meta" | "memcache_meta" => Ok(Protocol::Meta),
            _ => Err(format!("unknown protocol `{s}` (text or meta)")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
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
pub const MAX_KEY_LEN: usize = 250;

/// Validated, ready-to-run settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub args: BenchArgs,
    pub limit: Limit,
    pub size: SizeRange,
    pub seed: u64,
    /// Prepopulation: each connection sends exactly its sequential slice of keys.
    pub one_pass: bool,
}

impl BenchArgs {
    pub fn validate(&self) -> Result<Config, String> {
        if self.threads == 0 || self.clients == 0 {
            return Err("--threads and --clients must be at least 1".into());
        }
        if self.pipeline == 0 {
            return Err("--pipeline must be at least 1".into());
        }
        if self.multi_key_get == 0 {
            return Err("--multi-key-get must be at least 1".into());
        }
        if self.key_minimum > self.key_maximum {
            return Err("--key-minimum is larger than --key-maximum".into());
        }
        let longest_key = self.key_prefix.len() + self.key_maximum.to_string().len();
        if longest_key > MAX_KEY_LEN {
            return Err(format!(
                "keys would be {longest_key} bytes long; memcached allows {MAX_KEY_LEN}"
            ));
        }
        if self.key_prefix.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err("--key-prefix must not contain spaces or control characters".into());
        }
        let uses = |p: KeyPattern| self.key_pattern.set == p || self.key_pattern.get == p;
        if uses(KeyPattern::Zipf) && !(self.key_zipf_exp > 0.0 && self.key_zipf_exp.is_finite()) {
            return Err("--key-zipf-exp must be a positive number".into());
        }
        if let Some(sd) = self.key_stddev {
            if !(sd > 0.0 && sd.is_finite()) {
                return Err("--key-stddev must be positive".into());
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
            return Err(format!("data size above {MAX_DATA_SIZE} bytes"));
        }
        let limit = match (self.test_time, self.requests) {
            (Some(0), _) => return Err("--test-time must be at least 1".into()),
            (Some(t), _) => Limit::Seconds(t),
            (None, Some(0)) => return Err("--requests must be at least 1".into()),
            (None, Some(n)) => Limit::Requests(n),
            (None, None) => Limit::Requests(10_000),
        };
        if self.rate == Some(0) {
            return Err("--rate must be at least 1".into());
        }
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed)
        });
        Ok(Config {
            args: self.clone(),
            limit,
            size,
            seed,
            one_pass: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
