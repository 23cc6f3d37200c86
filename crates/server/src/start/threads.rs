//! The server's threads: builds the shared state, starts the workers (io_uring or epoll),
//! the maintenance and signal threads, runs the acceptor, and saves items at a graceful stop.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use mio::{Poll, Waker};

use super::accept::accept_loop;
use super::listen::Listener;
use super::signals::{install_signal_handler, EarlySignals};
use crate::auth;
use crate::clock::unix_now;
use crate::config::{Settings, VERSION};
use crate::event::handoff::{self, WAKER};
use crate::event::uring;
use crate::event::worker::Worker;
use crate::flash::reads::Job;
use crate::shared::Shared;
use crate::stats::ThreadStats;
use crate::{engine, flash, metrics, metrics_prom, placement, restart, tls};

pub fn run(
    settings: Settings,
    listeners: Vec<Listener>,
    udp: Vec<Vec<std::net::UdpSocket>>,
    tls: Option<tls::Tls>,
    metrics: Option<std::net::TcpListener>,
    auth: Option<auth::Authenticator>,
    early: EarlySignals,
) -> Result<(), String> {
    let threads = settings.threads;
    let now = unix_now();
    let store_config = store::Config {
        mem_limit: settings.mem_limit as u64,
        item_size_max: settings.item_size_max,
        process_start: now,
        evictions: settings.evictions,
    };
    let (store, flash_watch) = match &settings.flash {
        Some(f) => {
            let files = flash::files::Files::open(&f.paths, f.store.page_size)?;
            let watch = files.watch();
            let store = store::Store::with_flash(store_config, Box::new(files), f.store.clone())?;
            (store, Some(watch))
        }
        None => (store::Store::new(store_config), None),
    };
    if let Some(f) = &settings.flash {
        let memory_file = settings.memory_file.as_deref();
        let present = memory_file.is_some_and(|p| std::path::Path::new(p).exists());
        restart::load_flash(&store, &restart::flash_index_path(f), present, now);
    }
    if let Some(path) = &settings.memory_file {
        restart::load(&store, path, now);
    }
    let limits = proto::Limits {
        item_size_max: settings.item_size_max,
        ..proto::Limits::default()
    };

    let mut polls = Vec::new();
    let mut wakers = Vec::new();
    for _ in 0..threads {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?;
        wakers.push(Arc::new(waker));
        polls.push(poll);
    }
    let accept_poll = Poll::new().map_err(|e| e.to_string())?;
    let accept_waker =
        Arc::new(Waker::new(accept_poll.registry(), WAKER).map_err(|e| e.to_string())?);
    let mut all_wakers = wakers.clone();
    all_wakers.push(accept_waker);

    let io_threads = settings.flash.as_ref().map_or(0, |f| f.threads);
    let flash_io = settings
        .flash
        .as_ref()
        .map(|f| flash::reads::FlashIo::new(threads, f.io_depth));
    let gate = Arc::new(store::EventsGate::default());
    let watch =
        Arc::new(crate::watch::Hub::new(threads, settings.watcher_buf).with_gate(gate.clone()));
    let tracking = Arc::new(
        crate::tracking::Tracker::new(settings.track_max_keys, settings.track_total_keys)
            .with_gate(gate.clone()),
    );
    store.set_events(
        Arc::new(crate::departures::Departures {
            tracking: tracking.clone(),
            watch: watch.clone(),
            wakers: all_wakers.clone(),
        }),
        gate,
    );
    let shared = Arc::new(Shared {
        verbosity: AtomicU8::new(settings.verbose),
        limits,
        store,
        // The workers', then the I/O threads' (UDP requests they answer).
        stats: (0..threads + io_threads).map(|_| Arc::default()).collect(),
        registry: (0..threads).map(|_| Mutex::default()).collect(),
        curr_conns: AtomicUsize::new(0),
        worker_conns: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
        cpu_groups: (0..threads)
            .map(|_| {
                (0..placement::CPU_GROUPS)
                    .map(|_| AtomicUsize::new(0))
                    .collect()
            })
            .collect(),
        shutdown: AtomicBool::new(false),
        graceful: AtomicBool::new(false),
        process_start: now,
        wakers: all_wakers,
        auth,
        telemetry: metrics::Telemetry::new(threads, settings.latency, settings.hotkeys_rate),
        watch,
        tracking,
        settings,
        tls,
        flash_io,
    });
    if let Some(listener) = metrics {
        let shared = shared.clone();
        telemetry::http::spawn(listener, "metrics", move || metrics_prom::render(&shared))
            .map_err(|e| e.to_string())?;
    }

    install_signal_handler(shared.clone(), early)?;

    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel()).unzip();
    let mut handles = Vec::new();
    let mut udp = udp.into_iter();
    for ((id, poll), rx) in polls.into_iter().enumerate().zip(receivers) {
        let udp = udp.next().unwrap_or_default();
        if shared.settings.io_engine == engine::IoEngine::Uring {
            let (shared, peers) = (shared.clone(), senders.clone());
            handles.push(
                thread::Builder::new()
                    .name(format!("worker-{id}"))
                    .spawn(move || {
                        match uring::UringWorker::new(id, poll, rx, peers, shared.clone(), udp) {
                            Ok(w) => w.run(),
                            Err(e) => {
                                stderr_line!("worker {id}: io_uring setup failed: {e}");
                                shared.request_shutdown();
                            }
                        }
                    })
                    .map_err(|e| e.to_string())?,
            );
            continue;
        }
        let w = Worker::new(id, poll, rx, senders.clone(), shared.clone(), udp)
            .map_err(|e| e.to_string())?;
        handles.push(
            thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || w.run())
                .map_err(|e| e.to_string())?,
        );
    }

    for i in 0..io_threads {
        let shared = shared.clone();
        let stats = shared.stats[threads + i].clone();
        handles.push(
            thread::Builder::new()
                .name(format!("flash-io-{i}"))
                .spawn(move || flash_reader(&shared, &stats))
                .map_err(|e| e.to_string())?,
        );
    }

    if shared.settings.flash.is_some() {
        let shared = shared.clone();
        handles.push(
            thread::Builder::new()
                .name("flash-compact".into())
                .spawn(move || flash_compactor(&shared))
                .map_err(|e| e.to_string())?,
        );
    }

    let maint = {
        let shared = shared.clone();
        thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || maintenance(&shared, flash_watch))
            .map_err(|e| e.to_string())?
    };

    accept_loop(&shared, accept_poll, listeners, &senders, &wakers);
    shared.request_shutdown();
    for h in handles {
        let _ = h.join();
    }
    let _ = maint.join();
    if shared.graceful.load(SeqCst) {
        stderr_line!("Gracefully stopping");
        if let Some(path) = &shared.settings.memory_file {
            restart::save(&shared.store, path, VERSION, unix_now())?;
            if let Some(f) = &shared.settings.flash {
                restart::save_flash(&shared.store, &restart::flash_index_path(f))?;
            }
        }
    }
    Ok(())
}

/// An I/O thread: makes the flash reads requests ask for and wakes their workers, and
/// answers UDP requests on flash keys (`stats`: its counters).
fn flash_reader(shared: &Shared, stats: &ThreadStats) {
    let Some(io) = &shared.flash_io else {
        return;
    };
    while let Some(job) = io.next(|| shared.shutdown.load(SeqCst)) {
        match job {
            Job::Read { loc, to, ticket } => {
                let read = shared.store.read_located(loc, Vec::new());
                let worker = io.finish(to, ticket, read);
                handoff::wake(&shared.wakers[worker]);
            }
            Job::Datagram(answer, ticket) => {
                answer(stats);
                io.finish_datagram(ticket);
            }
        }
    }
}

/// Flash compaction: pages due are read at most this fast, so that compaction never takes
/// the device from reads and writes (a default page a second).
const COMPACT_BYTES_PER_SEC: u64 = 64 << 20;

/// Compacts flash pages as they come due (`Store::compact_flash`), at a bounded rate.
fn flash_compactor(shared: &Shared) {
    let mut buf = Vec::new();
    while !shared.shutdown.load(SeqCst) {
        let read = shared.store.compact_flash(&mut buf, unix_now());
        let pause = if read == 0 {
            Duration::from_millis(100)
        } else {
            Duration::from_micros(read * 1_000_000 / COMPACT_BYTES_PER_SEC)
        };
        thread::sleep(pause);
    }
}

/// Items examined per maintenance pass, so a pass never holds shards for long.
const RECLAIM_BUDGET: usize = 20_000;

/// Reclaims expired items and does other bounded background work about once a second.
fn maintenance(shared: &Shared, flash_watch: Option<flash::files::Watch>) {
    while !shared.shutdown.load(SeqCst) {
        shared.store.reclaim(unix_now(), RECLAIM_BUDGET);
        shared
            .tracking
            .sweep(unix_now(), &shared.watch, &shared.wakers);
        if let Some(path) = flash_watch.as_ref().and_then(|w| w.missing()) {
            shared
                .store
                .stop_flash(format!("ext_path {path} was removed or replaced"));
        }
        if let Some(e) = shared.store.flash_error() {
            stderr_line!("[flash] writes stopped, flash items are misses from now on: {e}");
        }
        if flash_watch.is_some() {
            // Segments freed to make room for the growing flash index are heap holes glibc
            // keeps; hand them back so RSS stays within -m plus the stated bound.
            // SAFETY: malloc_trim only releases free heap pages.
            unsafe { libc::malloc_trim(0) };
        }
        for _ in 0..10 {
            if shared.shutdown.load(SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}
