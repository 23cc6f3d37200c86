//! Prometheus' text exposition format (version 0.0.4): `# HELP`/`# TYPE` once per metric
//! family, then its samples with escaped label values.

use std::fmt::{Display, Write as _};

use crate::histogram::Snapshot;

/// The content type a scrape of this format is answered with.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (ns) of the `le` buckets of every latency histogram: 10 µs to 10 s.
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A label value as raw bytes (a cache key need not be UTF-8).
pub type Label<'a> = (&'a str, &'a [u8]);

/// Builds one exposition. Samples of a family follow its `family` call.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a metric family: its help text and type.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.name());
    }

    /// One sample: `name{labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[Label<'_>], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The samples of one histogram in seconds (`_bucket` per `LATENCY_BOUNDS_NS` and
    /// `+Inf`, `_sum`, `_count`) from a snapshot in nanoseconds.
    pub fn histogram(&mut self, name: &str, labels: &[Label<'_>], s: &Snapshot) {
        for bound in LATENCY_BOUNDS_NS {
            let le = seconds(bound);
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {}", s.count_at_most(bound));
        }
        let _ = write!(self.out, "{name}_bucket");
        self.labels(labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", s.count());
        let _ = write!(self.out, "{name}_sum");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", seconds(s.sum()));
        let _ = write!(self.out, "{name}_count");
        self.labels(labels, None);
        let _ = writeln!(self.out, " {}", s.count());
    }

    pub fn finish(self) -> String {
        self.out
    }

    fn labels(&mut self, labels: &[Label<'_>], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        let le = le.map(|v| ("le", v.as_bytes()));
        for (k, v) in labels.iter().copied().chain(le) {
            if !first {
                self.out.push(',');
            }
            first = false;
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_label(&mut self.out, v);
            self.out.push('"');
        }
        self.out.push('}');
    }
}

/// Nanoseconds as a decimal number of seconds.
fn seconds(ns: u64) -> String {
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return (ns / 1_000_000_000).to_string();
    }
    let s = format!("{}.{frac:09}", ns / 1_000_000_000);
    s.trim_end_matches('0').to_string()
}

/// A label value: backslash, double quote and newline escaped as the format requires; bytes
/// that are not UTF-8 written as `\xNN` (with the backslash escaped), so distinct keys stay
/// distinct and the output stays valid UTF-8.
pub fn escape_label(out: &mut String, v: &[u8]) {
    for chunk in v.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\\\x{b:02x}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Histogram;

    #[test]
    fn families_and_samples() {
        let mut e = Exposition::new();
        e.family(
            "memcached_commands_total",
            Kind::Counter,
            "Requests by\ncommand.",
        );
        e.sample(
            "memcached_commands_total",
            &[("command", b"get"), ("status", b"hit")],
            7,
        );
        e.single("memcached_up", Kind::Gauge, "1 when serving.", 1);
        assert_eq!(
            e.finish(),
            "# HELP memcached_commands_total Requests by\\ncommand.\n\
             # TYPE memcached_commands_total counter\n\
             memcached_commands_total{command=\"get\",status=\"hit\"} 7\n\
             # HELP memcached_up 1 when serving.\n# TYPE memcached_up gauge\nmemcached_up 1\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = String::new();
        escape_label(&mut s, b"a\"b\\c\nd\xffe\xc3\xa9");
        assert_eq!(s, "a\\\"b\\\\c\\nd\\\\xffe\u{e9}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_in_seconds() {
        let h = Histogram::default();
        h.record_n(20_000, 3); // 20 µs
        h.record(3_000_000_000); // 3 s
        let mut e = Exposition::new();
        e.histogram("lat_seconds", &[("command", b"get")], &h.snapshot());
        let text = e.finish();
        assert!(text.contains("lat_seconds_bucket{command=\"get\",le=\"0.00001\"} 0\n"));
        assert!(text.contains("lat_seconds_bucket{command=\"get\",le=\"0.000025\"} 3\n"));
        assert!(text.contains("lat_seconds_bucket{command=\"get\",le=\"2.5\"} 3\n"));
        assert!(text.contains("lat_seconds_bucket{command=\"get\",le=\"5\"} 4\n"));
        assert!(text.contains("lat_seconds_bucket{command=\"get\",le=\"+Inf\"} 4\n"));
        assert!(text.contains("lat_seconds_sum{command=\"get\"} 3.00006\n"));
        assert!(text.contains("lat_seconds_count{command=\"get\"} 4\n"));
    }

    #[test]
    fn seconds_format() {
        assert_eq!(seconds(0), "0");
        assert_eq!(seconds(10_000), "0.00001");
        assert_eq!(seconds(2_500_000_000), "2.5");
        assert_eq!(seconds(10_000_000_000), "10");
    }
}
