//! Flash reads off the worker threads, as memcached's extstore IO threads: a request on a
//! TCP connection that meets a key on flash asks for reads here (a text get's: that key's
//! and the next flash keys' of the same request, up to `ext_io_depth`) and its connection
//! waits; `ext_threads` I/O threads make the reads and queue each to its worker, which
//! wakes, hands the bytes to the connection and runs the request again from where it
//! paused. Other connections are served meanwhile.
//!
//! Reads are bounded per connection (`ext_io_depth`) and in all (`MAX_READS`, `MAX_BYTES`,
//! counted from the ask until the read is handed to its connection). A request that meets
//! the bounds waits without reads under way (`FlashWait::starved`) and its worker asks
//! again once there is room: the worker never reads the disk itself. A connection holds at
//! most `ext_io_depth` reads handed to it and not yet answered from.
//!
//! UDP requests have no connection to wait: one that names a key on flash is answered by
//! an I/O thread whole (`Job::Datagram`), under the same bounds; past them it is dropped,
//! as the kernel drops datagrams a busy server cannot take, and the client's retry asks
//! again.

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

/// One read's share of the bounds, held from the ask until it is handed to its connection.
pub struct Ticket {
    held: Arc<Held>,
    bytes: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.held.reads.fetch_sub(1, Relaxed);
        self.held.bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// A UDP request an I/O thread answers whole (flash read in line there), given its counters.
pub type DatagramJob = Box<dyn FnOnce(&crate::stats::ThreadStats) + Send>;

/// Work for an I/O thread.
pub enum Job {
    /// A read to make and hand back to the worker of `to`.
    Read {
        loc: FlashLoc,
        to: ReadFor,
        ticket: Ticket,
    },
    /// A datagram to answer; the ticket holds its share of the bounds until it is done.
    Datagram(DatagramJob, Ticket),
}

/// A read made, on its way to the connection.
pub struct Fetched {
    pub read: Prefetched,
    _ticket: Ticket,
}

/// What a connection waits for: reads asked for by the request at the front of its buffer.
pub struct FlashWait {
    pub id: u64,
    /// Asked for and not back yet; the connection runs nothing until this is 0.
    pub in_flight: u32,
    /// The bounds were reached before any read could be asked for: the connection runs
    /// nothing until its worker sees room (`FlashIo::room_for_starved`).
    pub starved: bool,
    /// Reads back, by the key's place in the request.
    got: Vec<(u32, Prefetched)>,
}

impl FlashWait {
    /// Whether the connection must wait: for reads under way, or for room to ask for one.
    pub fn waiting(&self) -> bool {
        self.in_flight > 0 || self.starved
    }

    /// The read made for key `index` of the get, if any.
    pub fn take(&mut self, index: u32) -> Option<Prefetched> {
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
    /// Per worker: connections waiting for room to ask for reads.
    starved: Vec<Mutex<Vec<ReadFor>>>,
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
            starved: (0..workers).map(|_| Mutex::default()).collect(),
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
            starved: false,
            got: Vec::new(),
        }
    }

    /// Asks for the read of `loc`; false when the bounds are reached.
    pub fn submit(&self, loc: FlashLoc, to: ReadFor) -> bool {
        let Some(ticket) = self.ticket(loc.read_bytes()) else {
            return false;
        };
        self.push(Job::Read { loc, to, ticket });
        true
    }

    /// Asks an I/O thread to answer a datagram (`bytes`: about what it holds while queued
    /// and answered); false when the bounds are reached.
    pub fn submit_datagram(&self, job: DatagramJob, bytes: usize) -> bool {
        let Some(ticket) = self.ticket(bytes) else {
            return false;
        };
        self.push(Job::Datagram(job, ticket));
        true
    }

    /// A share of the bounds, if they have room for it.
    fn ticket(&self, bytes: usize) -> Option<Ticket> {
        let reads = self.held.reads.fetch_add(1, Relaxed);
        let held = self.held.bytes.fetch_add(bytes, Relaxed);
        let ticket = Ticket {
            held: self.held.clone(),
            bytes,
        };
        (reads < MAX_READS && held + bytes <= MAX_BYTES).then_some(ticket)
    }

    fn push(&self, job: Job) {
        self.queued.fetch_add(1, Relaxed);
        lock(&self.jobs).push_back(job);
        self.wake.notify_one();
    }

    /// The request of the connection `to` met the bounds before it could ask for a read:
    /// it waits (`w.starved`) until its worker finds room (`room_for_starved`).
    pub fn starve(&self, w: &mut FlashWait, to: ReadFor) {
        w.starved = true;
        lock(&self.starved[to.worker]).push(ReadFor { id: w.id, ..to });
    }

    /// Whether connections of `worker` wait for room (its loop then polls briefly).
    pub fn has_starved(&self, worker: usize) -> bool {
        !lock(&self.starved[worker]).is_empty()
    }

    /// For a worker: its connections that waited for room, once there is some; each is to
    /// be given `end_starved` and run again (asking again, and waiting again if others
    /// took the room first).
    pub fn room_for_starved(&self, worker: usize) -> Vec<ReadFor> {
        let room =
            self.held.reads.load(Relaxed) < MAX_READS && self.held.bytes.load(Relaxed) < MAX_BYTES;
        if !room {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.starved[worker]))
    }

    /// Ends the wait of the connection `to` names (if it is still the one that waited):
    /// true when it is to run again.
    pub fn end_starved(&self, wait: Option<&mut FlashWait>, to: ReadFor) -> bool {
        match wait {
            Some(w) if w.id == to.id && w.starved => {
                w.starved = false;
                true
            }
            _ => false,
        }
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
    pub fn finish(&self, to: ReadFor, ticket: Ticket, read: Prefetched) -> usize {
        self.queued.fetch_sub(1, Relaxed);
        self.made.fetch_add(1, Relaxed);
        let fetched = Fetched {
            read,
            _ticket: ticket,
        };
        lock(&self.done[to.worker]).push((to, fetched));
        to.worker
    }

    /// A datagram answered (`Job::Datagram`): counted as one read made.
    pub fn finish_datagram(&self, ticket: Ticket) {
        self.queued.fetch_sub(1, Relaxed);
        self.made.fetch_add(1, Relaxed);
        drop(ticket);
    }

    /// For a woken worker: the reads made for its connections.
    pub fn take_done(&self, worker: usize) -> Vec<(ReadFor, Fetched)> {
        std::mem::take(&mut *lock(&self.done[worker]))
    }

    /// Hands a read made to what the connection in `to.token`'s slot waits for (`wait`),
    /// giving its share of the bounds back: true when that was the last read it waited
    /// for. A read whose connection is gone is dropped and counted.
    pub fn deliver(&self, wait: Option<&mut FlashWait>, to: ReadFor, f: Fetched) -> bool {
        match wait {
            Some(w) if w.id == to.id && w.in_flight > 0 => {
                w.got.push((to.index, f.read));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> DatagramJob {
        Box::new(|_| {})
    }

    #[test]
    fn a_request_past_the_bounds_waits_until_a_read_is_done() {
        let io = FlashIo::new(2, 4);
        for _ in 0..MAX_READS {
            assert!(io.submit_datagram(noop(), 100));
        }
        assert!(!io.submit_datagram(noop(), 100), "past MAX_READS");
        let mut w = io.wait();
        let to = ReadFor {
            worker: 1,
            token: 7,
            id: 0,
            index: 0,
        };
        io.starve(&mut w, to);
        assert!(w.waiting());
        assert!(io.has_starved(1) && !io.has_starved(0));
        assert!(io.room_for_starved(1).is_empty(), "no room yet");
        let Some(Job::Datagram(_, ticket)) = io.next(|| false) else {
            panic!("a queued datagram");
        };
        io.finish_datagram(ticket);
        let again = io.room_for_starved(1);
        assert_eq!(again.len(), 1);
        assert!(io.end_starved(Some(&mut w), again[0]));
        assert!(!w.waiting());
        // A later connection in the same slot is not the one that waited.
        let mut later = io.wait();
        later.starved = true;
        assert!(!io.end_starved(Some(&mut later), again[0]));
        assert!(!io.has_starved(1));
    }

    #[test]
    fn the_bytes_bound_refuses_what_would_pass_it() {
        let io = FlashIo::new(1, 4);
        assert!(io.submit_datagram(noop(), MAX_BYTES - 10));
        assert!(!io.submit_datagram(noop(), 11));
        assert!(io.submit_datagram(noop(), 10));
    }
}
