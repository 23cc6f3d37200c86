//! Short bench runs against a real Debian memcached started on a free loopback port.
//! Counts reported by the bench must add up and agree with the server's own `stats`.

use bench::BenchArgs;
use clap::Parser;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MEMCACHED: &str = "/usr/bin/memcached";

use testpeer::spawn_on_free_port;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

struct Memcached {
    child: Child,
    port: u16,
    socket: Option<String>,
}

impl Memcached {
    /// None (with a message) when memcached is not installed.
    fn start(unix: bool) -> Option<Memcached> {
        if !std::path::Path::new(MEMCACHED).exists() {
            eprintln!("SKIP: {MEMCACHED} not installed (apt-get install memcached)");
            return None;
        }
        let common = ["-t", "2", "-U", "0", "-m", "64"];
        if !unix {
            let (port, child) = spawn_on_free_port(&common);
            return Some(Memcached {
                child,
                port,
                socket: None,
            });
        }
        // Named after a port only to be unique: this memcached listens on the socket alone.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = std::env::temp_dir().join(format!("bench-test-{port}.sock"));
        let _ = std::fs::remove_file(&p);
        let p = p.to_string_lossy().into_owned();
        // -u only matters (and is required) when running as root.
        let child = Command::new(MEMCACHED)
            .args(["-u", "nobody"])
            .args(common)
            .args(["-s", &p, "-a", "0777"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn memcached");
        let m = Memcached {
            child,
            port,
            socket: Some(p),
        };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if std::os::unix::net::UnixStream::connect(m.socket.as_ref().unwrap()).is_ok() {
                return Some(m);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("memcached did not come up");
    }

    fn args(&self, extra: &[&str]) -> BenchArgs {
        let mut v: Vec<String> = vec!["bench".into(), "--quiet".into(), "--hide-histogram".into()];
        match &self.socket {
            Some(p) => v.extend(["--unix-socket".into(), p.clone()]),
            None => v.extend(["--port".into(), self.port.to_string()]),
        }
        v.extend(extra.iter().map(|s| s.to_string()));
        Cli::try_parse_from(v).expect("valid args").args
    }

    /// The server's `stats` as (name, value) pairs.
    fn stat(&self, name: &str) -> u64 {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.write_all(b"stats\r\n").unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let l = line.trim_end();
            if l == "END" || l.is_empty() {
                panic!("stat {name} not found");
            }
            let mut f = l.split(' ');
            if f.next() == Some("STAT") && f.next() == Some(name) {
                return f.next().unwrap().parse().unwrap();
            }
        }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn text_counts_add_up_and_match_server_stats() {
    let Some(mc) = Memcached::start(false) else {
        return;
    };
    // Write keys 0..=999 once each: 2 threads x 4 connections x 125 sets on their own slices.
    let r = bench::run(mc.args(&[
        "--threads",
        "2",
        "--clients",
        "4",
        "--requests",
        "125",
        "--ratio",
        "1:0",
        "--key-pattern",
        "P:P",
        "--key-maximum",
        "999",
        "--data-size",
        "100",
    ]))
    .unwrap();
    assert_eq!(r.connections, 8);
    assert_eq!(r.sets.ops, 1000);
    assert_eq!(r.gets.ops, 0);
    assert_eq!(r.errors + r.connection_errors, 0);
    assert_eq!(
        mc.stat("curr_items"),
        1000,
        "every key written exactly once"
    );
    assert_eq!(mc.stat("cmd_set"), 1000);

    // Now gets (pipelined) over the same range: every key is there.
    let r = bench::run(mc.args(&[
        "--threads",
        "2",
        "--clients",
        "3",
        "--requests",
        "200",
        "--ratio",
        "0:1",
        "--key-maximum",
        "999",
        "--pipeline",
        "8",
    ]))
    .unwrap();
    assert_eq!(r.gets.ops, 1200);
    assert_eq!(r.totals.ops, 1200);
    assert_eq!((r.hits, r.misses), (1200, 0));
    assert_eq!(r.hit_ratio, 1.0);
    assert_eq!(mc.stat("get_hits"), 1200);
    assert!(r.totals.latency.p50_us > 0);
    assert!(r.totals.latency.max_us >= r.totals.latency.p99_us);
    // Each request line is "get memtier-N\r\n"; bytes on the wire were counted.
    assert!(r.bytes_sent >= 1200 * 15);
    assert!(r.bytes_received >= 1200 * 100);

    // Multi-get of 10 keys over twice the range: about half hit; each key counted.
    let r = bench::run(mc.args(&[
        "--threads",
        "1",
        "--clients",
        "5",
        "--requests",
        "50",
        "--ratio",
        "0:1",
        "--multi-key-get",
        "10",
        "--key-maximum",
        "1999",
        "--seed",
        "7",
    ]))
    .unwrap();
    assert_eq!(r.gets.ops, 250);
    assert_eq!(r.hits + r.misses, 2500);
    assert!(r.hits > 900 && r.misses > 900, "{} / {}", r.hits, r.misses);
    assert_eq!(mc.stat("get_hits"), 1200 + r.hits);
    assert_eq!(mc.stat("get_misses"), r.misses);
    assert_eq!(r.errors, 0);
}

#[test]
fn timed_mixed_run_with_json_report() {
    let Some(mc) = Memcached::start(false) else {
        return;
    };
    let json = std::env::temp_dir().join(format!("bench-test-{}.json", mc.port));
    let r = bench::run(mc.args(&[
        "--threads",
        "2",
        "--clients",
        "8",
        "--test-time",
        "1",
        "--ratio",
        "1:4",
        "--key-maximum",
        "5000",
        "--data-size-range",
        "10-2000",
        "--prepopulate",
        "--json-out-file",
        json.to_str().unwrap(),
    ]))
    .unwrap();
    assert!((0.9..3.0).contains(&r.duration_secs), "{}", r.duration_secs);
    assert!(r.totals.ops > 100, "{}", r.totals.ops);
    assert_eq!(r.totals.ops, r.sets.ops + r.gets.ops);
    // 1 set per 4 gets on each connection; the cycle is cut at most once per connection.
    let expect_sets = r.totals.ops / 5;
    assert!(r.sets.ops.abs_diff(expect_sets) <= 16, "{r:?}");
    assert_eq!(r.hits + r.misses, r.gets.ops);
    assert_eq!(r.misses, 0, "prepopulated, so every get hits");
    assert_eq!(r.errors + r.connection_errors, 0);
    // Prepopulation wrote keys 0..=5000; the measured run's counts come on top.
    assert_eq!(mc.stat("cmd_set"), 5001 + r.sets.ops);
    let text = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["totals"]["ops"].as_u64(), Some(r.totals.ops));
    assert_eq!(v["hits"].as_u64(), Some(r.hits));
    // One full second was run: its line is in the timeline and within the totals.
    assert!(!r.timeline.is_empty(), "{:?}", r.timeline);
    assert_eq!(r.timeline[0].second, 1);
    assert!(r.timeline[0].ops > 0 && r.timeline[0].ops <= r.totals.ops);
    assert_eq!(v["timeline"][0]["ops"].as_u64(), Some(r.timeline[0].ops));
    assert!(v["totals"]["latency"]["p99_us"].as_u64().is_some());
    assert_eq!(
        v["latency_distribution"].as_array().unwrap().len(),
        bench::stats::TABLE_PERCENTILES.len()
    );
}

#[test]
fn meta_protocol_over_unix_socket() {
    let Some(mc) = Memcached::start(true) else {
        return;
    };
    let r = bench::run(mc.args(&[
        "--protocol",
        "meta",
        "--threads",
        "1",
        "--clients",
        "4",
        "--requests",
        "100",
        "--ratio",
        "1:0",
        "--key-pattern",
        "P:P",
        "--key-maximum",
        "399",
        "--pipeline",
        "4",
    ]))
    .unwrap();
    assert_eq!((r.sets.ops, r.errors, r.connection_errors), (400, 0, 0));
    // Single mg and quiet multi-mg batches ended by mn.
    for multi in ["1", "6"] {
        let r = bench::run(mc.args(&[
            "--protocol",
            "meta",
            "--threads",
            "1",
            "--clients",
            "3",
            "--requests",
            "40",
            "--ratio",
            "0:1",
            "--key-maximum",
            "799",
            "--multi-key-get",
            multi,
            "--pipeline",
            "3",
        ]))
        .unwrap();
        let keys: u64 = multi.parse().unwrap();
        assert_eq!(r.gets.ops, 120);
        assert_eq!(r.hits + r.misses, 120 * keys);
        assert!(r.hits > 0 && r.misses > 0, "{} {}", r.hits, r.misses);
        assert_eq!(r.errors + r.connection_errors, 0);
    }
}

#[test]
fn rate_limited_run_is_paced() {
    let Some(mc) = Memcached::start(false) else {
        return;
    };
    // 400 req/s total for 2 s: ~800 requests, not the thousands an open loop does.
    let r = bench::run(mc.args(&[
        "--threads",
        "2",
        "--clients",
        "2",
        "--test-time",
        "2",
        "--rate",
        "400",
        "--key-maximum",
        "100",
    ]))
    .unwrap();
    assert!((700..=820).contains(&r.totals.ops), "{}", r.totals.ops);
    assert_eq!(r.rate_limit, Some(400));
}

#[test]
fn unreachable_server_is_an_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args = Cli::try_parse_from(["bench", "--port", &port.to_string(), "-n", "1"])
        .unwrap()
        .args;
    let e = bench::run(args).unwrap_err();
    assert!(matches!(e, bench::BenchError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("cannot connect"), "{e}");
}

/// A fake server on a free port; `reply` decides what each connection gets back.
fn fake_server(reply: &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            let mut s2 = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = std::io::Read::read(&mut s2, &mut buf) {
                    if n == 0 || (!reply.is_empty() && s2.write_all(reply).is_err()) {
                        break;
                    }
                }
            });
            held.push(s);
        }
    });
    port
}

#[test]
fn silent_server_is_cut_off_after_the_grace_period() {
    let port = fake_server(b"");
    let t = Instant::now();
    let args = Cli::try_parse_from([
        "bench",
        "--quiet",
        "--port",
        &port.to_string(),
        "--threads",
        "1",
        "--clients",
        "2",
        "--test-time",
        "1",
    ])
    .unwrap()
    .args;
    let r = bench::run(args).unwrap();
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    assert_eq!(r.totals.ops, 0);
    assert_eq!(r.connection_errors, 2);
}

#[test]
fn garbage_reply_breaks_only_that_connection() {
    let port = fake_server(b"HELLO THERE\r\n");
    let args = Cli::try_parse_from([
        "bench",
        "--quiet",
        "--port",
        &port.to_string(),
        "--threads",
        "1",
        "--clients",
        "3",
        "-n",
        "5",
    ])
    .unwrap()
    .args;
    let r = bench::run(args).unwrap();
    assert_eq!(r.connection_errors, 3);
    assert_eq!(r.totals.ops, 0);
}

#[test]
fn rate_mode_charges_a_stall_to_every_request_that_was_due() {
    // Answers every get with END, but only after a 300 ms pause at the start.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let mut line = String::new();
                let mut first = true;
                while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    if first {
                        std::thread::sleep(Duration::from_millis(300));
                        first = false;
                    }
                    if w.write_all(b"END\r\n").is_err() {
                        break;
                    }
                    line.clear();
                }
            });
        }
    });
    let args = Cli::try_parse_from([
        "bench",
        "--quiet",
        "--port",
        &port.to_string(),
        "--threads",
        "1",
        "--clients",
        "1",
        "--ratio",
        "0:1",
        "--test-time",
        "1",
        "--rate",
        "100",
    ])
    .unwrap()
    .args;
    let r = bench::run(args).unwrap();
    assert!((90..=101).contains(&r.gets.ops), "{}", r.gets.ops);
    // The ~30 requests due during the stall were all late; a quarter waited > 50 ms.
    assert!(
        r.gets.latency.p90_us > 50_000,
        "p90 {} µs",
        r.gets.latency.p90_us
    );
    assert!(r.gets.latency.max_us >= 290_000);
    assert_eq!(r.misses, r.gets.ops);
}
