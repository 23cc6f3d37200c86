//! Per-command latency: from the read that completed a request to the write that sent (or
//! queued) its reply, kept per worker thread in `telemetry::Histogram`s.
//!
//! Every request one read brings in is answered by the same write, so a worker reads the
//! clock twice per read, not per request: `Batch` counts the requests of each command in
//! between and each count is recorded at the one elapsed time. (One read per batch, taking
//! the previous write's time as the next start, would also count the recv(2) itself.)

use std::cell::Cell;

use proto::{Request, StoreCmd};
use telemetry::{Histogram, Snapshot};

/// The commands latency is kept for; the label values of `/metrics` and the names in
/// `stats latency`.
pub const COMMANDS: [&str; 13] = [
    "get", "gat", "set", "cas", "delete", "incr", "decr", "touch", "mg", "ms", "md", "ma", "other",
];
const OTHER: usize = COMMANDS.len() - 1;

/// The `COMMANDS` index of a request.
#[inline]
pub fn command(req: &Request<'_>) -> usize {
    match req {
        Request::Get { .. } => 0,
        Request::Gat { .. } => 1,
        Request::Store {
            cmd: StoreCmd::Cas, ..
        } => 3,
        Request::Store { .. } => 2,
        Request::Delete { .. } => 4,
        Request::Arith { incr: true, .. } => 5,
        Request::Arith { incr: false, .. } => 6,
        Request::Touch { .. } => 7,
        Request::MetaGet { .. } => 8,
        Request::MetaSet { .. } => 9,
        Request::MetaDelete { .. } => 10,
        Request::MetaArithmetic { .. } => 11,
        _ => OTHER,
    }
}

/// One worker's histograms, one per command; only that worker records.
#[derive(Default)]
pub struct ThreadLatency {
    by_command: [Histogram; COMMANDS.len()],
}

impl ThreadLatency {
    pub fn histogram(&self, command: usize) -> &Histogram {
        &self.by_command[command]
    }
}

/// All threads' histograms of each command, merged.
pub fn merged(threads: &[std::sync::Arc<ThreadLatency>]) -> Vec<Snapshot> {
    (0..COMMANDS.len())
        .map(|c| {
            let mut s = Snapshot::default();
            for t in threads {
                s.add(t.histogram(c));
            }
            s
        })
        .collect()
}

/// Monotonic nanoseconds (CLOCK_MONOTONIC through the vDSO: no system call).
#[inline]
pub fn clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The requests of one batch (one read's worth) by command, until their reply is written.
/// Cells: the worker's request path only has shared references to it.
#[derive(Default)]
pub struct Batch {
    counts: [Cell<u32>; COMMANDS.len()],
    /// Bit i set when `counts[i]` is not zero.
    seen: Cell<u16>,
}

impl Batch {
    #[inline]
    pub fn note(&self, command: usize) {
        let c = &self.counts[command];
        c.set(c.get() + 1);
        self.seen.set(self.seen.get() | 1 << command);
    }

    /// Records every counted request as taking `elapsed` ns, and starts over.
    #[inline]
    pub fn record(&self, into: &ThreadLatency, elapsed: u64) {
        let mut seen = self.seen.replace(0);
        while seen != 0 {
            let i = seen.trailing_zeros() as usize;
            seen &= seen - 1;
            into.by_command[i].record_n(elapsed, u64::from(self.counts[i].replace(0)));
        }
    }
}

/// `stats latency`: per command seen since `base`, the request count and p50, p90, p99,
/// p99.9 and max in microseconds.
pub fn report(now: &[Snapshot], base: &[Snapshot], out: &mut Vec<u8>) {
    use std::io::Write;
    for (i, name) in COMMANDS.iter().enumerate() {
        let s = now[i].since(&base[i]);
        let n = s.count();
        if n == 0 {
            continue;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let _ = write!(out, "STAT {name}:count {n}\r\n");
        for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
            let _ = write!(out, "STAT {name}:{label}_us {:.1}\r\n", us(s.quantile(q)));
        }
        let _ = write!(out, "STAT {name}:max_us {:.1}\r\n", us(s.max()));
    }
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8]) -> Request<'_> {
        match proto::parse(line, &proto::Limits::default()) {
            proto::Parse::Request(r, _) => r,
            _ => panic!("{}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn commands_by_request() {
        let cases: [(&[u8], &str); 9] = [
            (b"get a b\r\n", "get"),
            (b"gets a\r\n", "get"),
            (b"gat 1 a\r\n", "gat"),
            (b"add a 0 0 1\r\nx\r\n", "set"),
            (b"cas a 0 0 1 5\r\nx\r\n", "cas"),
            (b"decr a 1\r\n", "decr"),
            (b"mg a v\r\n", "mg"),
            (b"ma a\r\n", "ma"),
            (b"version\r\n", "other"),
        ];
        for (line, want) in cases {
            assert_eq!(COMMANDS[command(&parse(line))], want);
        }
    }

    #[test]
    fn a_batch_records_each_command_at_the_batch_time() {
        let t = ThreadLatency::default();
        let b = Batch::default();
        b.note(0);
        b.note(0);
        b.note(2);
        b.record(&t, 40_000);
        b.note(0);
        b.record(&t, 80_000);
        b.record(&t, 1); // nothing noted: nothing recorded
        let snaps = merged(&[std::sync::Arc::new(t)]);
        assert_eq!(snaps[0].count(), 3);
        assert_eq!(snaps[0].sum(), 160_000);
        assert_eq!(snaps[2].count(), 1);
        assert_eq!(snaps[1].count(), 0);
    }

    #[test]
    fn report_lines_and_base() {
        let t = std::sync::Arc::new(ThreadLatency::default());
        for us in 1..=100u64 {
            t.histogram(4).record(us * 1000);
        }
        let threads = [t.clone()];
        let base = merged(&threads);
        t.histogram(0).record(10_000);
        let mut out = Vec::new();
        report(&merged(&threads), &base, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("delete:"), "{text}");
        assert!(
            text.starts_with("STAT get:count 1\r\nSTAT get:p50_us "),
            "{text}"
        );
        assert!(text.contains("STAT get:p99.9_us ") && text.ends_with("END\r\n"));
        let mut out = Vec::new();
        report(
            &merged(&threads),
            &vec![Snapshot::default(); COMMANDS.len()],
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("STAT delete:count 100\r\n"), "{text}");
        let p50: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("STAT delete:p50_us "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((47.0..53.5).contains(&p50), "{p50}");
    }
}
