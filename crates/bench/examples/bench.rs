//! Stand-alone `bench` until `memfleet bench` is wired: `cargo run --release -p bench --example bench -- --help`.
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "bench",
    about = "memcached load generator (memtier-style options)"
)]
struct Cli {
    #[command(flatten)]
    args: bench::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = bench::run(cli.args) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}
