//! Threads, connections, per-second progress and the merge of results.

use crate::args::{Config, KeyPattern, KeyPatterns, Limit, Ratio};
use crate::client::{drive, Plan};
use crate::error::{BenchError, ConnError};
use crate::keys::{KeyGen, KeySpace};
use crate::request::{make_value, RequestGen};
use crate::stats::{new_histogram, Stats};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Time allowed after --test-time for in-flight replies before connections are cut.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// A thread that completes no request for this long is declared stuck.
const STALL_LIMIT_SECS: u32 = 10;

/// Result of one phase.
pub struct PhaseResult {
    pub stats: Stats,
    pub elapsed: Duration,
    /// Connections established.
    pub connected: usize,
    /// One entry per full second of the run.
    pub timeline: Vec<crate::stats::Second>,
}

impl PhaseResult {
    /// Both runs as one (for `--run-count`): counts and latencies summed, durations
    /// added, so rates are averages over all runs.
    pub fn combine(mut self, other: PhaseResult) -> PhaseResult {
        self.stats.merge(&other.stats);
        self.elapsed += other.elapsed;
        self.connected = self.connected.max(other.connected);
        self.timeline.extend(other.timeline);
        self
    }
}

/// Per-second message from a worker thread.
enum Msg {
    Tick {
        second: u64,
        ops: u64,
        hits: u64,
        misses: u64,
        errors: u64,
        hist: Histogram<u64>,
    },
    Done {
        stats: Box<Stats>,
        connected: usize,
        first_error: Option<ConnError>,
    },
}

#[derive(Clone)]
enum Target {
    Tcp(String),
    Unix(String),
}

impl Target {
    fn of(cfg: &Config) -> Target {
        match &cfg.args.unix_socket {
            Some(p) => Target::Unix(p.clone()),
            None => Target::Tcp(format!("{}:{}", cfg.args.server, cfg.args.port)),
        }
    }

    fn describe(&self) -> String {
        match self {
            Target::Tcp(a) => a.clone(),
            Target::Unix(p) => format!("unix:{p}"),
        }
    }

    /// A synchronous connect so an unreachable server is reported clearly, once.
    fn probe(&self) -> Result<(), BenchError> {
        let r = match self {
            Target::Tcp(a) => std::net::TcpStream::connect(a).map(|_| ()),
            Target::Unix(p) => std::os::unix::net::UnixStream::connect(p).map(|_| ()),
        };
        r.map_err(|error| BenchError::Unreachable {
            target: self.describe(),
            error,
        })
    }
}

enum Conn {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

async fn connect(t: &Target, tls: Option<&crate::tls::TlsClient>) -> Result<Conn, ConnError> {
    match t {
        Target::Tcp(a) => {
            let s =
                tokio::net::TcpStream::connect(a)
                    .await
                    .map_err(|error| ConnError::Connect {
                        target: a.clone(),
                        error,
                    })?;
            s.set_nodelay(true).map_err(ConnError::NoDelay)?;
            match tls {
                Some(tls) => Ok(Conn::Tls(Box::new(tls.handshake(s).await?))),
                None => Ok(Conn::Tcp(s)),
            }
        }
        Target::Unix(p) => tokio::net::UnixStream::connect(p)
            .await
            .map(Conn::Unix)
            .map_err(|error| ConnError::Connect {
                target: p.clone(),
                error,
            }),
    }
}

/// Runs one phase (the measured run, or the prepopulation) and merges all threads.
pub fn run_phase(cfg: &Config, live: bool) -> Result<PhaseResult, BenchError> {
    let target = Target::of(cfg);
    target.probe()?;
    let a = &cfg.args;
    let threads = a.threads;
    let total_clients = (a.threads * a.clients) as u64;
    let mut vrng = SmallRng::seed_from_u64(cfg.seed ^ 0x76616c7565);
    let value = make_value(cfg.size.max, &mut vrng);
    let space = KeySpace {
        min: a.key_minimum,
        max: a.key_maximum,
        zipf_exp: a.key_zipf_exp,
        stddev: a.key_stddev,
        median: a.key_median,
    };
    let (tx, rx) = mpsc::channel::<Msg>();
    // All threads connect first, then start together with the main thread.
    let barrier = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let tx = tx.clone();
        let barrier = barrier.clone();
        let cfg = cfg.clone();
        let target = target.clone();
        let value = value.clone();
        let h = std::thread::Builder::new()
            .name(format!("bench-{t}"))
            .spawn(move || {
                worker(t, &cfg, &target, space, value, total_clients, barrier, &tx);
            })
            .map_err(BenchError::Spawn)?;
        handles.push(h);
    }
    drop(tx);
    barrier.wait();
    let start = Instant::now();

    let mut pending: BTreeMap<u64, (usize, Msg)> = BTreeMap::new();
    let mut total = Stats::default();
    let mut connected = 0;
    let mut done = 0;
    let mut first_error = None;
    let mut timeline = Vec::new();
    while done < threads {
        let Ok(msg) = rx.recv() else { break };
        match msg {
            Msg::Done {
                stats,
                connected: c,
                first_error: e,
            } => {
                total.merge(&stats);
                connected += c;
                done += 1;
                if first_error.is_none() {
                    first_error = e;
                }
            }
            Msg::Tick { second, .. } => {
                let entry = pending.entry(second).or_insert((0, empty_tick(second)));
                entry.0 += 1;
                merge_tick(&mut entry.1, msg);
                if entry.0 == threads {
                    let (_, m) = pending.remove(&second).expect("present");
                    let sec = tick_summary(&m);
                    if live {
                        print_tick(&sec);
                    }
                    timeline.push(sec);
                }
            }
        }
    }
    let elapsed = start.elapsed();
    // Seconds not every thread reported (the final partial one).
    for (_, (_, m)) in pending {
        let sec = tick_summary(&m);
        if live {
            print_tick(&sec);
        }
        timeline.push(sec);
    }
    for h in handles {
        let _ = h.join();
    }
    if connected == 0 {
        return Err(BenchError::NoConnection(first_error));
    }
    Ok(PhaseResult {
        stats: total,
        elapsed,
        connected,
        timeline,
    })
}

fn empty_tick(second: u64) -> Msg {
    Msg::Tick {
        second,
        ops: 0,
        hits: 0,
        misses: 0,
        errors: 0,
        hist: new_histogram(),
    }
}

fn merge_tick(into: &mut Msg, from: Msg) {
    if let (
        Msg::Tick {
            ops,
            hits,
            misses,
            errors,
            hist,
            ..
        },
        Msg::Tick {
            ops: o,
            hits: h,
            misses: m,
            errors: e,
            hist: hh,
            ..
        },
    ) = (into, from)
    {
        *ops += o;
        *hits += h;
        *misses += m;
        *errors += e;
        hist.add(&hh).expect("same bounds");
    }
}

fn tick_summary(m: &Msg) -> crate::stats::Second {
    match m {
        Msg::Tick {
            second,
            ops,
            hits,
            misses,
            errors,
            hist,
        } => crate::stats::Second {
            second: *second,
            ops: *ops,
            hits: *hits,
            misses: *misses,
            errors: *errors,
            p99_us: if hist.is_empty() {
                0
            } else {
                hist.value_at_quantile(0.99)
            },
        },
        Msg::Done { .. } => unreachable!("only ticks are summarised"),
    }
}

fn print_tick(sec: &crate::stats::Second) {
    let looked = sec.hits + sec.misses;
    let hit = if looked == 0 {
        "  n/a".to_string()
    } else {
        format!("{:5.1}%", sec.hits as f64 * 100.0 / looked as f64)
    };
    let p99 = sec.p99_us as f64 / 1000.0;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "[{:>4}s] {:>9} ops/s  hit {hit}  p99 {p99:8.3} ms  errors {}",
        sec.second, sec.ops, sec.errors
    );
    let _ = out.flush();
}

#[allow(clippy::too_many_arguments)]
fn worker(
    t: usize,
    cfg: &Config,
    target: &Target,
    space: KeySpace,
    value: Arc<[u8]>,
    total_clients: u64,
    barrier: Arc<Barrier>,
    tx: &mpsc::Sender<Msg>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            barrier.wait();
            let _ = tx.send(Msg::Done {
                stats: Box::default(),
                connected: 0,
                first_error: Some(ConnError::Runtime(e)),
            });
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let a = &cfg.args;
    let interval = Rc::new(RefCell::new(Stats::default()));
    let mut total = Stats::default();
    let mut first_error: Option<ConnError> = None;
    let mut conns = Vec::with_capacity(a.clients);
    rt.block_on(async {
        for _ in 0..a.clients {
            match connect(target, cfg.tls.as_ref()).await {
                Ok(c) => conns.push(c),
                Err(e) => {
                    total.connection_errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
    });
    let connected = conns.len();
    barrier.wait();
    let start = Instant::now();
    let deadline = match cfg.limit {
        Limit::Seconds(s) => Some(start + Duration::from_secs(s)),
        Limit::Requests(_) => None,
    };
    let max_requests = match cfg.limit {
        Limit::Requests(n) => Some(n),
        Limit::Seconds(_) => None,
    };
    // Each connection sends at rate / connections, offset so they do not fire together.
    let per_conn_interval = a
        .rate
        .map(|r| Duration::from_secs_f64(total_clients as f64 / r as f64));

    // A paced thread that is due less than one request a second may legitimately be idle.
    let stall_check = match a.rate {
        None => true,
        Some(r) => r as f64 / a.threads as f64 >= 1.0,
    };
    let errors: Rc<RefCell<Vec<ConnError>>> = Rc::default();
    let seconds_sent = std::cell::Cell::new(0u64);
    local.block_on(&rt, async {
        let mut handles = Vec::with_capacity(conns.len());
        for (c, conn) in conns.into_iter().enumerate() {
            let idx = (t * a.clients + c) as u64;
            let mut rng = SmallRng::seed_from_u64(
                cfg.seed
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(idx.wrapping_mul(0xD1B5_4A32_D192_ED03)),
            );
            let set_keys = KeyGen::new(a.key_pattern.set, space, idx, total_clients);
            let get_keys = KeyGen::new(a.key_pattern.get, space, idx, total_clients);
            // Decorrelate the random streams of clients from their key slices.
            let _ = rand::Rng::gen::<u64>(&mut rng);
            let gen = RequestGen::new(
                a.protocol,
                &a.key_prefix,
                a.ratio,
                set_keys,
                get_keys,
                a.multi_key_get,
                cfg.size,
                a.expiry_range
                    .map_or((a.ttl, a.ttl), |r| (r.min as u32, r.max as u32)),
                value.clone(),
                rng,
            );
            let max_requests = if cfg.one_pass {
                // With more connections than keys, the surplus ones stay idle.
                let range = space.range();
                Some(if idx < range {
                    crate::keys::seq_slice(range, idx, total_clients).1
                } else {
                    0
                })
            } else {
                max_requests
            };
            let plan = Plan {
                pipeline: a.pipeline,
                max_requests,
                deadline,
                interval: per_conn_interval,
                first_due: start
                    + per_conn_interval
                        .map(|iv| iv.mul_f64(idx as f64 / total_clients as f64))
                        .unwrap_or_default(),
            };
            let stats = interval.clone();
            let errors = errors.clone();
            handles.push(tokio::task::spawn_local(async move {
                let r = match conn {
                    Conn::Tcp(s) => drive(s, gen, plan, stats.clone()).await,
                    Conn::Unix(s) => drive(s, gen, plan, stats.clone()).await,
                    Conn::Tls(s) => drive(s, gen, plan, stats.clone()).await,
                };
                if let Err(e) = r {
                    stats.borrow_mut().connection_errors += 1;
                    errors.borrow_mut().push(e);
                }
            }));
        }
        let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
        let all_done = async {
            for h in handles {
                let _ = h.await;
            }
        };
        // Every second: publish the interval, fold it into the total; also the watchdog.
        let ticker = async {
            let mut tick = tokio::time::interval_at(
                (start + Duration::from_secs(1)).into(),
                Duration::from_secs(1),
            );
            let mut idle = 0u32;
            let mut second;
            loop {
                tick.tick().await;
                second = seconds_sent.get() + 1;
                seconds_sent.set(second);
                let mut iv = interval.borrow_mut();
                let ops = iv.ops();
                let hist = iv.all_latency();
                let _ = tx.send(Msg::Tick {
                    second,
                    ops,
                    hits: iv.hits,
                    misses: iv.misses,
                    errors: iv.errors,
                    hist,
                });
                total.merge(&iv);
                *iv = Stats::default();
                drop(iv);
                idle = if ops == 0 { idle + 1 } else { 0 };
                let past_deadline = deadline.is_some_and(|d| Instant::now() > d + DRAIN_GRACE);
                if past_deadline || (idle >= STALL_LIMIT_SECS && stall_check) {
                    return;
                }
            }
        };
        tokio::select! {
            _ = all_done => {}
            _ = ticker => {
                let mut cut = 0;
                for h in &aborts {
                    if !h.is_finished() {
                        h.abort();
                        cut += 1;
                    }
                }
                interval.borrow_mut().connection_errors += cut;
                errors.borrow_mut().push(ConnError::Stalled(cut));
            }
        }
    });
    // The last, partial second (a run rarely ends on a tick).
    let last = interval.borrow();
    if last.ops() > 0 || last.errors > 0 {
        let _ = tx.send(Msg::Tick {
            second: seconds_sent.get() + 1,
            ops: last.ops(),
            hits: last.hits,
            misses: last.misses,
            errors: last.errors,
            hist: last.all_latency(),
        });
    }
    total.merge(&last);
    drop(last);
    if first_error.is_none() {
        first_error = errors.borrow_mut().drain(..).next();
    }
    let _ = tx.send(Msg::Done {
        stats: Box::new(total),
        connected,
        first_error,
    });
}

/// Settings for `--prepopulate`: every key of the range written once (pattern P:P).
pub fn prepopulate_config(cfg: &Config) -> Config {
    let mut p = cfg.clone();
    let range = cfg.args.key_maximum - cfg.args.key_minimum + 1;
    let conns = (cfg.args.threads * cfg.args.clients) as u64;
    p.args.ratio = Ratio { set: 1, get: 0 };
    p.args.key_pattern = KeyPatterns {
        set: KeyPattern::Parallel,
        get: KeyPattern::Parallel,
    };
    p.args.rate = None;
    p.args.pipeline = cfg.args.pipeline.max(16);
    p.limit = Limit::Requests(range.div_ceil(conns));
    p.one_pass = true;
    p
}
