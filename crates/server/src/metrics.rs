//! What the server keeps for watching it beyond `stats`' counters: per-command latency
//! histograms and hot-key sketches, one of each per worker thread (`Telemetry`, in
//! `Shared`), fed on the request path through the worker's `Probe`.
//!
//! The request path touches only its own thread's data: a latency histogram written with
//! plain stores, and a hot-key sketch whose mutex is taken only for a sampled request
//! (about one in `-o hotkeys=RATE`) and otherwise only by a reader.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use proto::Request;
use telemetry::Snapshot;

use crate::latency::{self, Batch, ThreadLatency};
use hotkeys::{self, Entry, Sampler, TopK};

/// Keys each worker's sketch holds: enough that a top 20 is reliable when the 20th key
/// has a share of requests well above 1/256.
pub const HOTKEYS_CAPACITY: usize = 256;
/// Keys `stats hotkeys` lists, and `/metrics` exposes.
pub const HOTKEYS_SHOWN: usize = 20;

/// The server's histograms and sketches, one per worker.
pub struct Telemetry {
    /// Empty when latency is off (`-o latency=off`).
    pub latency: Vec<Arc<ThreadLatency>>,
    /// Empty when hot keys are off (the default).
    pub hotkeys: Vec<Arc<Mutex<TopK>>>,
    /// One request in this many feeds the sketches (0: off).
    pub hot_rate: u32,
    /// `stats latency` counts from the last `stats reset` on: the histograms then.
    latency_base: Mutex<Vec<Snapshot>>,
}

impl Telemetry {
    pub fn new(threads: usize, latency: bool, hot_rate: u32) -> Telemetry {
        Telemetry {
            latency: if latency {
                (0..threads).map(|_| Arc::default()).collect()
            } else {
                Vec::new()
            },
            hotkeys: if hot_rate > 0 {
                (0..threads)
                    .map(|_| Arc::new(Mutex::new(TopK::new(HOTKEYS_CAPACITY))))
                    .collect()
            } else {
                Vec::new()
            },
            hot_rate,
            latency_base: Mutex::new(vec![Snapshot::default(); latency::COMMANDS.len()]),
        }
    }

    /// `stats reset`: `stats latency` starts over (the Prometheus histograms do not: they
    /// are counters, and a scraper handles their resets only as restarts), hot keys too.
    pub fn reset(&self) {
        if let Ok(mut base) = self.latency_base.lock() {
            *base = latency::merged(&self.latency);
        }
        for h in &self.hotkeys {
            if let Ok(mut h) = h.lock() {
                h.clear();
            }
        }
    }

    /// The hottest keys of all workers with their estimated request counts (sampled counts
    /// times the rate), and the number of sampled keys behind them.
    pub fn hot_keys(&self, n: usize) -> (Vec<Entry>, u64) {
        let mut sampled = 0;
        let parts: Vec<Vec<Entry>> = self
            .hotkeys
            .iter()
            .filter_map(|h| h.lock().ok())
            .map(|h| {
                sampled += h.offered();
                h.entries()
            })
            .collect();
        let mut top = hotkeys::merge(parts, n);
        for e in &mut top {
            e.count *= u64::from(self.hot_rate);
            e.error *= u64::from(self.hot_rate);
        }
        (top, sampled)
    }

    /// `stats latency`.
    pub fn stats_latency(&self, out: &mut Vec<u8>) {
        if self.latency.is_empty() {
            out.extend_from_slice(b"STAT latency_status disabled\r\nEND\r\n");
            return;
        }
        let now = latency::merged(&self.latency);
        let base = self
            .latency_base
            .lock()
            .map(|b| b.clone())
            .unwrap_or_else(|_| vec![Snapshot::default(); now.len()]);
        latency::report(&now, &base, out);
    }

    /// `stats hotkeys`: the sample rate, the keys sampled, then `STAT hotkey:<key> <est>`
    /// per hot key, hottest first (estimated requests since start or `stats reset`).
    pub fn stats_hotkeys(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        if self.hotkeys.is_empty() {
            out.extend_from_slice(b"STAT hotkeys_status disabled\r\nEND\r\n");
            return;
        }
        let (top, sampled) = self.hot_keys(HOTKEYS_SHOWN);
        let _ = write!(out, "STAT sample_rate {}\r\n", self.hot_rate);
        let _ = write!(out, "STAT sampled {sampled}\r\n");
        for e in top {
            out.extend_from_slice(b"STAT hotkey:");
            // Keys of the text protocol are printable; a binary (base64 `b`) key is shown
            // with its other bytes as \xNN so a line stays one line.
            for &b in e.key.iter() {
                if b.is_ascii_graphic() && b != b'\\' {
                    out.push(b);
                } else {
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
            let _ = write!(out, " {}\r\n", e.count);
        }
        out.extend_from_slice(b"END\r\n");
    }
}

/// A worker's view of its own telemetry, used while it runs requests.
pub struct Probe {
    latency: Option<Arc<ThreadLatency>>,
    batch: Batch,
    hot: Option<(Cell<Sampler>, Arc<Mutex<TopK>>)>,
}

impl Probe {
    pub fn new(t: &Telemetry, worker: usize) -> Probe {
        Probe {
            latency: t.latency.get(worker).cloned(),
            batch: Batch::default(),
            hot: t.hotkeys.get(worker).map(|h| {
                let seed = latency::clock_ns() ^ (worker as u64).wrapping_mul(0x9e37_79b9);
                (Cell::new(Sampler::new(t.hot_rate, seed)), h.clone())
            }),
        }
    }

    /// When a batch's requests start: after the read that brought them in. 0 when off.
    #[inline]
    pub fn start(&self) -> u64 {
        if self.latency.is_some() {
            latency::clock_ns()
        } else {
            0
        }
    }

    /// A request about to run.
    #[inline]
    pub fn note(&self, req: &Request<'_>) {
        if self.latency.is_some() {
            self.batch.note(latency::command(req));
        }
        if let Some((sampler, sketch)) = &self.hot {
            let mut s = sampler.get();
            let hit = s.tick();
            sampler.set(s);
            if hit {
                offer_keys(sketch, req);
            }
        }
    }

    /// The batch's replies are written or queued: records its requests' latency.
    #[inline]
    pub fn finish(&self, started: u64) {
        if let Some(l) = &self.latency {
            self.batch
                .record(l, latency::clock_ns().saturating_sub(started));
        }
    }
}

/// Offers every key a sampled request names to the sketch.
fn offer_keys(sketch: &Mutex<TopK>, req: &Request<'_>) {
    let Ok(mut s) = sketch.lock() else { return };
    match req {
        Request::Get { keys, .. } | Request::Gat { keys, .. } => {
            for k in keys.map_while(Result::ok) {
                s.offer(k);
            }
        }
        Request::Store { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => s.offer(key),
        Request::MetaGet { key, .. }
        | Request::MetaSet { key, .. }
        | Request::MetaDelete { key, .. }
        | Request::MetaArithmetic { key, .. }
        | Request::MetaDebug { key } => s.offer(key.as_bytes()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(line: &[u8]) -> Request<'_> {
        match proto::parse(line, &proto::Limits::default()) {
            proto::Parse::Request(r, _) => r,
            _ => panic!(),
        }
    }

    #[test]
    fn probe_feeds_latency_and_every_key_at_rate_one() {
        let t = Telemetry::new(2, true, 1);
        let p = Probe::new(&t, 1);
        let started = p.start();
        p.note(&req(b"get a b a\r\n"));
        p.note(&req(b"mg a v\r\n"));
        p.note(&req(b"version\r\n"));
        p.finish(started);
        let l = latency::merged(&t.latency);
        assert_eq!(l[0].count(), 1);
        assert_eq!(l[8].count(), 1);
        let (top, sampled) = t.hot_keys(10);
        assert_eq!(sampled, 4);
        assert_eq!((&*top[0].key, top[0].count), (&b"a"[..], 3));
        let mut out = Vec::new();
        t.stats_hotkeys(&mut out);
        assert_eq!(
            out,
            b"STAT sample_rate 1\r\nSTAT sampled 4\r\nSTAT hotkey:a 3\r\nSTAT hotkey:b 1\r\nEND\r\n"
        );
        t.reset();
        let mut out = Vec::new();
        t.stats_latency(&mut out);
        assert_eq!(out, b"END\r\n");
        assert_eq!(t.hot_keys(10).1, 0);
    }

    #[test]
    fn off_means_nothing_kept() {
        let t = Telemetry::new(1, false, 0);
        let p = Probe::new(&t, 0);
        assert_eq!(p.start(), 0);
        p.note(&req(b"get a\r\n"));
        p.finish(0);
        let mut out = Vec::new();
        t.stats_latency(&mut out);
        t.stats_hotkeys(&mut out);
        assert_eq!(
            out,
            &b"STAT latency_status disabled\r\nEND\r\nSTAT hotkeys_status disabled\r\nEND\r\n"[..]
        );
    }

    #[test]
    fn odd_key_bytes_stay_on_one_line() {
        let t = Telemetry::new(1, false, 1);
        t.hotkeys[0].lock().unwrap().offer(b"a\r\nb\\");
        let mut out = Vec::new();
        t.stats_hotkeys(&mut out);
        assert!(out.windows(22).any(|w| w == b"STAT hotkey:a\\x0d\\x0ab"));
    }
}
