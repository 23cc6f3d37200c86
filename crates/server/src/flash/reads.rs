//! Flash reads off the worker threads, as memcached's extstore IO threads: a request on a
//! TCP connection that meets a key on flash asks for reads here (a text get's: that key's
//! and the next flash keys' of the same request, up to `ext_io_depth`) and its connection
//! waits; `ext_threads` I/O threads make the reads and queue each to its worker, which
//! wakes, hands the bytes to the connection and runs the request again from where it
//! paused. Other connections are served meanwhile.
//!
//! Reads are bounded per connection (`ext_io_depth`) and in all (`MAX_READS`, `MAX_BYTES`,
//! counted until the connection has used the bytes or is gone); past that a get reads in
//! line on its worker, as it does without I/O threads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use store::{FlashLoc, Prefetched};

/// Reads asked for and not yet used, across all connections.
pub const MAX_READS: usize = 1024;
/// Their bytes, across all connections.
pub const MAX_BYTES: usize = 64 << 20;
/// `ext_io_depth` when not given: reads one connection may have under way, so a multi-get's
/// flash keys are read in parallel (memcached's default of 1 serves one key at a time).
pub const DEFAULT_DEPTH: u32 = 16;
/// How often an idle I/O thread checks for shutdown.
const IDLE_CHECK: Duration = Duration::from_millis(200);

/// Whose read it is: the connection (worker, slot, the `FlashWait` id telling it from a
/// later connection in the same slot) and the key's place in its get.
#[derive(Clone, Copy, Debug)]
pub struct ReadFor {
    pub worker: usize,
    pub token: usize,
    pub id: u64,
    pub index: u32,
}

/// Reads and bytes held, given back when a `Ticket` drops.
#[derive(Default)]
struct Held {
    reads: AtomicUsize,
    bytes: AtomicUsize,
}

/// One read's share of the bounds, held from the ask until its bytes are used or dropped.
struct Ticket {
    held: Arc<Held>,
    bytes: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.held.reads.fetch_sub(1, Relaxed);
        self.held.bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// A read for an I/O thread to make.
pub struct Job {
    pub loc: FlashLoc,
    pub to: ReadFor,
    ticket: Ticket,
}

/// A read made, on its way to the connection.
pub struct Fetched {
    pub read: Prefetched,
    _ticket: Ticket,
}

/// What a connection waits for: reads asked for by the get at the front of its buffer.
pub struct FlashWait {
    pub id: u64,
    /// Asked for and not back yet; the connection runs nothing until this is 0.
    pub in_flight: u32,
    /// Reads back, by the key's place in the get.
    got: Vec<(u32, Fetched)>,
}

impl FlashWait {
    /// The read made for key `index` of the get, if any.
    pub fn take(&mut self, index: u32) -> Option<Fetched> {
        let i = self.got.iter().position(|(k, _)| *k == index)?;
        Some(self.got.swap_remove(i).1)
    }

    /// Whether key `index` was read (or is being read).
    pub fn has(&self, index: u32) -> bool {
        self.got.iter().any(|(k, _)| *k == index)
    }
}

/// The I/O threads' queue, their completions per worker, and the counters.
pub struct FlashIo {
    jobs: Mutex<VecDeque<Job>>,
    wake: Condvar,
    done: Vec<Mutex<Vec<(ReadFor, Fetched)>>>,
    held: Arc<Held>,
    next_id: AtomicU64,
    /// `ext_io_depth`.
    pub depth: u32,
    /// Reads asked for and not yet made (`extstore_io_queue`).
    queued: AtomicUsize,
    /// Reads whose connection was gone when they came back (`get_aborted_extstore`).
    aborted: AtomicU64,
    /// Reads the I/O threads made (`extstore_io_reads`).
    made: AtomicU64,
}

impl FlashIo {
    pub fn new(workers: usize, depth: u32) -> FlashIo {
        FlashIo {
            jobs: Mutex::new(VecDeque::new()),
            wake: Condvar::new(),
            done: (0..workers).map(|_| Mutex::default()).collect(),
            held: Arc::default(),
            next_id: AtomicU64::new(1),
            depth: depth.max(1),
            queued: AtomicUsize::new(0),
            aborted: AtomicU64::new(0),
            made: AtomicU64::new(0),
        }
    }

    /// A connection starts waiting: its reads are told apart by this.
    pub fn wait(&self) -> FlashWait {
        FlashWait {
            id: self.next_id.fetch_add(1, Relaxed),
            in_flight: 0,
            got: Vec::new(),
        }
    }

    /// Asks for the read of `loc`; false when the bounds are reached (read it in line).
    pub fn submit(&self, loc: FlashLoc, to: ReadFor) -> bool {
        let bytes = loc.read_bytes();
        let reads = self.held.reads.fetch_add(1, Relaxed);
        let held = self.held.bytes.fetch_add(bytes, Relaxed);
        let ticket = Ticket {
            held: self.held.clone(),
            bytes,
        };
        if reads >= MAX_READS || held + bytes > MAX_BYTES {
            return false;
        }
        self.queued.fetch_add(1, Relaxed);
        lock(&self.jobs).push_back(Job { loc, to, ticket });
        self.wake.notify_one();
        true
    }

    /// For an I/O thread: the next read to make, or None once `stop` says so.
    pub fn next(&self, stop: impl Fn() -> bool) -> Option<Job> {
        let mut jobs = lock(&self.jobs);
        loop {
            if stop() {
                return None;
            }
            if let Some(j) = jobs.pop_front() {
                return Some(j);
            }
            jobs = match self.wake.wait_timeout(jobs, IDLE_CHECK) {
                Ok((j, _)) => j,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Queues a read made to its worker; returns the worker, to be woken.
    pub fn finish(&self, job: Job, read: Prefetched) -> usize {
        self.queued.fetch_sub(1, Relaxed);
        self.made.fetch_add(1, Relaxed);
        let fetched = Fetched {
            read,
            _ticket: job.ticket,
        };
        lock(&self.done[job.to.worker]).push((job.to, fetched));
        job.to.worker
    }

    /// For a woken worker: the reads made for its connections.
    pub fn take_done(&self, worker: usize) -> Vec<(ReadFor, Fetched)> {
        std::mem::take(&mut *lock(&self.done[worker]))
    }

    /// Hands a read made to what the connection in `to.token`'s slot waits for (`wait`):
    /// true when that was the last read it waited for. A read whose connection is gone is
    /// dropped and counted.
    pub fn deliver(&self, wait: Option<&mut FlashWait>, to: ReadFor, f: Fetched) -> bool {
        match wait {
            Some(w) if w.id == to.id && w.in_flight > 0 => {
                w.got.push((to.index, f));
                w.in_flight -= 1;
                w.in_flight == 0
            }
            _ => {
                self.aborted.fetch_add(1, Relaxed);
                false
            }
        }
    }

    /// Reads asked for and not yet made.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// Reads whose connection was gone.
    pub fn aborted(&self) -> u64 {
        self.aborted.load(Relaxed)
    }

    /// Reads the I/O threads made.
    pub fn made(&self) -> u64 {
        self.made.load(Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
