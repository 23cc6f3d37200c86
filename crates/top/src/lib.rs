//! `memfleet top`: a live view of a fleet of memcached-protocol servers, one line per server
//! (ops/s, hit ratio, evictions/s, connections, memory, p99 latency, hot keys), refreshed
//! every second and sortable by any column.
//!
//! Modules: `targets` finds the servers (command line, nutcracker.yml, mcrouter JSON),
//! `poll` asks each for its stats on a thread of its own, `stats` parses the replies,
//! `rates` turns two samples into a row, `table` formats and sorts rows, `screen` draws them.
//! Everything but `poll` and `screen` is pure and unit-tested.

mod error;
mod poll;
mod rates;
mod screen;
mod stats;
mod table;
mod targets;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

pub use error::TopError;
use table::{Column, Sort};

/// `memfleet top`'s command line.
#[derive(clap::Args, Debug, Clone)]
pub struct TopArgs {
    /// Servers to watch: HOST:PORT, [IPV6]:PORT or a unix socket path.
    #[arg(value_name = "HOST:PORT")]
    pub servers: Vec<String>,
    /// Watch every server of a nutcracker.yml (memfleet route's configuration).
    #[arg(short = 'c', long = "conf-file", value_name = "FILE")]
    pub conf_file: Option<PathBuf>,
    /// Watch every server of an mcrouter config: file:PATH, or the JSON itself.
    #[arg(long = "config", value_name = "file:PATH")]
    pub config: Option<String>,
    /// Seconds between refreshes.
    #[arg(
        short = 'd',
        long = "delay",
        default_value_t = 1.0,
        value_name = "SECS"
    )]
    pub delay: f64,
    /// Column to sort by at start (keys 1-8 change it while running).
    #[arg(long = "sort", value_enum, default_value = "ops")]
    pub sort: Column,
}

/// Runs the view until the user quits. Errors are for bad arguments or no terminal.
pub fn run(args: TopArgs) -> Result<(), TopError> {
    if !(args.delay.is_finite() && (0.1..=3600.0).contains(&args.delay)) {
        return Err(TopError::Delay(args.delay));
    }
    let mut found = Vec::new();
    for arg in &args.servers {
        found.push(targets::parse_arg(arg)?);
    }
    if let Some(path) = &args.conf_file {
        found.extend(targets::from_nutcracker(path)?);
    }
    if let Some(config) = &args.config {
        found.extend(targets::from_mcrouter(config)?);
    }
    let found = targets::dedup(found);
    if found.is_empty() {
        return Err(TopError::NoServers);
    }
    if !std::io::stdout().is_terminal() {
        return Err(TopError::NoTerminal);
    }
    let interval = Duration::from_secs_f64(args.delay);
    let rows = poll::start(&found, interval);
    let mut terminal = ratatui::try_init().map_err(TopError::Terminal)?;
    let sort = Sort {
        column: args.sort,
        reversed: false,
    };
    let result = screen::run(&mut terminal, &rows, interval, sort);
    ratatui::restore();
    result.map_err(TopError::Terminal)
}
