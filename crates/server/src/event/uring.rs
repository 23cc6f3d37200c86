//! A worker thread on io_uring (`-o io_engine=uring`): the same connections, requests and
//! counters as the epoll worker (`worker`), with the socket I/O done by the kernel.
//!
//! Each connection keeps one multishot receive armed that fills buffers from the worker's
//! provided-buffer ring (`bufring`); its bytes are copied into the connection's read buffer
//! and the buffer goes straight back. After each `REAP_BATCH` of a turn's completions is
//! reaped, every connection that received something runs its requests once
//! (`batch::process`), and its replies go out as one send. All sends, re-armed receives and cancels of a turn reach the
//! kernel with the next turn's single `io_uring_enter`, which also waits for completions.
//!
//! While a connection's replies are being sent its requests wait, as with epoll, and so do
//! requests past its `-R` budget; receiving goes on until `PAUSE_AT` bytes wait unexecuted,
//! then the receive is cancelled until they have run, so a client that never reads, or one
//! that pipelines quiet requests faster than they run, holds bounded memory.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;

use crate::clock::unix_now;
use crate::engine::with_total_cap;
use crate::event::busy::Busy;
use crate::event::flash_back::{FlashConns, STARVED_WAIT};
use crate::event::handoff::Incoming;
use crate::event::lifecycle;
use crate::event::udp::UdpSockets;
use crate::exec::batch::{self, OUT_KEEP, READ_BUF};
use crate::exec::env::ExecEnv;
use crate::flash::reads::FlashWait;
use crate::io::bufpool::BufPool;
use crate::io::bufring::BufRing;
use crate::metrics::Probe;
use crate::shared::Shared;
use crate::stats::ThreadStats;

mod slot;
use slot::{Gather, Slot};

/// Submission queue entries; a turn that queues more submits early (one extra enter).
const SQ_ENTRIES: u32 = 1024;
/// Completions the kernel can hold between two turns (multishot receives post many).
const CQ_ENTRIES: u32 = 8192;
/// Receive buffers in the provided-buffer ring, and their size (1 MB per worker either
/// way; the kernel cycles through all of them). Incremental (Linux 6.12+), receives share
/// buffers, each taking only its bytes, so a turn holds about 1 MB of receives however many
/// connections they are on. Otherwise each receive takes a whole buffer: a turn in which more
/// than `RECV_BUFS` connections have bytes ends the rest with ENOBUFS, to be armed again (2,000
/// connections one request each: two failed arms per request, measured).
const INC_BUFS: u16 = 32;
const INC_BUF_SIZE: usize = 32 * 1024;
const RECV_BUFS: u16 = 256;
const RECV_BUF_SIZE: usize = 4 * 1024;
/// Bytes one arming of a multishot receive may bring in before it ends and is re-armed
/// (Linux 6.17+; older kernels refuse a receive with the cap set, so `engine::probe` finds out
/// and the cap is left off there). Without it the kernel keeps receiving from a
/// flooding client until the ring runs dry, whatever the client's unsent replies, before a
/// cancel can land: 40 clients pipelining gets and never reading held ~1 MB each.
const RECV_WINDOW: u32 = 64 * 1024;
/// The buffer group of the ring (one ring per worker, each on its own io_uring).
const BGID: u16 = 0;
/// While replies wait to be sent or the `-R` budget is spent, receiving stops once this many
/// request bytes wait (as the epoll loop stops reading; a multishot receive may still bring
/// up to `RECV_WINDOW`, or on older kernels the ring's buffers, before its cancel lands).
const PAUSE_AT: usize = READ_BUF;
/// Replies up to this size are sent from a buffer of their size rather than a pooled
/// `READ_BUF` one: a connection holds its reply buffer until the send completes, in a later
/// turn, and thousands of connections may be served in one turn.
const SMALL_REPLY: usize = 2 * 1024;
/// Completions handled before the connections they fed are served. Each connection that
/// received bytes holds a read buffer until it is served, so this bounds those buffers
/// (an incremental ring can bring bytes for thousands of connections in one turn).
const REAP_BATCH: usize = 256;
/// The longest a turn waits for completions; shutdown and wake-ups end the wait sooner.
const WAIT: Duration = Duration::from_millis(500);

/// What a completion belongs to: the top byte of its user_data; the rest is the token.
const RECV: u64 = 1;
const SEND: u64 = 2;
const WAKE: u64 = 3;
const CANCEL: u64 = 4;
const UDP: u64 = 5;
const KIND_SHIFT: u32 = 56;

fn user_data(kind: u64, token: usize) -> u64 {
    kind << KIND_SHIFT | token as u64
}

pub struct UringWorker {
    // Declared first so it is dropped first: the kernel lets go of the buffer ring and the
    // connections' buffers before they are freed.
    ring: IoUring,
    bufs: BufRing,
    id: usize,
    /// Holds the mio waker (`Shared::wakers`) that the acceptor and shutdown ring; the ring
    /// polls its descriptor.
    wake: mio::Poll,
    wake_events: mio::Events,
    /// Polled on the ring (`UDP` completions), answered with recvfrom/sendto as on epoll.
    udp: UdpSockets,
    rx: Receiver<Incoming>,
    /// Every worker's queue (this one's too), for handing connections over.
    peers: Vec<Sender<Incoming>>,
    conns: Slab<Slot>,
    pool: BufPool,
    out: Vec<u8>,
    shared: Arc<Shared>,
    stats: Arc<ThreadStats>,
    probe: Probe,
    /// Connections to serve this turn, in the order their bytes arrived.
    queue: Vec<usize>,
    /// Connections that used up their `-R` budget: served again next turn.
    yielded: VecDeque<usize>,
    cqes: Vec<(u64, i32, u32)>,
}

/// The ring's receive buffers: incremental (Linux 6.12+) where the kernel takes them, whole
/// buffers otherwise. Only the kind registered is allocated.
fn receive_buffers(ring: &IoUring, incremental: bool) -> io::Result<BufRing> {
    // SAFETY (both): the caller keeps the buffers beside `ring`, which is dropped first.
    if incremental {
        let mut bufs = BufRing::new(INC_BUFS, INC_BUF_SIZE);
        if unsafe { bufs.register(&ring.submitter(), BGID, true) }.is_ok() {
            return Ok(bufs);
        }
    }
    let mut bufs = BufRing::new(RECV_BUFS, RECV_BUF_SIZE);
    unsafe { bufs.register(&ring.submitter(), BGID, false)? };
    Ok(bufs)
}

impl UringWorker {
    /// Builds the worker on its own thread (the ring is single-issuer).
    pub fn new(
        id: usize,
        wake: mio::Poll,
        rx: Receiver<Incoming>,
        peers: Vec<Sender<Incoming>>,
        shared: Arc<Shared>,
        udp: Vec<std::net::UdpSocket>,
    ) -> io::Result<UringWorker> {
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_coop_taskrun()
            .setup_single_issuer()
            .build(SQ_ENTRIES)
            .or_else(|_| {
                IoUring::builder()
                    .setup_cqsize(CQ_ENTRIES)
                    .build(SQ_ENTRIES)
            })?;
        let bufs = receive_buffers(&ring, shared.settings.uring_kernel.incremental_bufs)?;
        let stats = shared.stats[id].clone();
        let probe = Probe::new(&shared.telemetry, id);
        let udp = UdpSockets::new(udp)?;
        Ok(UringWorker {
            ring,
            bufs,
            id,
            wake,
            wake_events: mio::Events::with_capacity(8),
            udp,
            rx,
            peers,
            conns: Slab::new(),
            pool: BufPool::new(READ_BUF, 256),
            out: Vec::with_capacity(READ_BUF),
            shared,
            stats,
            probe,
            queue: Vec::new(),
            yielded: VecDeque::new(),
            cqes: Vec::new(),
        })
    }

    pub fn run(mut self) {
        self.arm_wake();
        for i in 0..self.udp.len() {
            self.arm_udp(i);
        }
        let mut last_sweep = unix_now();
        self.accept_new(last_sweep);
        let mut busy = Busy::new();
        loop {
            // Unlike the epoll loop's, a settled worker pauses too: its clients' threads need
            // not share its CPU (the scheduler rarely moves a worker that seldom sleeps), and
            // with the pause skipped when settled, 3 of 8 workload-4 runs still had a p99 of
            // 3.4-4.2 ms (0 of 8 without the skip; bench/results-log.md, 2026-11-24).
            if busy.should_pause(false) {
                // The turn's sends go out before the worker steps aside.
                let _ = self.ring.submit();
                busy.pause();
            }
            let began = Instant::now();
            self.enter();
            busy.waited_working(began, self.ring.completion().is_empty());
            let now = unix_now();
            while self.reap(now) {
                self.serve_queue(now);
            }
            self.retry_starved();
            self.serve_queue(now);
            for _ in 0..self.yielded.len() {
                if let Some(t) = self.yielded.pop_front() {
                    if let Some(slot) = self.conns.get_mut(t) {
                        slot.yielded = false;
                    }
                    self.serve(t, now);
                }
            }
            if self.shared.shutdown.load(Relaxed) {
                break;
            }
            if now != last_sweep {
                last_sweep = now;
                let conns = self.conns.iter().filter(|(_, s)| !s.closed);
                for t in lifecycle::idle(&self.shared, conns.map(|(t, s)| (t, &s.conn)), now) {
                    self.close(t);
                }
                self.move_to_home_workers(now);
                self.pool.trim_idle();
            }
        }
        let open: Vec<usize> = self.conns.iter().map(|(t, _)| t).collect();
        for t in open {
            self.close(t);
        }
    }

    /// The turn's one io_uring_enter: submits what the last turn queued and, unless
    /// connections wait to be served, waits for a completion.
    fn enter(&mut self) {
        let res = if self.yielded.is_empty() {
            let ts = types::Timespec::from(if self.starved() { STARVED_WAIT } else { WAIT });
            let args = types::SubmitArgs::new().timespec(&ts);
            self.ring.submitter().submit_with_args(1, &args)
        } else {
            self.ring.submit()
        };
        if let Err(e) = res {
            match e.raw_os_error() {
                Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN) => {}
                _ => stderr_line!("worker {}: io_uring_enter failed: {e}", self.id),
            }
        }
    }

    /// Queues `entry` for the next enter (submitting early if the queue is full).
    ///
    /// # Safety
    /// Memory the entry points at must stay valid until its completion is reaped.
    unsafe fn push(&mut self, entry: squeue::Entry) {
        if self.ring.submission().push(&entry).is_ok() {
            return;
        }
        let _ = self.ring.submit();
        if self.ring.submission().push(&entry).is_err() {
            stderr_line!("worker {}: io_uring submission queue full", self.id);
        }
    }

    fn arm_wake(&mut self) {
        use std::os::fd::AsRawFd;
        let fd = self.wake.as_raw_fd();
        let poll = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(user_data(WAKE, 0));
        // SAFETY: a poll refers to no memory of ours.
        unsafe { self.push(poll) };
    }

    /// A one-shot poll, armed again after each batch of up to `-R` datagrams. (A multishot
    /// poll posts a completion per datagram wake-up; served once per reaped batch it measured
    /// the same.)
    fn arm_udp(&mut self, i: usize) {
        let poll = opcode::PollAdd::new(types::Fd(self.udp.fd(i)), libc::POLLIN as u32)
            .build()
            .user_data(user_data(UDP, i));
        // SAFETY: a poll refers to no memory of ours.
        unsafe { self.push(poll) };
    }

    fn on_udp_ready(&mut self, i: usize, res: i32, now: u32) {
        if res < 0 {
            // Not expected on a bound socket; not armed again, so it cannot spin.
            let e = io::Error::from_raw_os_error(-res);
            stderr_line!("worker {}: UDP socket poll failed: {e}", self.id);
            return;
        }
        // Where datagrams are left, the poll re-armed completes at once, next turn.
        self.udp
            .serve(i, &self.shared, &self.stats, now, &mut self.out);
        self.arm_udp(i);
    }

    fn arm_recv(&mut self, t: usize) {
        let slot = &mut self.conns[t];
        let fd = slot.conn.stream.fd();
        slot.recv_armed = true;
        let recv = opcode::RecvMulti::new(types::Fd(fd), BGID).build();
        let recv = if self.shared.settings.uring_kernel.recv_cap {
            with_total_cap(recv, RECV_WINDOW)
        } else {
            recv
        };
        let recv = recv.user_data(user_data(RECV, t));
        // SAFETY: the receive writes only into the registered buffer ring.
        unsafe { self.push(recv) };
    }

    fn cancel(&mut self, kind: u64, t: usize) {
        let cancel = opcode::AsyncCancel::new(user_data(kind, t))
            .build()
            .user_data(user_data(CANCEL, t));
        // SAFETY: a cancel refers to no memory.
        unsafe { self.push(cancel) };
    }

    /// Sends what `conn.wbuf` (from `head_sent`) and `conn.unsent` hold.
    fn send(&mut self, t: usize) {
        let slot = &mut self.conns[t];
        let fd = types::Fd(slot.conn.stream.fd());
        let head = &slot.conn.wbuf[slot.head_sent as usize..];
        let entry = match &slot.conn.unsent {
            None => opcode::Send::new(fd, head.as_ptr(), head.len() as u32)
                .flags(libc::MSG_NOSIGNAL)
                .build(),
            Some(unsent) => {
                let (value, tail) = unsent.rest();
                let g = slot.gather.get_or_insert_with(|| {
                    Box::new(Gather {
                        iov: [libc::iovec {
                            iov_base: std::ptr::null_mut(),
                            iov_len: 0,
                        }; 3],
                        // SAFETY: an all-zero msghdr is a valid empty one.
                        hdr: unsafe { std::mem::zeroed() },
                    })
                });
                for (iov, part) in g.iov.iter_mut().zip([head, value, tail]) {
                    iov.iov_base = part.as_ptr() as *mut libc::c_void;
                    iov.iov_len = part.len();
                }
                g.hdr.msg_iov = g.iov.as_mut_ptr();
                g.hdr.msg_iovlen = 3;
                opcode::SendMsg::new(fd, &g.hdr)
                    .flags(libc::MSG_NOSIGNAL as u32)
                    .build()
            }
        };
        slot.sending = true;
        // SAFETY: the reply buffer, the pinned value and the boxed msghdr belong to the slot,
        // which is neither served (`Conn::has_unsent`) nor removed (`Slot::busy`) until the
        // send completes.
        unsafe { self.push(entry.user_data(user_data(SEND, t))) };
    }

    fn accept_new(&mut self, now: u32) {
        // The acceptor hands this engine TCP and unix-socket connections only: TLS runs on
        // the epoll engine (`engine::resolve`).
        while let Ok(inc) = self.rx.try_recv() {
            let Some(arrival) = lifecycle::arrive(&self.shared, self.id, inc, now) else {
                continue;
            };
            let entry = self.conns.vacant_entry();
            let t = entry.key();
            let conn = lifecycle::admit(&self.shared, self.id, &self.stats, t, arrival);
            entry.insert(Slot::new(conn));
            self.arm_recv(t);
        }
    }

    /// Serves the connections that received bytes, in the order they arrived.
    fn serve_queue(&mut self, now: u32) {
        let queue = std::mem::take(&mut self.queue);
        for &t in &queue {
            self.serve(t, now);
        }
        self.queue = queue;
        self.queue.clear();
    }

    /// Handles up to `REAP_BATCH` completions; true when more wait.
    fn reap(&mut self, now: u32) -> bool {
        let mut cqes = std::mem::take(&mut self.cqes);
        let more = {
            let mut cq = self.ring.completion();
            cqes.extend(
                cq.by_ref()
                    .take(REAP_BATCH)
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            !cq.is_empty()
        };
        for &(data, res, flags) in &cqes {
            let t = (data & ((1 << KIND_SHIFT) - 1)) as usize;
            match data >> KIND_SHIFT {
                RECV => self.on_recv(t, res, flags, now),
                SEND => self.on_send(t, res),
                WAKE => {
                    // Clears the waker's readiness so the next wake is seen.
                    let _ = self.wake.poll(&mut self.wake_events, Some(Duration::ZERO));
                    self.accept_new(now);
                    self.take_flash_reads();
                    for t in self.shared.watch.take_ready(self.id) {
                        if self.conns.get(t).is_some_and(|s| !s.closed) {
                            self.enqueue(t);
                        }
                    }
                    if !cqueue::more(flags) {
                        self.arm_wake();
                    }
                }
                UDP => self.on_udp_ready(t, res, now),
                _ => {}
            }
        }
        cqes.clear();
        self.cqes = cqes;
        more
    }

    fn enqueue(&mut self, t: usize) {
        let slot = &mut self.conns[t];
        if !slot.queued {
            slot.queued = true;
            self.queue.push(t);
        }
    }

    fn on_recv(&mut self, t: usize, res: i32, flags: u32, now: u32) {
        if let Some(bid) = cqueue::buffer_select(flags) {
            let len = res.max(0) as usize;
            if len > 0 {
                self.receive(t, bid, len, now);
            }
            self.bufs.release(bid, len, flags);
        }
        let Some(slot) = self.conns.get_mut(t) else {
            return;
        };
        if !cqueue::more(flags) {
            slot.recv_armed = false;
            slot.recv_pausing = false;
            if let Some(to) = slot.moving_to.take() {
                if !slot.closed && !slot.eof && res <= 0 && slot.conn.is_idle() {
                    self.hand_over(t, to as usize);
                    return;
                }
            }
        }
        let slot = &mut self.conns[t];
        if slot.closed {
            self.reap_closed(t);
            return;
        }
        // ENOBUFS: the ring ran dry this turn; ECANCELED: paused. Either way it is re-armed
        // once served.
        if res == 0 || (res < 0 && res != -libc::ENOBUFS && res != -libc::ECANCELED) {
            slot.eof = true;
            if res < 0 && slot.conn.waits_on_flash() {
                // Reset: no reply can reach it, so it need not wait for its reads (they are
                // dropped when they come back).
                self.close(t);
                return;
            }
        }
        self.enqueue(t);
    }

    /// Appends `len` bytes of ring buffer `bid` to connection `t`'s read buffer.
    fn receive(&mut self, t: usize, bid: u16, len: usize, now: u32) {
        let Some(slot) = self.conns.get(t) else {
            return;
        };
        let rbuf = &slot.conn.rbuf;
        if !rbuf.is_empty() && slot.conn.front == 0 && rbuf.len() + len > rbuf.capacity() {
            // A read buffer is full: run what it holds first, as the epoll loop does after
            // each read, so a large request is seen incomplete and its buffer laid out to
            // receive the value in place (`batch`).
            self.serve(t, now);
        }
        let Some(slot) = self.conns.get_mut(t).filter(|s| !s.closed) else {
            return;
        };
        let data = self.bufs.filled(bid, len);
        if slot.conn.rbuf.capacity() == 0 {
            slot.conn.rbuf = self.pool.take();
        }
        slot.conn.rbuf.extend_from_slice(data);
        self.stats.bytes_read.add(len as u64);
    }

    fn on_send(&mut self, t: usize, res: i32) {
        let Some(slot) = self.conns.get_mut(t) else {
            return;
        };
        slot.sending = false;
        if slot.closed {
            self.reap_closed(t);
            return;
        }
        if res < 0 {
            if res == -libc::EAGAIN || res == -libc::EINTR {
                self.send(t);
            } else {
                // The peer is gone: drop the replies and close (see `serve`).
                slot.conn.closing = true;
                slot.eof = true;
                slot.conn.unsent = None;
                slot.conn.wbuf.clear();
                slot.head_sent = 0;
                self.enqueue(t);
            }
            return;
        }
        let n = res as usize;
        self.stats.bytes_written.add(n as u64);
        let from_head = n.min(slot.conn.wbuf.len() - slot.head_sent as usize);
        slot.head_sent += from_head as u32;
        if let Some(u) = &mut slot.conn.unsent {
            if u.advance(n - from_head) {
                slot.conn.unsent = None;
            }
        }
        if slot.head_sent as usize == slot.conn.wbuf.len() {
            let wbuf = std::mem::take(&mut slot.conn.wbuf);
            slot.head_sent = 0;
            self.pool.give(wbuf);
        }
        if self.conns[t].conn.has_unsent() {
            self.send(t);
        } else {
            // Requests that waited for these replies run now.
            self.enqueue(t);
        }
    }

    /// Runs what connection `t` received, sends its replies, and closes or re-arms it.
    fn serve(&mut self, t: usize, now: u32) {
        let Some(slot) = self.conns.get_mut(t) else {
            return;
        };
        slot.queued = false;
        if slot.closed {
            return;
        }
        if slot.conn.watcher().is_some() {
            self.serve_watcher(t);
            return;
        }
        let conn = &mut slot.conn;
        if !conn.has_unsent() && !conn.closing && !conn.waits_on_flash() && !conn.rbuf.is_empty() {
            lifecycle::touch(&self.shared, self.id, t, conn, now);
            let mut buf = std::mem::take(&mut conn.rbuf);
            conn.budget = self.shared.settings.max_reqs_per_event;
            let started = self.probe.start();
            let env = ExecEnv::stream(
                &self.shared,
                &self.stats,
                now,
                &self.probe,
                (self.id, t),
                conn.stream.fd(),
            );
            let pending = batch::process(&env, conn, &mut self.pool, &mut buf, &mut self.out);
            conn.pending = pending;
            if buf.is_empty() {
                self.pool.give(buf);
            } else {
                conn.rbuf = buf;
            }
            let replies = !self.out.is_empty() || conn.unsent.is_some();
            if self.out.len() > SMALL_REPLY {
                let next = if self.out.capacity() > OUT_KEEP {
                    Vec::with_capacity(READ_BUF)
                } else {
                    self.pool.take()
                };
                conn.wbuf = std::mem::replace(&mut self.out, next);
            } else if !self.out.is_empty() {
                conn.wbuf = self.out.clone();
                self.out.clear();
            }
            self.probe.finish(started);
            if replies {
                self.send(t);
            }
            let slot = &mut self.conns[t];
            let conn = &slot.conn;
            if pending && conn.budget == 0 {
                // -R requests ran and more wait: the others get a turn first (memcached's
                // conn_yields).
                self.stats.conn_yields.incr();
            }
            if pending
                && !conn.has_unsent()
                && !conn.closing
                && !conn.waits_on_flash()
                && !slot.yielded
            {
                // Served again next turn (once its replies are out, when they wait).
                slot.yielded = true;
                self.yielded.push_back(t);
            }
        }
        let slot = &mut self.conns[t];
        let conn = &slot.conn;
        if (conn.closing || slot.eof && !conn.pending) && !conn.has_unsent() {
            self.close(t);
            return;
        }
        // Requests wait on replies being sent, or on the `-R` budget (quiet commands make no
        // replies, so only this bounds what a client that pipelines them has read ahead).
        let backlog = (conn.has_unsent() || conn.pending) && conn.rbuf.len() >= PAUSE_AT;
        if slot.eof || conn.closing {
            return;
        }
        if backlog && slot.recv_armed && !slot.recv_pausing {
            slot.recv_pausing = true;
            self.cancel(RECV, t);
        } else if !backlog && !slot.recv_armed {
            self.arm_recv(t);
        }
    }

    /// A `watch` connection: drops what it sent, closes on EOF, and sends the log lines
    /// queued for it once its last send is done (they wait in its bounded queue meanwhile).
    fn serve_watcher(&mut self, t: usize) {
        let slot = &mut self.conns[t];
        if !slot.conn.rbuf.is_empty() {
            let mut buf = std::mem::take(&mut slot.conn.rbuf);
            buf.clear();
            self.pool.give(buf);
        }
        if slot.eof || slot.conn.closing {
            if !slot.conn.has_unsent() {
                self.close(t);
            }
            return;
        }
        if !slot.conn.has_unsent() {
            if let Some(w) = slot.conn.watcher().cloned() {
                let mut buf = self.pool.take();
                w.take(&mut buf);
                if buf.is_empty() {
                    self.pool.give(buf);
                    // No send in flight and none to make (io_uring serves no TLS).
                    if !slot.sending {
                        w.send_directly(slot.conn.stream.fd());
                    }
                } else {
                    slot.conn.wbuf = buf;
                    self.send(t);
                }
            }
        }
        let slot = &mut self.conns[t];
        if !slot.recv_armed {
            self.arm_recv(t);
        }
    }

    /// Starts handing idle connections to the workers of their clients' CPUs: each one's
    /// receive is cancelled, and the move happens when that completes (`on_recv`) if the
    /// connection is still idle.
    fn move_to_home_workers(&mut self, now: u32) {
        let conns = self
            .conns
            .iter()
            .filter(|(_, s)| !s.closed && s.recv_armed && !s.recv_pausing && !s.sending)
            .map(|(t, s)| (t, &s.conn));
        let plan = lifecycle::plan_moves(&self.shared, self.id, conns, now);
        for (t, to) in plan.moves {
            let Ok(to) = u16::try_from(to) else { continue };
            let slot = &mut self.conns[t];
            slot.moving_to = Some(to);
            slot.recv_pausing = true;
            self.cancel(RECV, t);
        }
    }

    /// Hands idle connection `t`, on which the kernel holds no operation, to worker `to`.
    fn hand_over(&mut self, t: usize, to: usize) {
        let Some(info) = lifecycle::unregister(&self.shared, self.id, t) else {
            return;
        };
        let mut slot = self.conns.remove(t);
        self.pool.give(std::mem::take(&mut slot.conn.rbuf));
        lifecycle::send_to(
            &self.shared,
            self.id,
            &self.stats,
            &self.peers,
            to,
            slot.conn,
            info,
        );
    }

    /// Closes connection `t`: counted at once, freed once the kernel has let go of it.
    fn close(&mut self, t: usize) {
        let Some(slot) = self.conns.get_mut(t) else {
            return;
        };
        if slot.closed {
            return;
        }
        slot.closed = true;
        let wbuf = std::mem::take(&mut slot.conn.wbuf);
        lifecycle::forget(&self.shared, self.id, &mut self.pool, t, &mut slot.conn);
        let (sending, receiving) = (slot.sending, slot.recv_armed);
        if sending {
            slot.conn.wbuf = wbuf;
            self.cancel(SEND, t);
        } else {
            slot.conn.unsent = None;
            self.pool.give(wbuf);
        }
        if receiving {
            self.cancel(RECV, t);
        }
        self.reap_closed(t);
    }

    /// Frees closed connection `t` (closing its socket) once no operation holds it.
    fn reap_closed(&mut self, t: usize) {
        if self.conns.get(t).is_some_and(|s| s.closed && !s.busy()) {
            self.conns.remove(t);
        }
    }
}

impl FlashConns for UringWorker {
    fn flash_worker(&self) -> (usize, &Arc<Shared>) {
        (self.id, &self.shared)
    }

    fn flash_wait(&mut self, token: usize) -> Option<&mut FlashWait> {
        let slot = self.conns.get_mut(token).filter(|s| !s.closed);
        slot.and_then(|s| s.conn.flash_wait())
    }

    fn ready(&mut self, token: usize) {
        self.enqueue(token);
    }
}
