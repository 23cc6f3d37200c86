//! Counters and HDR latency histograms kept per thread and merged at the end.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency tracked (60 s in µs); slower replies are clamped to it.
pub const MAX_LATENCY_US: u64 = 60_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("static histogram bounds")
}

#[inline]
pub fn record(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.clamp(1, MAX_LATENCY_US));
}

/// Counters of one request type.
#[derive(Debug, Clone)]
pub struct OpStats {
    pub ops: u64,
    pub hist: Histogram<u64>,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            ops: 0,
            hist: new_histogram(),
        }
    }
}

impl OpStats {
    pub fn merge(&mut self, o: &OpStats) {
        self.ops += o.ops;
        self.hist.add(&o.hist).expect("same bounds");
    }
}

/// Everything one thread (or the whole run) counted.
/// Distinct error lines kept by count; more would let a server that answers every request
/// with a different line grow the map without bound.
pub const ERROR_KINDS: usize = 16;
/// Where error lines past the first `ERROR_KINDS` distinct ones are counted.
pub const OTHER_ERRORS: &str = "(other error lines)";

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub sets: OpStats,
    pub gets: OpStats,
    /// Keys asked for by gets that came back with a value.
    pub hits: u64,
    pub misses: u64,
    /// Error replies (ERROR, CLIENT_ERROR, SERVER_ERROR, NOT_STORED, ...).
    pub errors: u64,
    /// How often each error reply's line came, for the first `ERROR_KINDS` distinct lines
    /// (later ones count under `OTHER_ERRORS`).
    pub error_replies: std::collections::BTreeMap<String, u64>,
    /// Connections that failed to connect or broke mid-run.
    pub connection_errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        self.sets.merge(&o.sets);
        self.gets.merge(&o.gets);
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        for (line, n) in &o.error_replies {
            self.add_error_reply(line, *n);
        }
        self.connection_errors += o.connection_errors;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
    }

    /// Counts one error reply by its line (as text, at most 120 characters).
    pub fn note_error_reply(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(&line[..line.len().min(120)]);
        self.add_error_reply(text.trim_end(), 1);
    }

    fn add_error_reply(&mut self, line: &str, n: u64) {
        let known = self.error_replies.contains_key(line);
        let key = if known || self.error_replies.len() < ERROR_KINDS {
            line
        } else {
            OTHER_ERRORS
        };
        *self.error_replies.entry(key.to_owned()).or_default() += n;
    }

    /// Error reply lines, most frequent first.
    pub fn error_replies_by_count(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .error_replies
            .iter()
            .map(|(line, n)| (line.clone(), *n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    pub fn ops(&self) -> u64 {
        self.sets.ops + self.gets.ops
    }

    pub fn all_latency(&self) -> Histogram<u64> {
        let mut h = self.sets.hist.clone();
        h.add(&self.gets.hist).expect("same bounds");
        h
    }
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Latency {
    pub avg_us: f64,
    pub min_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            avg_us: h.mean(),
            min_us: h.min(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// Percentile table printed (and written to JSON) unless hidden.
pub const TABLE_PERCENTILES: [f64; 12] = [
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 99.999, 100.0,
];

pub fn percentile_table(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    percentiles(h, &TABLE_PERCENTILES)
}

/// `(p, latency µs at percentile p)` for each of `ps` (0 for an empty histogram).
pub fn percentiles(h: &Histogram<u64>, ps: &[f64]) -> Vec<(f64, u64)> {
    ps.iter()
        .map(|&p| {
            let v = if h.is_empty() {
                0
            } else if p >= 100.0 {
                h.max()
            } else {
                h.value_at_percentile(p)
            };
            (p, v)
        })
        .collect()
}

/// Counts of one second of the run (all threads).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Second {
    pub second: u64,
    pub ops: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub p99_us: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_set() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            record(&mut h, v);
        }
        let l = Latency::of(&h);
        assert_eq!(l.min_us, 1);
        assert_eq!(l.max_us, 1000);
        assert_eq!(l.p50_us, 500);
        assert_eq!(l.p90_us, 900);
        assert_eq!(l.p99_us, 990);
        assert_eq!(l.p999_us, 999);
        assert!((l.avg_us - 500.5).abs() < 0.5, "{}", l.avg_us);
    }

    #[test]
    fn microsecond_resolution_within_a_thousandth() {
        let mut h = new_histogram();
        record(&mut h, 123_456);
        let v = Latency::of(&h).p50_us;
        assert!(v.abs_diff(123_456) <= 124, "{v}");
        // Sub-microsecond and huge values are clamped, not dropped.
        record(&mut h, 0);
        record(&mut h, u64::MAX);
        assert_eq!(h.len(), 3);
        assert_eq!(h.min(), 1);
        assert!(h.max() >= MAX_LATENCY_US);
    }

    #[test]
    fn merging_threads_equals_one_histogram() {
        let mut a = Stats::default();
        let mut b = Stats::default();
        let mut whole = new_histogram();
        for v in 1..=2000u64 {
            let s = if v % 3 == 0 { &mut a } else { &mut b };
            s.gets.ops += 1;
            record(&mut s.gets.hist, v);
            record(&mut whole, v);
        }
        a.hits = 5;
        b.hits = 7;
        a.bytes_sent = 10;
        b.bytes_sent = 1;
        let mut m = Stats::default();
        m.merge(&a);
        m.merge(&b);
        assert_eq!(m.gets.ops, 2000);
        assert_eq!(m.hits, 12);
        assert_eq!(m.bytes_sent, 11);
        assert_eq!(Latency::of(&m.gets.hist), Latency::of(&whole));
        assert_eq!(m.all_latency().len(), 2000);
        assert_eq!(Latency::of(&m.all_latency()).p99_us, 1980);
    }

    #[test]
    fn table_is_monotonic_and_ends_at_max() {
        let mut h = new_histogram();
        for v in [5u64, 7, 100, 100, 3000] {
            record(&mut h, v);
        }
        let t = percentile_table(&h);
        assert_eq!(t.len(), TABLE_PERCENTILES.len());
        assert!(t.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(t[0].1, 5);
        assert_eq!(t.last().unwrap().1, h.max());
        assert!(percentile_table(&new_histogram()).iter().all(|e| e.1 == 0));
    }
}
