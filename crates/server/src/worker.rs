//! A worker thread: one mio event loop owning its connections.
//!
//! A connection is a small struct: its socket, plus a read buffer only while a request is
//! half-received and a write buffer only while the socket pushes back. Replies to every request
//! found in one read go out in one write.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UdpSocket, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::bufpool::BufPool;
use crate::execute::{self, Flow, Received};
use crate::placement;
use crate::shared::{ConnInfo, Shared};
use crate::stats::ThreadStats;

pub const WAKER: Token = Token(usize::MAX);
const UDP_BASE: usize = usize::MAX - 1024;

/// Read buffer size taken from the pool; larger requests grow a buffer of their own.
const READ_BUF: usize = 16 * 1024;
/// Replies one batch may build before it is written out; the rest of the batch waits, so a
/// pipeline of large gets never builds an unbounded reply buffer.
const OUT_CAP: usize = 256 * 1024;
/// The reply buffer keeps capacity up to this size between batches (large values reuse it).
const OUT_KEEP: usize = 2 << 20;
/// Bytes kept free in front of a request whose value is received in place
/// (`execute::IN_PLACE_MIN`), for the item header to be written over the
/// command line (the header can be up to 12 bytes longer than the shortest command line, and
/// the gap left in front must be 0 or at least a minimal item).
const HEADROOM: usize = 32;
/// Reads per wake-up before a busy connection yields to the others.
const READS_PER_TURN: usize = 8;
/// A worker that has found work at every poll for this long steps off its CPU for a moment,
/// if other threads compete for that CPU. Under steady load it would otherwise never block
/// and keep the CPU for a whole scheduler slice, while the threads queued behind it on that
/// core (clients on the same machine, the other worker) wait: requests then see
/// multi-millisecond delays (p99 4.5 ms vs a 0.06 ms median with 64 connections on two
/// cores). Sleeping rather than sched_yield, which under foreign CPU load hands the core
/// away for a full slice each time. A settled worker (`Worker::settled`) never pauses: its
/// clients' threads are the ones it is waiting for, so it blocks as soon as they fall
/// behind, and a pause would only leave the core idle (7-14% of it with 10 KB values).
const BUSY_MAX: Duration = Duration::from_micros(300);
/// The CPU counts as contended this long after the worker was last preempted; on a core of
/// its own the worker never pauses.
const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// A poll that took longer than this blocked for new events: the worker was idle.
const POLL_BLOCKED: Duration = Duration::from_micros(20);
/// memcached's UDP frame header: request id, sequence number, datagram count, reserved.
const UDP_HEADER: usize = 8;
const UDP_MAX_PAYLOAD: usize = 1400;

/// A socket handed from the acceptor to a worker.
pub enum Incoming {
    /// Socket, peer address and the listener's name.
    Tcp(TcpStream, std::net::SocketAddr, Arc<str>),
    Unix(UnixStream, Arc<str>),
    /// An idle connection another worker handed over (see `placement`).
    Moved(Moved),
}

/// An idle connection on its way between workers: no buffered bytes, no pending replies.
pub struct Moved {
    stream: TcpStream,
    info: ConnInfo,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> i32 {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
}

struct Conn {
    stream: Stream,
    /// Holds bytes only while a request is incomplete; otherwise empty with no capacity.
    rbuf: Vec<u8>,
    /// Bytes of `rbuf` kept free in front of a large request (`HEADROOM` or 0).
    front: usize,
    /// Reply bytes the socket did not take yet.
    wbuf: Vec<u8>,
    /// Bytes still to discard (the data block of a refused value).
    swallow: usize,
    last_cmd: u32,
    closing: bool,
    want_write: bool,
    /// Complete requests wait in `rbuf` (the last batch's replies reached `OUT_CAP`).
    pending: bool,
    /// The peer shut down its side; read to EOF instead of trusting a short read.
    peer_closed: bool,
}

/// What a worker needs to run requests; also used by the UDP path.
pub struct ExecEnv<'a> {
    pub shared: &'a Shared,
    pub stats: &'a ThreadStats,
    pub now: u32,
    pub fd: i32,
    /// A stream socket whose pending replies are all in `out`, so a large value may be
    /// written to it directly (see `execute::write_large_value`). False for UDP.
    pub direct: bool,
}

pub struct Worker {
    id: usize,
    poll: Poll,
    conns: Slab<Conn>,
    rx: Receiver<Incoming>,
    /// Every worker's queue (this one's too), for handing connections over.
    peers: Vec<Sender<Incoming>>,
    pool: BufPool,
    out: Vec<u8>,
    shared: Arc<Shared>,
    stats: Arc<ThreadStats>,
    udp: Vec<UdpSocket>,
    ready: VecDeque<usize>,
    /// Serves only connections of the CPU groups it is home to (`placement::settled`), as
    /// of the last survey: its busy periods then need no pauses.
    settled: bool,
}

pub fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        rx: Receiver<Incoming>,
        peers: Vec<Sender<Incoming>>,
        shared: Arc<Shared>,
        udp: Vec<std::net::UdpSocket>,
    ) -> io::Result<Worker> {
        let stats = shared.stats[id].clone();
        let mut w = Worker {
            id,
            poll,
            conns: Slab::new(),
            rx,
            peers,
            pool: BufPool::new(READ_BUF, 256),
            out: Vec::with_capacity(READ_BUF),
            shared,
            stats,
            udp: Vec::new(),
            ready: VecDeque::new(),
            settled: false,
        };
        for (i, s) in udp.into_iter().enumerate() {
            s.set_nonblocking(true)?;
            let mut s = UdpSocket::from_std(s);
            w.poll
                .registry()
                .register(&mut s, Token(UDP_BASE + i), Interest::READABLE)?;
            w.udp.push(s);
        }
        Ok(w)
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = unix_now();
        let mut busy_since = Instant::now();
        let mut seen_preempted = involuntary_switches();
        let mut last_preempted: Option<Instant> = None;
        loop {
            let timeout = if self.ready.is_empty() {
                Duration::from_millis(500)
            } else {
                Duration::ZERO
            };
            let mut before = Instant::now();
            if before - busy_since >= BUSY_MAX {
                busy_since = before;
                let preempted = involuntary_switches();
                if preempted != seen_preempted {
                    seen_preempted = preempted;
                    last_preempted = Some(before);
                }
                if !self.settled && last_preempted.is_some_and(|t| before - t < CONTENDED_FOR) {
                    // The shortest sleep the kernel grants (its timer slack, 50 µs by default).
                    std::thread::sleep(Duration::from_micros(1));
                    before = Instant::now();
                    busy_since = before;
                }
            }
            let polled = self.poll.poll(&mut events, Some(timeout));
            let after = Instant::now();
            if events.is_empty() || after - before > POLL_BLOCKED {
                busy_since = after;
            }
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    eprintln!("worker {}: poll failed: {e}", self.id);
                    break;
                }
            }
            let now = unix_now();
            for ev in events.iter() {
                match ev.token() {
                    WAKER => self.accept_new(now),
                    Token(t) if t >= UDP_BASE => self.serve_udp(t - UDP_BASE, now),
                    Token(t) => {
                        if ev.is_writable() {
                            self.on_writable(t);
                        }
                        if ev.is_read_closed() || ev.is_error() {
                            if let Some(c) = self.conns.get_mut(t) {
                                c.peer_closed = true;
                            }
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.on_readable(t, now);
                        }
                    }
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(t) = self.ready.pop_front() {
                    self.on_readable(t, now);
                }
            }
            if self.shared.shutdown.load(Relaxed) {
                break;
            }
            if now != last_sweep {
                last_sweep = now;
                self.sweep_idle(now);
                self.move_to_home_workers(now);
            }
        }
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
            self.close(t);
        }
    }

    fn accept_new(&mut self, now: u32) {
        while let Ok(inc) = self.rx.try_recv() {
            let (stream, peer, listen, moved_at) = match inc {
                Incoming::Tcp(s, peer, listen) => (Stream::Tcp(s), Some(peer), listen, None),
                Incoming::Unix(s, listen) => (Stream::Unix(s), None, listen, None),
                Incoming::Moved(m) => {
                    let i = m.info;
                    (Stream::Tcp(m.stream), i.peer, i.listen, Some(i.last_cmd))
                }
            };
            let last_cmd = moved_at.unwrap_or(now);
            let entry = self.conns.vacant_entry();
            let token = entry.key();
            let mut conn = Conn {
                stream,
                rbuf: Vec::new(),
                front: 0,
                wbuf: Vec::new(),
                swallow: 0,
                last_cmd,
                closing: false,
                want_write: false,
                pending: false,
                peer_closed: false,
            };
            if self
                .poll
                .registry()
                .register(conn.stream.source(), Token(token), Interest::READABLE)
                .is_err()
            {
                self.shared.curr_conns.fetch_sub(1, SeqCst);
                self.shared.worker_conns[self.id].fetch_sub(1, SeqCst);
                continue;
            }
            let fd = conn.stream.fd();
            entry.insert(conn);
            if moved_at.is_none() {
                self.stats.total_connections.incr();
                if self.shared.verbose() > 1 {
                    eprintln!("<{fd} new auto-negotiating client connection");
                }
            }
            if let Ok(mut reg) = self.shared.registry[self.id].lock() {
                reg.insert(
                    token,
                    ConnInfo {
                        fd,
                        peer,
                        listen,
                        last_cmd,
                    },
                );
            }
        }
    }

    fn on_writable(&mut self, t: usize) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if conn.wbuf.is_empty() {
            return;
        }
        match write_some(&mut conn.stream, &conn.wbuf, &self.stats) {
            Ok(n) => {
                conn.wbuf.drain(..n);
            }
            Err(_) => {
                self.close(t);
                return;
            }
        }
        if conn.wbuf.is_empty() {
            let buf = std::mem::take(&mut conn.wbuf);
            self.pool.give(buf);
            if conn.closing {
                self.close(t);
                return;
            }
            // Reading paused while the socket pushed back; its readiness edge may be gone.
            self.ready.push_back(t);
        }
    }

    fn on_readable(&mut self, t: usize, now: u32) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if !conn.wbuf.is_empty() {
            return; // backpressure: resume when the socket drains
        }
        if conn.last_cmd != now {
            // `stats conns` reads this; touching the registry once a second keeps its lock cold.
            conn.last_cmd = now;
            if let Ok(mut reg) = self.shared.registry[self.id].lock() {
                if let Some(info) = reg.get_mut(&t) {
                    info.last_cmd = now;
                }
            }
        }
        let fd = conn.stream.fd();
        let mut buf = if conn.rbuf.capacity() > 0 {
            std::mem::take(&mut conn.rbuf)
        } else {
            self.pool.take()
        };
        let mut eof = false;
        let mut reads = 0;
        // Requests left unparsed because a batch's replies hit OUT_CAP: run them before reading.
        let mut pending = std::mem::take(&mut conn.pending);
        let peer_closed = conn.peer_closed;
        loop {
            let mut drained = false;
            if !pending {
                // A buffer sized for a large request (`front`) has room for all of it.
                let conn = &self.conns[t];
                if buf.capacity() - buf.len() < 1024
                    && (conn.front == 0 || buf.len() == buf.capacity())
                {
                    buf.reserve(buf.capacity().max(READ_BUF));
                }
                let room = buf.capacity() - buf.len();
                match recv_into(fd, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        self.stats.bytes_read.add(n as u64);
                        // A short read emptied the socket and edge-triggered epoll reports new
                        // data, so skip the recv that would only say EAGAIN (as memcached does).
                        // Not once the peer has closed: its FIN may already be queued, and no
                        // new event would announce it.
                        drained = n < room && !peer_closed;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
            let conn = &mut self.conns[t];
            let env = ExecEnv {
                shared: &self.shared,
                stats: &self.stats,
                now,
                fd,
                direct: true,
            };
            pending = process(&env, conn, &mut self.pool, &mut buf, &mut self.out);
            if !self.out.is_empty() {
                let out = std::mem::take(&mut self.out);
                let sent = match write_some(&mut conn.stream, &out, &self.stats) {
                    Ok(n) => n,
                    Err(_) => {
                        conn.closing = true;
                        out.len()
                    }
                };
                if sent < out.len() {
                    conn.wbuf.extend_from_slice(&out[sent..]);
                }
                self.out = out;
                self.out.clear();
                if self.out.capacity() > OUT_KEEP {
                    self.out = Vec::with_capacity(READ_BUF);
                }
            }
            if conn.closing || !conn.wbuf.is_empty() {
                conn.pending = pending;
                break;
            }
            if drained && !pending {
                break;
            }
            reads += 1;
            if reads >= READS_PER_TURN {
                conn.pending = pending;
                self.stats.conn_yields.incr();
                self.ready.push_back(t);
                break;
            }
        }
        let conn = &mut self.conns[t];
        if buf.is_empty() {
            self.pool.give(buf);
        } else {
            conn.rbuf = buf;
        }
        if conn.closing && conn.wbuf.is_empty() || eof {
            self.close(t);
            return;
        }
        let want_write = !conn.wbuf.is_empty();
        if want_write != conn.want_write {
            conn.want_write = want_write;
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = self
                .poll
                .registry()
                .reregister(conn.stream.source(), Token(t), interest);
        }
    }

    fn close(&mut self, t: usize) {
        if !self.conns.contains(t) {
            return;
        }
        let mut conn = self.conns.remove(t);
        let _ = self.poll.registry().deregister(conn.stream.source());
        if self.shared.verbose() > 1 {
            eprintln!("<{} connection closed.", conn.stream.fd());
        }
        self.pool.give(std::mem::take(&mut conn.rbuf));
        self.pool.give(std::mem::take(&mut conn.wbuf));
        if let Ok(mut reg) = self.shared.registry[self.id].lock() {
            reg.remove(&t);
        }
        self.shared.curr_conns.fetch_sub(1, SeqCst);
        self.shared.worker_conns[self.id].fetch_sub(1, SeqCst);
    }

    /// Groups connections of one client thread on one worker (see `placement`): counts this
    /// worker's recently busy TCP connections by the CPU group their packets arrive on, then
    /// hands each idle one to the worker chosen for its group. Idle: nothing buffered
    /// either way, so the connection is just its socket; bytes arriving meanwhile wait in
    /// the socket, and registering it with the new worker's epoll reports them.
    fn move_to_home_workers(&mut self, now: u32) {
        let n = self.peers.len();
        if n < 2 {
            return;
        }
        let mut surveyed = Vec::new();
        let mut mine = [0usize; placement::CPU_GROUPS];
        for (t, c) in self.conns.iter() {
            if !matches!(c.stream, Stream::Tcp(_)) || now.saturating_sub(c.last_cmd) > 1 {
                continue;
            }
            let Some(cpu) = placement::incoming_cpu(c.stream.fd()) else {
                continue;
            };
            let group = cpu % placement::CPU_GROUPS;
            mine[group] += 1;
            let idle = c.rbuf.is_empty()
                && c.wbuf.is_empty()
                && c.swallow == 0
                && !c.pending
                && !c.closing
                && !c.peer_closed;
            if idle {
                surveyed.push((t, group));
            }
        }
        for (slot, &count) in self.shared.cpu_groups[self.id].iter().zip(&mine) {
            slot.store(count, Relaxed);
        }
        let mut open: Vec<usize> = self
            .shared
            .worker_conns
            .iter()
            .map(|c| c.load(SeqCst))
            .collect();
        let serving: Vec<[usize; placement::CPU_GROUPS]> = (0..n)
            .map(|w| {
                if w == self.id {
                    return mine;
                }
                let mut row = [0; placement::CPU_GROUPS];
                for (r, c) in row.iter_mut().zip(&self.shared.cpu_groups[w]) {
                    *r = c.load(Relaxed);
                }
                row
            })
            .collect();
        let homes = placement::homes(&serving);
        self.settled = placement::settled(self.id, &mine, &homes);
        for (t, group) in surveyed {
            let Some(home) = homes[group] else {
                continue;
            };
            if placement::may_move(self.id, home, &open) && self.hand_over(t, home) {
                open[home] += 1;
                open[self.id] -= 1;
            }
        }
    }

    /// Moves idle connection `t` to worker `to`. False if it stays here.
    fn hand_over(&mut self, t: usize, to: usize) -> bool {
        let Some(info) = self.shared.registry[self.id]
            .lock()
            .ok()
            .and_then(|mut reg| reg.remove(&t))
        else {
            return false;
        };
        if self
            .poll
            .registry()
            .deregister(self.conns[t].stream.source())
            .is_err()
        {
            if let Ok(mut reg) = self.shared.registry[self.id].lock() {
                reg.insert(t, info);
            }
            return false;
        }
        let mut conn = self.conns.remove(t);
        self.pool.give(std::mem::take(&mut conn.rbuf));
        let stream = match conn.stream {
            Stream::Tcp(s) => s,
            Stream::Unix(_) => unreachable!("only TCP connections are handed over"),
        };
        self.shared.worker_conns[to].fetch_add(1, SeqCst);
        self.shared.worker_conns[self.id].fetch_sub(1, SeqCst);
        self.stats.conns_moved.incr();
        if self.peers[to]
            .send(Incoming::Moved(Moved { stream, info }))
            .is_ok()
        {
            wake(&self.shared.wakers[to]);
        } else {
            // The other worker has stopped (shutdown): the connection was closed on drop.
            self.shared.worker_conns[to].fetch_sub(1, SeqCst);
            self.shared.curr_conns.fetch_sub(1, SeqCst);
        }
        true
    }

    fn sweep_idle(&mut self, now: u32) {
        let idle = self.shared.settings.idle_timeout;
        if idle == 0 {
            return;
        }
        let stale: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| now.saturating_sub(c.last_cmd) > idle)
            .map(|(t, _)| t)
            .collect();
        for t in stale {
            self.close(t);
        }
    }

    /// One request per datagram, as memcached: replies are split into frames of at most 1400 bytes.
    fn serve_udp(&mut self, i: usize, now: u32) {
        let mut dgram = self.pool.take();
        dgram.resize(64 * 1024, 0);
        while let Ok((n, peer)) = self.udp[i].recv_from(&mut dgram) {
            self.stats.bytes_read.add(n as u64);
            self.stats.udp_requests.incr();
            if n < UDP_HEADER {
                continue;
            }
            let header = &dgram[..UDP_HEADER];
            let req_id = [header[0], header[1]];
            let total = u16::from_be_bytes([header[4], header[5]]);
            self.out.clear();
            if total != 1 {
                self.out
                    .extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
            } else {
                let env = ExecEnv {
                    shared: &self.shared,
                    stats: &self.stats,
                    now,
                    fd: self.udp[i].as_raw_fd(),
                    direct: false,
                };
                execute::run_datagram(&env, &dgram[UDP_HEADER..n], &mut self.out);
            }
            if self.out.is_empty() {
                continue;
            }
            let frames = self
                .out
                .len()
                .div_ceil(UDP_MAX_PAYLOAD)
                .min(u16::MAX as usize);
            let mut frame = Vec::with_capacity(UDP_HEADER + UDP_MAX_PAYLOAD);
            for (seq, chunk) in self.out.chunks(UDP_MAX_PAYLOAD).take(frames).enumerate() {
                frame.clear();
                frame.extend_from_slice(&req_id);
                frame.extend_from_slice(&(seq as u16).to_be_bytes());
                frame.extend_from_slice(&(frames as u16).to_be_bytes());
                frame.extend_from_slice(&[0, 0]);
                frame.extend_from_slice(chunk);
                if let Ok(sent) = self.udp[i].send_to(&frame, peer) {
                    self.stats.bytes_written.add(sent as u64);
                }
            }
        }
        self.out.clear();
        dgram.clear();
        self.pool.give(dgram);
    }
}

/// Runs the complete requests in `buf`, appending replies to `out`, and drops consumed bytes.
/// Returns true when it stopped early, with requests left in `buf`: after `-R` requests (so one
/// pipelining client cannot starve the others) or when `out` reached `OUT_CAP`.
fn process(
    env: &ExecEnv<'_>,
    conn: &mut Conn,
    pool: &mut BufPool,
    buf: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    let limits = &env.shared.limits;
    let budget = env.shared.settings.max_reqs_per_event;
    let mut pos = conn.front;
    let mut done = 0;
    let mut stopped_early = false;
    while pos < buf.len() && !conn.closing {
        if out.len() >= OUT_CAP || done >= budget {
            stopped_early = true;
            break;
        }
        if conn.swallow > 0 {
            let k = conn.swallow.min(buf.len() - pos);
            pos += k;
            conn.swallow -= k;
            continue;
        }
        match proto::parse(&buf[pos..], limits) {
            proto::Parse::Request(req, used) => {
                if env.shared.verbose() > 1 {
                    log_request(env.fd, &buf[pos..pos + used]);
                }
                let received = (pos == conn.front && conn.front > 0)
                    .then(|| Received::of(&req, buf))
                    .flatten();
                if let Some(received) = received {
                    // The bytes after this request start a fresh buffer; this one, cut after
                    // the value, becomes the item's.
                    let mut rest = pool.take();
                    rest.extend_from_slice(&buf[pos + used..]);
                    buf.truncate(received.value_at + received.value_len);
                    let item = std::mem::replace(buf, rest).into_boxed_slice();
                    conn.front = 0;
                    pos = 0;
                    done += 1;
                    execute::store_received(env, &received, item, out);
                    continue;
                }
                pos += used;
                done += 1;
                match execute::run(env, req, out) {
                    Flow::Continue => {}
                    Flow::Close => conn.closing = true,
                }
            }
            proto::Parse::Incomplete { total } => {
                if let Some(total) = total {
                    let in_place = total >= execute::IN_PLACE_MIN;
                    // Keep a buffer already laid out for this request.
                    if pos != conn.front
                        || pos + total > buf.capacity()
                        || in_place != (conn.front > 0)
                    {
                        buf.drain(..pos);
                        pos = 0;
                        conn.front = grow_for(pool, buf, total, in_place);
                    }
                }
                break;
            }
            proto::Parse::Error {
                reply,
                consumed,
                swallow,
                close,
                unlink,
            } => {
                if let Some(key) = unlink {
                    let _ = env
                        .shared
                        .store
                        .delete(key.as_bytes(), env.now, &Default::default());
                }
                out.extend_from_slice(reply);
                pos += consumed;
                conn.swallow = swallow;
                if close {
                    conn.closing = true;
                }
            }
        }
    }
    if pos >= buf.len() {
        buf.clear();
        conn.front = 0;
    } else if pos > conn.front {
        buf.drain(..pos);
        conn.front = 0;
    }
    stopped_early
}

/// Makes room for a request of `total` bytes (a large value), preferring a buffer the pool
/// kept from an earlier large request over a fresh allocation. With `in_place`, the request
/// starts `HEADROOM` bytes into the buffer (see `execute::IN_PLACE_MIN`); returns that offset.
fn grow_for(pool: &mut BufPool, buf: &mut Vec<u8>, total: usize, in_place: bool) -> usize {
    let front = if in_place { HEADROOM } else { 0 };
    if front == 0 && total <= buf.capacity() {
        return 0;
    }
    let mut big = pool
        .take_large(front + total)
        .unwrap_or_else(|| Vec::with_capacity(front + total));
    big.resize(front, 0);
    big.extend_from_slice(buf);
    std::mem::swap(buf, &mut big);
    pool.give(big);
    front
}

fn log_request(fd: i32, raw: &[u8]) {
    let line_end = raw
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(raw.len());
    eprintln!("<{fd} {}", String::from_utf8_lossy(&raw[..line_end]));
}

/// Reads into the spare capacity of `buf` with one recv(2).
fn recv_into(fd: i32, buf: &mut Vec<u8>) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: recv writes at most spare.len() bytes into memory we own; we only mark as
    // initialised the n bytes it reports written.
    let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised n bytes just past len.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Writes as much as the socket takes now; `Ok(n)` may be short, never blocks.
fn write_some(stream: &mut Stream, data: &[u8], stats: &ThreadStats) -> io::Result<usize> {
    let mut sent = 0;
    while sent < data.len() {
        match stream.write(&data[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    stats.bytes_written.add(sent as u64);
    Ok(sent)
}

/// Times this thread was preempted (involuntary context switches).
fn involuntary_switches() -> i64 {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut u) != 0 {
            return 0;
        }
        u.ru_nivcsw as i64
    }
}

/// Wakes a worker so it picks up new connections or notices shutdown.
pub fn wake(w: &Waker) {
    let _ = w.wake();
}
