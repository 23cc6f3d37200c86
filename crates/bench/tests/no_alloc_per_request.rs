//! The request loop must not allocate per request: ten times the requests may not
//! cost (anywhere near) ten times the allocations. Needs /usr/bin/memcached.

use bench::BenchArgs;
use clap::Parser;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use testpeer::spawn_on_free_port;

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

#[test]
fn allocations_do_not_grow_with_requests() {
    if !std::path::Path::new("/usr/bin/memcached").exists() {
        eprintln!("SKIP: /usr/bin/memcached not installed");
        return;
    }
    let (port, mut mc) = spawn_on_free_port(&["-U", "0"]);
    let run = |n: u64, extra: &[&str]| {
        let mut argv = vec![
            "bench".to_string(),
            "--quiet".into(),
            "--hide-histogram".into(),
            "--port".into(),
            port.to_string(),
            "--threads".into(),
            "1".into(),
            "--clients".into(),
            "2".into(),
            "--key-maximum".into(),
            "1000".into(),
            "--seed".into(),
            "1".into(),
            "-n".into(),
            n.to_string(),
        ];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let args = Cli::try_parse_from(argv).unwrap().args;
        let before = ALLOCS.load(Ordering::Relaxed);
        let r = bench::run(args).unwrap();
        assert_eq!(r.totals.ops, 2 * n);
        ALLOCS.load(Ordering::Relaxed) - before
    };
    for extra in [
        &["--ratio", "1:1"][..],
        &["--ratio", "1:3", "--multi-key-get", "5", "--pipeline", "8"],
        &[
            "--protocol",
            "meta",
            "--pipeline",
            "4",
            "--multi-key-get",
            "3",
        ],
    ] {
        let small = run(500, extra);
        let big = run(10_000, extra);
        eprintln!("{extra:?}: allocations {small} (1,000 requests) vs {big} (20,000)");
        // 19,000 more requests; a per-request allocation would add at least that many.
        // A few per second of run time (progress ticks) are allowed.
        assert!(
            big < small + 500,
            "{extra:?}: {small} allocations for 1,000 requests, {big} for 20,000"
        );
    }
    let _ = mc.kill();
    let _ = mc.wait();
}
