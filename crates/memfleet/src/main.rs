//! The `memfleet` binary: parses the command line and hands off to a subcommand's crate.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "memfleet",
    version,
    about = "memcached-compatible cache server, router and load generator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the cache server (accepts memcached's flags).
    Serve(Box<server::ServeArgs>),
    /// Generate load against a memcached-protocol server (memtier-style options).
    Bench(Box<bench::BenchArgs>),
    /// Route memcached traffic to pools of servers (a drop-in for twemproxy/nutcracker).
    Route(Box<router::RouteArgs>),
    /// Delete cache keys as PostgreSQL rows change (logical replication, pgoutput).
    Invalidate(invalidate::InvalidateArgs),
    /// Watch a fleet live: ops/s, hit ratio, evictions, memory, latency per server.
    Top(top::TopArgs),
    /// Write the man pages (memfleet.1, memfleet-serve.1, ...) into DIR; used to package.
    #[command(hide = true)]
    GenerateMan {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    // Each command's own error type; printed as its message alone.
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Command::Serve(args) => server::serve(*args).map_err(Into::into),
        Command::Bench(args) => bench::run(*args).map(|_| ()).map_err(Into::into),
        Command::Route(args) => router::run(*args).map_err(Into::into),
        Command::Invalidate(args) => invalidate::run(args).map_err(Into::into),
        Command::Top(args) => top::run(args).map_err(Into::into),
        Command::GenerateMan { dir } => generate_man(&dir).map_err(Into::into),
    };
    if let Err(e) = result {
        eprintln!("memfleet: {e}");
        std::process::exit(1);
    }
}

/// Renders one man page per visible (sub)command from the clap definitions behind --help.
fn generate_man(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(|e| format!("{}: {e}", dir.display()))
}
