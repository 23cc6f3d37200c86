//! The final report: printed as a table and optionally written as JSON.

use crate::args::Config;
use crate::runner::PhaseResult;
use crate::stats::{percentile_table, percentiles, Latency, OpStats, Second, Stats};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpReport {
    pub ops: u64,
    pub ops_per_sec: f64,
    pub latency: Latency,
    /// `(percentile, µs)` for each of `--print-percentiles`.
    pub percentiles: Vec<(f64, u64)>,
}

impl OpReport {
    fn of(ops: &OpStats, secs: f64, ps: &[f64]) -> OpReport {
        OpReport {
            ops: ops.ops,
            ops_per_sec: ops.ops as f64 / secs,
            latency: Latency::of(&ops.hist),
            percentiles: percentiles(&ops.hist, ps),
        }
    }
}

/// What `run` returns and `--json-out-file` contains.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub target: String,
    pub protocol: String,
    pub threads: usize,
    pub clients_per_thread: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub ratio: String,
    pub multi_key_get: usize,
    pub rate_limit: Option<u64>,
    pub seed: u64,
    pub duration_secs: f64,
    pub totals: OpReport,
    pub sets: OpReport,
    pub gets: OpReport,
    /// Keys found / not found by gets (a multi-get counts each key).
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub errors: u64,
    /// Error reply lines and how often each came, most frequent first.
    pub error_replies: Vec<(String, u64)>,
    pub connection_errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub kb_per_sec: f64,
    /// (percentile, latency µs) of all requests.
    pub latency_distribution: Vec<(f64, u64)>,
    /// Per-second ops and p99 (stalls and warm-up show here); the last entry may cover
    /// only the final fraction of a second.
    pub timeline: Vec<Second>,
}

impl Report {
    pub fn build(cfg: &Config, r: &PhaseResult) -> Report {
        let a = &cfg.args;
        let s: &Stats = &r.stats;
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let all = s.all_latency();
        let looked = s.hits + s.misses;
        Report {
            target: match &a.unix_socket {
                Some(p) => format!("unix:{p}"),
                None => format!("{}:{}", a.server, a.port),
            },
            protocol: a.protocol.to_string(),
            threads: a.threads,
            clients_per_thread: a.clients,
            connections: r.connected,
            pipeline: a.pipeline,
            ratio: a.ratio.to_string(),
            multi_key_get: a.multi_key_get,
            rate_limit: a.rate,
            seed: cfg.seed,
            duration_secs: secs,
            totals: OpReport {
                ops: s.ops(),
                ops_per_sec: s.ops() as f64 / secs,
                latency: Latency::of(&all),
                percentiles: percentiles(&all, &a.print_percentiles.0),
            },
            sets: OpReport::of(&s.sets, secs, &a.print_percentiles.0),
            gets: OpReport::of(&s.gets, secs, &a.print_percentiles.0),
            hits: s.hits,
            misses: s.misses,
            hit_ratio: if looked == 0 {
                0.0
            } else {
                s.hits as f64 / looked as f64
            },
            errors: s.errors,
            error_replies: s.error_replies_by_count(),
            connection_errors: s.connection_errors,
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            kb_per_sec: (s.bytes_sent + s.bytes_received) as f64 / 1024.0 / secs,
            latency_distribution: percentile_table(&all),
            timeline: r.timeline.clone(),
        }
    }

    /// Human-readable table.
    pub fn render(&self, with_histogram: bool) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "\n{} threads x {} connections ({} connected) to {}, {} protocol, pipeline {}, ratio {}{}{}",
            self.threads,
            self.clients_per_thread,
            self.connections,
            self.target,
            self.protocol,
            self.pipeline,
            self.ratio,
            if self.multi_key_get > 1 {
                format!(", {}-key gets", self.multi_key_get)
            } else {
                String::new()
            },
            match self.rate_limit {
                Some(r) => format!(", rate {r}/s (latency from intended send time)"),
                None => String::new(),
            }
        );
        let _ = writeln!(o, "{:.2} s\n", self.duration_secs);
        let _ = write!(
            o,
            "{:<8}{:>12}{:>12}{:>12}{:>10}",
            "Type", "Ops/sec", "Hits/sec", "Misses/sec", "Avg(ms)"
        );
        for &(p, _) in &self.totals.percentiles {
            let _ = write!(o, "{:>11}", format!("p{p}(ms)"));
        }
        let _ = writeln!(o, "{:>10}{:>12}", "Max(ms)", "KB/sec");
        let secs = self.duration_secs;
        let row = |o: &mut String, name: &str, r: &OpReport, hits: Option<(u64, u64)>, kb: f64| {
            let (h, m) = match hits {
                Some((h, m)) => (
                    format!("{:.2}", h as f64 / secs),
                    format!("{:.2}", m as f64 / secs),
                ),
                None => ("---".into(), "---".into()),
            };
            let ms = |us: u64| us as f64 / 1000.0;
            let _ = write!(
                o,
                "{:<8}{:>12.2}{:>12}{:>12}{:>10.3}",
                name,
                r.ops_per_sec,
                h,
                m,
                r.latency.avg_us / 1000.0,
            );
            for &(_, us) in &r.percentiles {
                let _ = write!(o, "{:>11.3}", ms(us));
            }
            let _ = writeln!(
                o,
                "{:>10.3}{:>12}",
                ms(r.latency.max_us),
                if kb >= 0.0 {
                    format!("{kb:.2}")
                } else {
                    "---".into()
                }
            );
        };
        row(&mut o, "Sets", &self.sets, None, -1.0);
        row(
            &mut o,
            "Gets",
            &self.gets,
            Some((self.hits, self.misses)),
            -1.0,
        );
        row(
            &mut o,
            "Totals",
            &self.totals,
            Some((self.hits, self.misses)),
            self.kb_per_sec,
        );
        let _ = writeln!(
            o,
            "\nhits {}  misses {}  hit ratio {:.2}%  errors {}  connection errors {}",
            self.hits,
            self.misses,
            self.hit_ratio * 100.0,
            self.errors,
            self.connection_errors
        );
        for (line, n) in self.error_replies.iter().take(5) {
            let _ = writeln!(o, "  {n} x {line}");
        }
        if self.error_replies.len() > 5 {
            let _ = writeln!(o, "  ... and {} more kinds", self.error_replies.len() - 5);
        }
        if with_histogram {
            let _ = writeln!(o, "\nlatency distribution (all requests):");
            for (p, us) in &self.latency_distribution {
                let _ = writeln!(o, "  p{:<8} {:>10.3} ms", p, *us as f64 / 1000.0);
            }
        }
        o
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }
}
