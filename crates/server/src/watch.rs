//! memcached's `watch`: connections that, once they asked, receive log lines about what the
//! server does (fetches, stores, deletions, connections), in memcached 1.6's formats.
//!
//! Event sites check one relaxed atomic (`Hub::wants`) and do nothing more unless a watcher
//! asked for that kind. A line is built once and appended to each interested watcher's
//! bounded queue under a short lock; the watcher's worker is woken once per batch and moves
//! the queue into the connection's write path. A producer never waits on a watcher: a full
//! queue drops lines and counts them, and the watcher gets memcached's `skipped=N` line once
//! there is room again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proto::reply::write_u64;
use proto::url_encode;

use mio::Waker;

/// memcached's flag bits for the kinds memfleet can log (logger.h).
pub const FETCHERS: u32 = 1 << 2;
pub const MUTATIONS: u32 = 1 << 3;
pub const CONNEVENTS: u32 = 1 << 5;
pub const EVICTIONS: u32 = 1 << 6;
/// `deletions` (memcached 1.6.19+).
pub const DELETIONS: u32 = 1 << 13;
/// Kinds memcached accepts that memfleet never produces (system, proxy and raw-command logs).
const SILENT: u32 = 1 << 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12;

/// memcached's limit on watchers at a time.
pub const MAX_WATCHERS: usize = 20;
/// memcached's default per-watcher buffer (LOGGER_WATCHER_BUF_SIZE).
pub const DEFAULT_BUF: usize = 256 * 1024;
/// Room kept for the `skipped=N` line in front of the next line (memcached keeps 128).
const SKIP_ROOM: usize = 128;

/// The kinds named by `watch`'s arguments (fetchers alone when none), or None for a word
/// memcached does not know.
pub fn parse_kinds<'a>(args: impl Iterator<Item = &'a [u8]>) -> Option<u32> {
    let mut kinds = 0;
    let mut any = false;
    for a in args {
        any = true;
        kinds |= match a {
            b"fetchers" => FETCHERS,
            b"mutations" => MUTATIONS,
            b"connevents" => CONNEVENTS,
            b"evictions" => EVICTIONS,
            b"deletions" => DELETIONS,
            b"sysevents" => 1 << 1,
            b"rawcmds" => 1 << 9,
            b"proxyreqs" => 1 << 10,
            b"proxyevents" => 1 << 11,
            b"proxyuser" => 1 << 12,
            _ => return None,
        };
    }
    Some(if any { kinds } else { FETCHERS })
}

/// One watching connection's queue of lines not yet handed to its worker.
pub struct Watcher {
    kinds: u32,
    pub worker: usize,
    pub token: usize,
    /// Lines logged before it started are not its.
    min_gid: u64,
    /// A near-cache listener's notices (`crate::tracking`), not log lines: lines it could
    /// not take are made up for with `IV_ALL`, not counted with `skipped=N`.
    notices: bool,
    q: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    buf: Vec<u8>,
    /// Lines dropped since the last one queued.
    skipped: u64,
    /// Its worker was told and has not taken the queue since.
    told: bool,
    /// A notice feed's socket while its worker has nothing unsent and nothing is queued: a
    /// writer sends its notice straight into it, so the notice is in the listener's socket
    /// before the write is answered, not when the listener's worker next runs.
    direct: Option<i32>,
    /// When a writer last sent into `direct`: a burst after it is left to the worker, which
    /// sends it in one write.
    last_direct: Option<Instant>,
    /// When the queue last went from empty to not: a writer that finds it still queued
    /// `RESCUE_AFTER` later sends it itself.
    queued_at: Option<Instant>,
}

/// A feed's writers send into its socket themselves at most once per this (per feed)...
const DIRECT_GAP: Duration = Duration::from_micros(200);
/// ...and, past it, send what is queued once its worker has left it this long.
const RESCUE_AFTER: Duration = Duration::from_millis(1);

impl Watcher {
    /// Moves the queued lines to the end of `out`. The worker is about to write: writers
    /// queue from now on.
    pub fn take(&self, out: &mut Vec<u8>) {
        let Ok(mut q) = self.q.lock() else { return };
        q.direct = None;
        q.queued_at = None;
        if out.is_empty() {
            std::mem::swap(out, &mut q.buf);
        } else {
            out.extend_from_slice(&q.buf);
            q.buf.clear();
        }
        if self.notices && q.skipped > 0 {
            out.extend_from_slice(b"IV_ALL\r\n");
            q.skipped = 0;
        }
        q.told = false;
    }

    /// Called by the worker once everything it wrote to the feed's socket `fd` (plain TCP or
    /// unix, not TLS) is sent and none is in flight: writers may send notices into it
    /// themselves until the worker next `take`s. Not when lines are queued (its worker was
    /// told and comes to take them).
    pub fn send_directly(&self, fd: i32) {
        let Ok(mut q) = self.q.lock() else { return };
        if self.notices && q.buf.is_empty() && q.skipped == 0 {
            q.direct = Some(fd);
        }
    }

    /// Before the socket closes: no writer may send into it (or into what reuses its number).
    pub fn stop_direct(&self) {
        if let Ok(mut q) = self.q.lock() {
            q.direct = None;
        }
    }
}

/// Sends `line` into `fd` without blocking; the bytes the socket took.
fn send_now(fd: i32, line: &[u8]) -> usize {
    // SAFETY: `fd` is an open socket (the queue's lock keeps its worker from closing it
    // meanwhile) and `line` is valid for its length.
    let n = unsafe {
        libc::send(
            fd,
            line.as_ptr().cast(),
            line.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).unwrap_or(0)
}

/// Why `Hub::add` refused a watcher.
pub enum AddError {
    TooMany,
}

pub struct Hub {
    /// The kinds some watcher asked for: the one load an event site makes.
    mask: AtomicU32,
    /// memcached's log entry ids, counted over every line logged.
    gid: AtomicU64,
    watchers: RwLock<Vec<Arc<Watcher>>>,
    /// Per worker, its watchers' tokens with lines queued since it was last told.
    ready: Vec<Mutex<Vec<usize>>>,
    /// Bytes a watcher's queue holds at most.
    cap: usize,
    /// Open while some watcher wants evictions, which only the store sees.
    gate: Arc<store::EventsGate>,
}

impl Hub {
    pub fn new(workers: usize, cap: usize) -> Hub {
        Hub {
            gate: Arc::default(),
            mask: AtomicU32::new(0),
            gid: AtomicU64::new(0),
            watchers: RwLock::new(Vec::new()),
            ready: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
            cap: cap.max(4096),
        }
    }

    /// Whether a watcher wants lines of `kind`.
    #[inline(always)]
    pub fn wants(&self, kind: u32) -> bool {
        self.mask.load(Relaxed) & kind != 0
    }

    /// Watchers at the moment (`stats` `log_watchers`).
    pub fn count(&self) -> usize {
        self.watchers.read().map(|w| w.len()).unwrap_or(0)
    }

    /// Registers connection `token` of `worker` as a watcher of `kinds`.
    pub fn add(&self, kinds: u32, worker: usize, token: usize) -> Result<Arc<Watcher>, AddError> {
        let mut ws = self.watchers.write().map_err(|_| AddError::TooMany)?;
        if ws.len() >= MAX_WATCHERS {
            return Err(AddError::TooMany);
        }
        let w = Arc::new(Watcher {
            kinds: kinds & !SILENT,
            worker,
            token,
            min_gid: self.gid.fetch_add(1, Relaxed) + 1,
            notices: false,
            q: Mutex::new(Queue::default()),
        });
        ws.push(w.clone());
        self.set_mask(&ws);
        Ok(w)
    }

    /// A queue for connection `token` of `worker` that only `push` fills: a near-cache
    /// listener's notices. Not a watcher: not counted, never sent log lines.
    pub fn feed(&self, worker: usize, token: usize) -> Arc<Watcher> {
        Arc::new(Watcher {
            kinds: 0,
            worker,
            token,
            min_gid: u64::MAX,
            notices: true,
            q: Mutex::new(Queue::default()),
        })
    }

    /// Queues `line` on feed `w` and wakes its worker. False when the queue is full: the
    /// line is dropped, and the feed says so (`IV_ALL`) when its worker next takes it.
    pub fn push(&self, w: &Watcher, line: &[u8], wakers: &[Arc<Waker>]) -> bool {
        self.push_or_send(w, line, wakers, false)
    }

    /// `push`, except that with `send` a notice feed whose socket is idle gets `line` sent
    /// into its socket at once, unless a writer did so within `DIRECT_GAP` (then its worker
    /// sends the burst); and queued lines its worker left for `RESCUE_AFTER` are sent with
    /// it. What the socket does not take is queued as usual.
    pub fn push_or_send(
        &self,
        w: &Watcher,
        line: &[u8],
        wakers: &[Arc<Waker>],
        send: bool,
    ) -> bool {
        let tell = {
            let Ok(mut q) = w.q.lock() else { return false };
            let mut line = line;
            let now = ((send && q.direct.is_some()) || q.buf.is_empty()).then(Instant::now);
            if let (Some(fd), Some(now), true) = (q.direct, now, send) {
                let since = |t: Option<Instant>| t.map_or(Duration::MAX, |t| now - t);
                if q.skipped > 0 {
                    // The worker must say what was dropped first.
                } else if q.buf.is_empty() && since(q.last_direct) >= DIRECT_GAP {
                    q.last_direct = Some(now);
                    let n = send_now(fd, line);
                    if n == line.len() {
                        return true;
                    }
                    // Full socket or an error: the worker takes over (and finds the error).
                    q.direct = None;
                    line = &line[n..];
                } else if !q.buf.is_empty() && since(q.queued_at) >= RESCUE_AFTER {
                    // Its worker has not come: queued lines first, then this one.
                    q.last_direct = Some(now);
                    q.buf.extend_from_slice(line);
                    let n = send_now(fd, &q.buf);
                    q.buf.drain(..n);
                    if q.buf.is_empty() {
                        q.queued_at = None;
                    } else {
                        q.direct = None;
                    }
                    // The worker was told when the lines were queued.
                    return true;
                }
            }
            if q.buf.len() + line.len() + SKIP_ROOM > self.cap {
                q.skipped += 1;
                // Queued lines are waiting for the worker, which was told.
                return false;
            }
            if q.buf.is_empty() {
                q.queued_at = now;
            }
            q.buf.extend_from_slice(line);
            !std::mem::replace(&mut q.told, true)
        };
        if tell {
            if let Some(Ok(mut r)) = self.ready.get(w.worker).map(|r| r.lock()) {
                r.push(w.token);
            }
            if let Some(wk) = wakers.get(w.worker) {
                let _ = wk.wake();
            }
        }
        true
    }

    /// Forgets a watcher whose connection closed.
    pub fn remove(&self, w: &Arc<Watcher>) {
        if let Ok(mut ws) = self.watchers.write() {
            ws.retain(|x| !Arc::ptr_eq(x, w));
            self.set_mask(&ws);
        }
    }

    /// The store's departures gate (`store::EventsGate`), shared with what else opens it.
    pub fn with_gate(mut self, gate: Arc<store::EventsGate>) -> Hub {
        self.gate = gate;
        self
    }

    /// Called with the watchers' write lock held, so the gate follows the mask in order.
    fn set_mask(&self, ws: &[Arc<Watcher>]) {
        let mask = ws.iter().fold(0, |m, w| m | w.kinds);
        let had = self.wants(EVICTIONS);
        let has = mask & EVICTIONS != 0;
        if has && !had {
            self.gate.open();
        }
        self.mask.store(mask, Relaxed);
        if had && !has {
            self.gate.close();
        }
    }

    /// Tokens of worker `id`'s watchers that have lines queued.
    pub fn take_ready(&self, id: usize) -> Vec<usize> {
        self.ready
            .get(id)
            .and_then(|r| r.lock().ok())
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }

    /// Logs a line of `kind`: `ts=… gid=… ` then what `body` writes, to every watcher of it.
    pub fn emit(&self, kind: u32, wakers: &[Arc<Waker>], body: impl FnOnce(&mut Vec<u8>)) {
        let mut tell = [(0usize, 0usize); MAX_WATCHERS];
        let mut n = 0;
        {
            let Ok(ws) = self.watchers.read() else { return };
            if !ws.iter().any(|w| w.kinds & kind != 0) {
                return;
            }
            let gid = self.gid.fetch_add(1, Relaxed) + 1;
            let mut line = Vec::with_capacity(256);
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            // memcached prints the microseconds unpadded (`%lld.%d`).
            line.extend_from_slice(b"ts=");
            write_u64(&mut line, t.as_secs());
            line.push(b'.');
            write_u64(&mut line, u64::from(t.subsec_micros()));
            line.extend_from_slice(b" gid=");
            write_u64(&mut line, gid);
            line.push(b' ');
            body(&mut line);
            line.push(b'\n');
            for w in ws
                .iter()
                .filter(|w| w.kinds & kind != 0 && gid >= w.min_gid)
            {
                let Ok(mut q) = w.q.lock() else { continue };
                if q.buf.len() + line.len() + SKIP_ROOM > self.cap {
                    q.skipped += 1;
                    continue;
                }
                if q.skipped > 0 {
                    q.buf.extend_from_slice(b"skipped=");
                    let s = q.skipped;
                    write_u64(&mut q.buf, s);
                    q.buf.push(b'\n');
                    q.skipped = 0;
                }
                q.buf.extend_from_slice(&line);
                if !q.told && n < tell.len() {
                    q.told = true;
                    tell[n] = (w.worker, w.token);
                    n += 1;
                }
            }
        }
        for &(worker, token) in &tell[..n] {
            if let Some(Ok(mut r)) = self.ready.get(worker).map(|r| r.lock()) {
                r.push(token);
            }
            if let Some(w) = wakers.get(worker) {
                let _ = w.wake();
            }
        }
    }
}

/// `type=item_get`: a lookup of `key` by connection `fd`; `size`: the value's length when found.
#[cold]
pub fn item_get(hub: &Hub, wakers: &[Arc<Waker>], fd: i32, key: &[u8], size: Option<usize>) {
    hub.emit(FETCHERS, wakers, |l| {
        l.extend_from_slice(b"type=item_get key=");
        url_encode(l, key);
        // memfleet's items are all in class 1; memcached prints 0 for a miss.
        l.extend_from_slice(match size {
            Some(_) => b" status=found clsid=1",
            None => b" status=not_found clsid=0",
        });
        l.extend_from_slice(b" cfd=");
        write_i64(l, i64::from(fd));
        l.extend_from_slice(b" size=");
        write_u64(l, size.unwrap_or(0) as u64);
    });
}

/// `type=item_store`: a storage command's outcome. `ttl`: seconds left (0: never expires).
#[cold]
#[allow(clippy::too_many_arguments)]
pub fn item_store(
    hub: &Hub,
    wakers: &[Arc<Waker>],
    fd: i32,
    key: &[u8],
    status: &[u8],
    cmd: &[u8],
    ttl: u32,
    size: usize,
) {
    hub.emit(MUTATIONS, wakers, |l| {
        l.extend_from_slice(b"type=item_store key=");
        url_encode(l, key);
        l.extend_from_slice(b" status=");
        l.extend_from_slice(status);
        l.extend_from_slice(b" cmd=");
        l.extend_from_slice(cmd);
        l.extend_from_slice(b" ttl=");
        write_u64(l, u64::from(ttl));
        l.extend_from_slice(b" clsid=1 cfd=");
        write_i64(l, i64::from(fd));
        l.extend_from_slice(b" size=");
        write_u64(l, size as u64);
    });
}

/// `type=eviction`: an item evicted to make room. `ttl`: seconds it had left, -1: none;
/// `idle`: seconds since it was last used.
#[cold]
pub fn evicted(
    hub: &Hub,
    wakers: &[Arc<Waker>],
    key: &[u8],
    fetched: bool,
    ttl: i64,
    idle: u32,
    size: usize,
) {
    hub.emit(EVICTIONS, wakers, |l| {
        l.extend_from_slice(b"type=eviction key=");
        url_encode(l, key);
        l.extend_from_slice(if fetched { b" fetch=yes" } else { b" fetch=no" });
        l.extend_from_slice(b" ttl=");
        write_i64(l, ttl);
        l.extend_from_slice(b" la=");
        write_u64(l, u64::from(idle));
        l.extend_from_slice(b" clsid=1 size=");
        write_u64(l, size as u64);
    });
}

/// `type=deleted` (memcached 1.6.19+): `cmd` is `delete` or `md`.
#[cold]
pub fn deleted(hub: &Hub, wakers: &[Arc<Waker>], key: &[u8], cmd: &[u8], size: usize) {
    hub.emit(DELETIONS, wakers, |l| {
        l.extend_from_slice(b"type=deleted key=");
        url_encode(l, key);
        l.extend_from_slice(b" cmd=");
        l.extend_from_slice(cmd);
        l.extend_from_slice(b" clsid=1 size=");
        write_u64(l, size as u64);
    });
}

/// How a connection ended, in memcached's words.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Error,
    Normal,
    IdleTimeout,
    Shutdown,
}

/// `type=conn_new` / `type=conn_close` for connection `fd` (`close`: how it ended).
#[cold]
pub fn conn_event(
    hub: &Hub,
    wakers: &[Arc<Waker>],
    fd: i32,
    unix: bool,
    close: Option<CloseReason>,
) {
    let peer = if unix { None } else { peer_of(fd) };
    hub.emit(CONNEVENTS, wakers, |l| {
        l.extend_from_slice(if close.is_some() {
            b"type=conn_close rip="
        } else {
            b"type=conn_new rip="
        });
        match peer {
            Some(p) => {
                l.extend_from_slice(p.ip().to_string().as_bytes());
                l.extend_from_slice(b" rport=");
                write_u64(l, u64::from(p.port()));
            }
            None => l.extend_from_slice(b"unix rport=0"),
        }
        l.extend_from_slice(if unix {
            b" transport=local"
        } else {
            b" transport=tcp"
        });
        if let Some(r) = close {
            l.extend_from_slice(match r {
                CloseReason::Error => b" reason=error",
                CloseReason::Normal => b" reason=normal",
                CloseReason::IdleTimeout => b" reason=idle_timeout",
                CloseReason::Shutdown => b" reason=shutdown",
            });
        }
        l.extend_from_slice(b" cfd=");
        write_i64(l, i64::from(fd));
    });
}

fn peer_of(fd: i32) -> Option<SocketAddr> {
    // SAFETY: called by the connection's worker while it still owns the open socket.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok()?.as_socket()
}

fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_as_memcached_reads_them() {
        assert_eq!(parse_kinds(std::iter::empty()), Some(FETCHERS));
        let words: [&[u8]; 2] = [b"mutations", b"connevents"];
        assert_eq!(parse_kinds(words.into_iter()), Some(MUTATIONS | CONNEVENTS));
        let words: [&[u8]; 2] = [b"fetchers", b"bogus"];
        assert_eq!(parse_kinds(words.into_iter()), None);
        let words: [&[u8]; 1] = [b"proxyreqs"];
        assert_eq!(parse_kinds(words.into_iter()), Some(1 << 10));
    }

    #[test]
    fn the_stores_gate_is_open_while_a_watcher_wants_evictions() {
        let gate = Arc::new(store::EventsGate::default());
        let hub = Hub::new(1, 4096).with_gate(gate.clone());
        let f = hub.add(FETCHERS, 0, 1).ok().unwrap();
        assert!(!gate.is_open(), "fetchers are not the store's");
        let e1 = hub.add(EVICTIONS | FETCHERS, 0, 2).ok().unwrap();
        let e2 = hub.add(EVICTIONS, 0, 3).ok().unwrap();
        assert!(gate.is_open());
        hub.remove(&e1);
        hub.remove(&f);
        assert!(gate.is_open(), "one watcher still wants evictions");
        hub.remove(&e2);
        assert!(!gate.is_open());
    }

    #[test]
    fn full_queue_drops_then_says_skipped() {
        let hub = Hub::new(1, 4096);
        let w = hub.add(FETCHERS, 0, 7).ok().unwrap();
        assert!(hub.wants(FETCHERS) && !hub.wants(MUTATIONS));
        let big = vec![b'x'; 1000];
        for _ in 0..10 {
            hub.emit(FETCHERS, &[], |l| l.extend_from_slice(&big));
        }
        assert_eq!(hub.take_ready(0), vec![7]);
        let mut out = Vec::new();
        w.take(&mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3);
        hub.emit(FETCHERS, &[], |l| l.extend_from_slice(b"type=x"));
        let mut out = Vec::new();
        w.take(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("skipped=7\nts="), "{text}");
        assert!(text.ends_with(" type=x\n"), "{text}");
        hub.remove(&w);
        assert!(!hub.wants(FETCHERS));
    }

    #[test]
    fn notices_go_straight_into_an_idle_feeds_socket_else_to_its_worker() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let pause = || std::thread::sleep(RESCUE_AFTER + DIRECT_GAP);
        let hub = Hub::new(1, 1 << 20);
        let f = hub.feed(0, 5);
        let (mine, mut peer) = std::os::unix::net::UnixStream::pair().unwrap();
        peer.set_nonblocking(true).unwrap();
        let mut got = [0u8; 64];
        let take = || {
            let mut out = Vec::new();
            f.take(&mut out);
            out
        };
        // Not yet armed: queued for the worker.
        assert!(hub.push_or_send(&f, b"IV a\r\n", &[], true));
        assert!(peer.read(&mut got).is_err());
        assert_eq!(take(), b"IV a\r\n");
        assert_eq!(hub.take_ready(0), vec![5]);
        // Armed: the writer sends it; nothing is queued, the worker is not told.
        f.send_directly(mine.as_raw_fd());
        assert!(hub.push_or_send(&f, b"IV b\r\n", &[], true));
        assert_eq!(peer.read(&mut got).unwrap(), 6);
        assert_eq!(&got[..6], b"IV b\r\n");
        assert!(hub.take_ready(0).is_empty());
        // A burst right after is left to the worker (one write for all of it)...
        assert!(hub.push_or_send(&f, b"IV c\r\n", &[], true));
        assert!(peer.read(&mut got).is_err());
        assert_eq!(hub.take_ready(0), vec![5]);
        // ...until the worker has left it too long: the next writer sends it, in order.
        pause();
        assert!(hub.push_or_send(&f, b"IV d\r\n", &[], true));
        assert_eq!(peer.read(&mut got).unwrap(), 12);
        assert_eq!(&got[..12], b"IV c\r\nIV d\r\n");
        assert!(take().is_empty());
        // A plain push queues, and arming is then refused: queued lines go first.
        f.send_directly(mine.as_raw_fd());
        pause();
        assert!(hub.push(&f, b"IV e\r\n", &[]));
        assert!(peer.read(&mut got).is_err());
        f.send_directly(mine.as_raw_fd());
        assert!(hub.push_or_send(&f, b"IV f\r\n", &[], true));
        assert!(peer.read(&mut got).is_err());
        assert_eq!(take(), b"IV e\r\nIV f\r\n");
        // A full socket: what it does not take is queued, in order, for the worker.
        f.send_directly(mine.as_raw_fd());
        let line = vec![b'x'; 4000];
        let mut sent = 0;
        loop {
            pause();
            assert!(hub.push_or_send(&f, &line, &[], true));
            let out = take();
            if !out.is_empty() {
                // What the socket did not take (none of it, or the rest of a line).
                assert!(out.len() <= line.len());
                break;
            }
            sent += 1;
            assert!(sent < 10_000, "the socket never filled");
        }
        // Closing: nothing is sent into the socket any more.
        f.stop_direct();
        let mut drained = Vec::new();
        let _ = peer.read_to_end(&mut drained);
        pause();
        assert!(hub.push_or_send(&f, b"IV g\r\n", &[], true));
        assert!(peer.read(&mut got).is_err());
    }
}
