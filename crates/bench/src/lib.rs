//! `memfleet bench`: a memtier_benchmark-class load generator for the memcached
//! text and meta protocols.
//!
//! Each thread drives its connections on one current-thread tokio runtime. Requests
//! are built into reused buffers (no allocation per request), each connection keeps
//! `--pipeline` requests in flight and writes them in one write, replies are parsed
//! incrementally, and latencies go into HDR histograms merged across threads.

pub mod args;
mod client;
mod error;
pub mod keys;
pub mod report;
pub mod request;
mod runner;
pub mod stats;
mod tls;

pub use args::BenchArgs;
pub use error::{ArgError, BenchError, ConnError, TlsError};
pub use report::Report;

use std::io::Write;
use std::time::Instant;

/// Runs the benchmark described by `args`, printing progress lines and the final
/// report to stdout. Errors: invalid options, or the server cannot be reached.
pub fn run(args: BenchArgs) -> Result<Report, BenchError> {
    let cfg = args.validate()?;
    if cfg.args.prepopulate {
        let pcfg = runner::prepopulate_config(&cfg);
        let t = Instant::now();
        let r = runner::run_phase(&pcfg, false)?;
        println!(
            "prepopulated keys {}..={} with {} sets in {:.2} s ({} errors)",
            cfg.args.key_minimum,
            cfg.args.key_maximum,
            r.stats.sets.ops,
            t.elapsed().as_secs_f64(),
            r.stats.errors + r.stats.connection_errors
        );
    }
    let runs = cfg.args.run_count;
    let mut total: Option<runner::PhaseResult> = None;
    let mut out = std::io::stdout().lock();
    for run in 1..=runs {
        drop(out);
        let result = runner::run_phase(&cfg, !cfg.args.quiet)?;
        out = std::io::stdout().lock();
        if runs > 1 {
            let _ = write!(out, "\nRun {run} of {runs}:");
        }
        let report = Report::build(&cfg, &result);
        let _ = out.write_all(report.render(!cfg.args.hide_histogram).as_bytes());
        total = Some(match total {
            None => result,
            Some(t) => t.combine(result),
        });
    }
    let report = Report::build(&cfg, &total.expect("run_count >= 1"));
    if runs > 1 {
        let _ = write!(out, "\nAggregate of {runs} runs:");
        let _ = out.write_all(report.render(!cfg.args.hide_histogram).as_bytes());
    }
    let _ = out.flush();
    if let Some(path) = &cfg.args.json_out_file {
        std::fs::write(path, report.to_json() + "\n").map_err(|error| BenchError::WriteJson {
            path: path.clone(),
            error,
        })?;
    }
    Ok(report)
}
