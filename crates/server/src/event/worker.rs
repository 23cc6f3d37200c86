//! A worker thread: one mio event loop owning its connections (see `conn`).
//!
//! Replies to every request found in one read go out in one write.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::clock::unix_now;
use crate::event::busy::Busy;
use crate::event::flash_back::{FlashConns, STARVED_WAIT};
use crate::event::handoff::{Incoming, WAKER};
use crate::event::lifecycle;
use crate::event::udp::{self, UdpSockets};
use crate::exec::batch::{self, OUT_KEEP, READ_BUF};
use crate::exec::env::ExecEnv;
use crate::flash::reads::FlashWait;
use crate::io::bufpool::BufPool;
use crate::io::conn::Conn;
use crate::metrics::Probe;
use crate::shared::Shared;
use crate::stats::ThreadStats;

/// Reads per wake-up before a busy connection yields to the others (besides the `-R` budget,
/// which counts requests and is what `conn_yields` counts, as in memcached).
const READS_PER_TURN: usize = 8;
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
    udp: UdpSockets,
    /// UDP sockets left with datagrams after their `-R` budget: served again next turn (the
    /// poll is edge-triggered, so no event would come for them).
    udp_again: Vec<usize>,
    ready: VecDeque<usize>,
    /// Serves only connections of the CPU groups it is home to (`placement::settled`), as
    /// of the last survey: its busy periods then need no pauses.
    settled: bool,
    /// This thread's latency histograms and hot-key sampler.
    probe: Probe,
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
        let probe = Probe::new(&shared.telemetry, id);
        let mut udp = UdpSockets::new(udp)?;
        udp.register(&poll)?;
        Ok(Worker {
            id,
            poll,
            conns: Slab::new(),
            rx,
            peers,
            pool: BufPool::new(READ_BUF, 256),
            out: Vec::with_capacity(READ_BUF),
            shared,
            stats,
            udp,
            udp_again: Vec::new(),
            ready: VecDeque::new(),
            settled: false,
            probe,
        })
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_sweep = unix_now();
        let mut busy = Busy::new();
        loop {
            let timeout = if self.ready.is_empty() && self.udp_again.is_empty() {
                if self.starved() {
                    STARVED_WAIT
                } else {
                    Duration::from_millis(500)
                }
            } else {
                Duration::ZERO
            };
            if busy.should_pause(self.settled) {
                busy.pause();
            }
            let began = Instant::now();
            let polled = self.poll.poll(&mut events, Some(timeout));
            busy.waited(began, events.is_empty());
            if let Err(e) = polled {
                if e.kind() != io::ErrorKind::Interrupted {
                    stderr_line!("worker {}: poll failed: {e}", self.id);
                    break;
                }
            }
            let now = unix_now();
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {
                        self.accept_new(now);
                        self.take_flash_reads();
                        self.ready.extend(self.shared.watch.take_ready(self.id));
                    }
                    Token(t) if t >= udp::TOKEN_BASE => self.serve_udp(t - udp::TOKEN_BASE, now),
                    Token(t) => {
                        if ev.is_writable() {
                            self.on_writable(t);
                        }
                        if ev.is_read_closed() || ev.is_error() {
                            if let Some(c) = self.conns.get_mut(t) {
                                c.peer_closed = true;
                                if ev.is_error() && c.waits_on_flash() {
                                    // Reset: no reply can reach it, so it need not wait for
                                    // its reads (they are dropped when they come back).
                                    self.close(t);
                                    continue;
                                }
                            }
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.on_readable(t, now);
                        }
                    }
                }
            }
            self.retry_starved();
            for _ in 0..self.ready.len() {
                if let Some(t) = self.ready.pop_front() {
                    self.on_readable(t, now);
                }
            }
            for i in std::mem::take(&mut self.udp_again) {
                self.serve_udp(i, now);
            }
            if self.shared.shutdown.load(Relaxed) {
                break;
            }
            if now != last_sweep {
                last_sweep = now;
                self.sweep_idle(now);
                self.move_to_home_workers(now);
                self.pool.trim_idle();
            }
        }
        let tokens: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in tokens {
            self.close(t);
        }
    }

    fn serve_udp(&mut self, i: usize, now: u32) {
        let more = self
            .udp
            .serve(i, &self.shared, &self.stats, now, &mut self.out);
        if more && !self.udp_again.contains(&i) {
            self.udp_again.push(i);
        }
    }

    fn accept_new(&mut self, now: u32) {
        while let Ok(inc) = self.rx.try_recv() {
            let Some(mut arrival) = lifecycle::arrive(&self.shared, self.id, inc, now) else {
                continue;
            };
            let entry = self.conns.vacant_entry();
            let token = entry.key();
            if self
                .poll
                .registry()
                .register(
                    arrival.conn.stream.source(),
                    Token(token),
                    Interest::READABLE,
                )
                .is_err()
            {
                lifecycle::refuse(&self.shared, self.id);
                continue;
            }
            entry.insert(lifecycle::admit(
                &self.shared,
                self.id,
                &self.stats,
                token,
                arrival,
            ));
        }
    }

    fn on_writable(&mut self, t: usize) {
        let Some(conn) = self.conns.get_mut(t) else {
            return;
        };
        if !conn.has_unsent() {
            return;
        }
        let wbuf = std::mem::take(&mut conn.wbuf);
        let written = conn.write_replies(&wbuf, &self.stats);
        conn.wbuf = wbuf;
        match written {
            Ok(n) => {
                conn.wbuf.drain(..n);
            }
            Err(_) => {
                self.close(t);
                return;
            }
        }
        if !conn.has_unsent() {
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
        if conn.has_unsent() || conn.waits_on_flash() {
            // Backpressure: resume when the socket drains. Flash reads: when they are back.
            // The edge event is spent: the resumed turn must not skip the socket.
            if let Some(tls) = conn.tls.as_deref_mut() {
                tls.may_have_bytes();
            }
            return;
        }
        if conn.watcher().is_some() {
            self.serve_watcher(t);
            return;
        }
        lifecycle::touch(&self.shared, self.id, t, conn, now);
        let tls = conn.tls.is_some();
        let mut buf = if conn.rbuf.capacity() > 0 {
            std::mem::take(&mut conn.rbuf)
        } else {
            self.pool.take()
        };
        let mut eof = false;
        let mut reads = 0;
        // Requests left unparsed because a batch's replies hit OUT_CAP, or a get that paused
        // for its replies to be written: run them before reading.
        let mut pending = std::mem::take(&mut conn.pending);
        let peer_closed = conn.peer_closed;
        conn.budget = self.shared.settings.max_reqs_per_event;
        loop {
            let mut drained = false;
            if !pending {
                // A buffer sized for a large request (`front`) has room for all of it.
                let conn = &mut self.conns[t];
                if buf.capacity() - buf.len() < 1024
                    && (conn.front == 0 || buf.len() == buf.capacity())
                {
                    buf.reserve(buf.capacity().max(READ_BUF));
                }
                let room = buf.capacity() - buf.len();
                match conn.read_into(&mut buf, &self.stats) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        self.stats.bytes_read.add(n as u64);
                        // A short read emptied the socket and edge-triggered epoll reports new
                        // data, so skip the recv that would only say EAGAIN (as memcached does).
                        // Not once the peer has closed: its FIN may already be queued, and no
                        // new event would announce it. Nor on TLS, where records decrypted
                        // but not yet read wait in the session, not in the socket.
                        drained = n < room && !peer_closed && !tls;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        eof = true;
                        break;
                    }
                }
            }
            let started = self.probe.start();
            let conn = &mut self.conns[t];
            let env = ExecEnv::stream(
                &self.shared,
                &self.stats,
                now,
                &self.probe,
                (self.id, t),
                conn.stream.fd(),
            );
            pending = batch::process(&env, conn, &mut self.pool, &mut buf, &mut self.out);
            if !self.out.is_empty() || conn.unsent.is_some() {
                let out = std::mem::take(&mut self.out);
                let sent = match conn.write_replies(&out, &self.stats) {
                    Ok(n) => n,
                    Err(_) => {
                        conn.closing = true;
                        conn.unsent = None;
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
            self.probe.finish(started);
            if conn.closing || conn.has_unsent() || conn.waits_on_flash() {
                conn.pending = pending;
                break;
            }
            if pending && conn.budget == 0 {
                // -R requests ran and more wait: the others get a turn first (memcached's
                // conn_yields).
                conn.pending = true;
                self.stats.conn_yields.incr();
                self.ready.push_back(t);
                break;
            }
            if drained && !pending {
                break;
            }
            reads += 1;
            if reads >= READS_PER_TURN {
                conn.pending = pending;
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
        if conn.closing && !conn.has_unsent() || eof {
            self.close(t);
            return;
        }
        set_write_interest(&self.poll, conn, t);
    }

    /// A `watch` connection: drops what it sent (closing it on EOF) and writes the log
    /// lines queued for it. Lines wait in its bounded queue while its replies do.
    fn serve_watcher(&mut self, t: usize) {
        let conn = &mut self.conns[t];
        let mut scratch = self.pool.take();
        let mut eof = false;
        loop {
            scratch.clear();
            match conn.read_into(&mut scratch, &self.stats) {
                Ok(0) => eof = true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => eof = true,
            }
            break;
        }
        scratch.clear();
        self.pool.give(scratch);
        if eof {
            self.close(t);
            return;
        }
        let Some(w) = conn.watcher().cloned() else {
            return;
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        w.take(&mut out);
        if !out.is_empty() {
            match conn.write_replies(&out, &self.stats) {
                Ok(n) if n < out.len() => conn.wbuf.extend_from_slice(&out[n..]),
                Ok(_) => {}
                Err(_) => {
                    self.out = out;
                    self.out.clear();
                    self.close(t);
                    return;
                }
            }
        }
        out.clear();
        self.out = out;
        if !conn.has_unsent() && conn.tls.is_none() {
            w.send_directly(conn.stream.fd());
        }
        set_write_interest(&self.poll, conn, t);
    }

    fn close(&mut self, t: usize) {
        if !self.conns.contains(t) {
            return;
        }
        let mut conn = self.conns.remove(t);
        let _ = self.poll.registry().deregister(conn.stream.source());
        lifecycle::forget(&self.shared, self.id, &mut self.pool, t, &mut conn);
    }

    /// Groups connections of one client thread on one worker (see `placement`): counts this
    /// worker's recently busy TCP connections by the CPU group their packets arrive on, then
    /// hands each idle one to the worker chosen for its group. Idle: nothing buffered
    /// either way, so the connection is just its socket; bytes arriving meanwhile wait in
    /// the socket, and registering it with the new worker's epoll reports them.
    fn move_to_home_workers(&mut self, now: u32) {
        let plan = lifecycle::plan_moves(&self.shared, self.id, self.conns.iter(), now);
        self.settled = plan.settled;
        for (t, home) in plan.moves {
            self.hand_over(t, home);
        }
    }

    /// Moves idle connection `t` to worker `to`. False if it stays here.
    fn hand_over(&mut self, t: usize, to: usize) -> bool {
        let Some(info) = lifecycle::unregister(&self.shared, self.id, t) else {
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
        lifecycle::send_to(
            &self.shared,
            self.id,
            &self.stats,
            &self.peers,
            to,
            conn,
            info,
        );
        true
    }

    fn sweep_idle(&mut self, now: u32) {
        for t in lifecycle::idle(&self.shared, self.conns.iter(), now) {
            self.close(t);
        }
    }
}

impl FlashConns for Worker {
    fn flash_worker(&self) -> (usize, &Arc<Shared>) {
        (self.id, &self.shared)
    }

    fn flash_wait(&mut self, token: usize) -> Option<&mut FlashWait> {
        self.conns.get_mut(token).and_then(|c| c.flash_wait())
    }

    fn ready(&mut self, token: usize) {
        self.ready.push_back(token);
    }
}

/// Asks the poll for writability while the connection has replies waiting, and stops once
/// they are written.
fn set_write_interest(poll: &Poll, conn: &mut Conn, t: usize) {
    let want_write = conn.has_unsent();
    if want_write != conn.want_write {
        conn.want_write = want_write;
        let interest = if want_write {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        let _ = poll
            .registry()
            .reregister(conn.stream.source(), Token(t), interest);
    }
}
