//! Backend connections: the requests in flight on each (FIFO, as servers answer in order),
//! merged get lines, framing the replies and handing them to their clients, failures.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use proto::resp;
use proto::response::{AskedKeys, Expect, Frame, Item, Refusal, ReplyFramer};

use super::client::deliver;
use super::get_batch::{GetBatch, SPLIT_EARLY_FROM};
use super::held::Held;
use super::reply_to::{ReplyTo, EXEC_CLIENT};
use super::{error_reply, Worker};
use crate::buf::ReadBuf;
use crate::net::{error_text, Stream};
use crate::shared::PoolRt;
use routetree::reply::McResult;
use routetree::server_stats::{ConnState, Res};
use std::sync::Arc;

/// A backend reply (or the failure met instead) for an execution.
pub(super) struct Arrived {
    pub to: ReplyTo,
    pub reply: Vec<u8>,
    pub failed: Option<McResult>,
}

/// Replies for executions, kept until the end of the loop turn (they may send more, which a
/// backend's reply loop cannot).
#[derive(Default)]
pub(super) struct Arrivals(Vec<Arrived>);

impl Arrivals {
    /// Whether `to` is a send of an execution (not a client's request).
    #[inline]
    pub(super) fn owns(to: ReplyTo) -> bool {
        to.client == EXEC_CLIENT
    }

    pub(super) fn arrive(&mut self, to: ReplyTo, reply: &[u8], failed: Option<McResult>) {
        self.0.push(Arrived {
            to,
            reply: reply.to_vec(),
            failed,
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn take(&mut self) -> Vec<Arrived> {
        std::mem::take(&mut self.0)
    }
}

/// One request in flight on a backend connection.
pub(super) struct Pending {
    to: ReplyTo,
    /// The replies it may get; any other closes the connection. A quiet meta command is
    /// followed by `mn`: its reply is everything up to `MN`.
    expect: Expect,
    at: Instant,
    bytes: u32,
    /// Client requests it answers (the members of a merged get), counted in
    /// [`Backend::queued`].
    reqs: u32,
    /// A get's keys, which its items must follow; with several members, clients' gets
    /// merged into one line, whose reply is split between them.
    batch: Option<Box<GetBatch>>,
    /// A Redis Cluster pool's command, kept (its bytes in [`Backend::resend_bytes`]) to send
    /// again where a redirection points.
    pub(super) resend: Option<super::cluster::ResendMeta>,
}

/// Spare key lists a backend connection keeps, so a get costs no allocation.
const SPARE_BATCHES: usize = 16;

impl Pending {
    fn quiet(&self) -> bool {
        matches!(self.expect, Expect::Meta { quiet: true, .. })
    }

    /// Each request this entry answers: itself, or every member of its merged get.
    pub(super) fn targets(&self) -> impl Iterator<Item = ReplyTo> + '_ {
        let lone = self.batch.is_none().then_some(self.to);
        let merged = self.batch.iter().flat_map(|b| b.waiting()).map(|m| m.to);
        lone.into_iter().chain(merged)
    }
}

/// `AUTH [user] <password>` and `SELECT <db>` as a Redis pool's connections start (each only
/// when configured): appends the commands, returns how many replies to expect.
pub(crate) fn redis_handshake(
    auth: Option<(Option<&str>, &str)>,
    db: u32,
    out: &mut Vec<u8>,
) -> usize {
    let mut n = 0;
    match auth {
        Some((Some(user), pw)) => {
            resp::write_command(out, 3, [&b"AUTH"[..], user.as_bytes(), pw.as_bytes()]);
            n += 1;
        }
        Some((None, pw)) => {
            resp::write_command(out, 2, [&b"AUTH"[..], pw.as_bytes()]);
            n += 1;
        }
        None => {}
    }
    if db != 0 {
        let db = db.to_string();
        resp::write_command(out, 2, [&b"SELECT"[..], db.as_bytes()]);
        n += 1;
    }
    n
}

/// A merged `get`/`gets` line still taking keys. Requests queued on the backend after it
/// opened go out after it; a client that sent one of those may not join any more, or its
/// get would overtake its own earlier request.
struct OpenGet {
    cas: bool,
    at: Instant,
    /// Bytes of `wbuf` and entries of `pending` queued since the line opened: the line and
    /// its entry go in before them.
    wbuf_after: usize,
    pending_after: usize,
    barred: Vec<(u32, u32)>,
}

/// One connection to one server of a pool, owned by one worker.
pub(super) struct Backend {
    stream: Stream,
    rt: Arc<PoolRt>,
    /// The worker that owns it (its index into the per-worker counters).
    worker: usize,
    pub(super) server: usize,
    /// `(pool index, connection index)` in the worker's current pools; None once retired
    /// by a reload (it then closes when its queue is empty).
    pub(super) place: Option<(usize, usize)>,
    /// The pool index while it is current and has an `active_req_limit` its requests count
    /// against.
    pub(super) limited_pool: Option<usize>,
    connecting: bool,
    rbuf: ReadBuf,
    framer: ReplyFramer,
    wbuf: Vec<u8>,
    wpos: usize,
    pub(super) pending: VecDeque<Pending>,
    /// Client requests queued here and not answered yet (those of the open get line too):
    /// what `server_max_inflight` bounds.
    pub(super) queued: u32,
    /// The pool's `max_outstanding` and the requests waiting under it; None: no limit.
    pub(super) outstanding: Option<Box<super::held::Limit>>,
    dirty: bool,
    open_get: Option<OpenGet>,
    /// The keys of `open_get` as they go on the line, and its requests.
    get_line: Vec<u8>,
    batch: Box<GetBatch>,
    /// Key lists of answered gets, cleared, for the next ones (boxed: each becomes a
    /// `Pending::batch` and comes back without a move of its contents).
    #[allow(clippy::vec_box)]
    spare: Vec<Box<GetBatch>>,
    /// Where split replies of a merged get (and their items) are assembled.
    scratch: (Vec<u8>, Vec<Item>),
    /// The bytes of the cluster commands in `pending` that may be sent again, in queue
    /// order.
    pub(super) resend_bytes: ResendBytes,
}

/// Bytes kept in queue order in one buffer (no allocation per command): the answered ones
/// at its front are dropped by moving `head`, and the buffer is emptied whenever `head`
/// catches up with its end, or moved down once most of it is dropped.
#[derive(Default)]
pub(super) struct ResendBytes {
    buf: Vec<u8>,
    head: usize,
}

/// Dropped bytes [`ResendBytes`] lets pile up at its front before it moves the rest down.
const RESEND_COMPACT_AT: usize = 64 * 1024;

impl ResendBytes {
    pub(super) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The first `len` bytes.
    pub(super) fn front(&self, len: usize) -> &[u8] {
        &self.buf[self.head..self.head + len]
    }

    /// Drops the first `len` bytes.
    pub(super) fn pop_front(&mut self, len: usize) {
        self.head += len;
        if self.head >= self.buf.len() {
            self.buf.clear();
            self.head = 0;
        } else if self.head >= RESEND_COMPACT_AT && 2 * self.head >= self.buf.len() {
            // Moves at most as many bytes as were dropped since the last time.
            self.buf.drain(..self.head);
            self.head = 0;
        }
    }
}

/// Why a request gets no backend connection; each carries the error reply.
pub(super) enum NoBackend {
    /// The connection holds `server_max_inflight` requests already.
    Overloaded(Vec<u8>),
    /// No connection could be made.
    Failed(Vec<u8>),
}

/// Why a backend connection is dropped.
pub(super) enum Why {
    Eof,
    Io(io::Error),
    Timeout,
    /// A reply that is not one to the request it would answer (the framer's reason).
    Protocol(Option<Refusal>),
    /// The backend refused the AUTH or SELECT the router sent for the pool.
    Handshake(String),
}

impl Worker {
    /// An error reply made up by the router, in pool `p`'s protocol.
    pub(super) fn pool_error(&self, p: usize, msg: &str) -> Vec<u8> {
        error_reply(self.pools[p].rt.cfg.redis, msg)
    }

    /// A request that cannot be forwarded: count it and answer the client at once.
    pub(super) fn fail_forward(&mut self, ci: usize, p: usize, reply: &[u8]) {
        self.pools[p].rt.counters[self.id].pool.forward_error.add(1);
        self.local_reply(ci, reply);
    }

    /// [`Worker::backend_or`], with the error reply to answer.
    #[inline]
    pub(super) fn backend_for(
        &mut self,
        p: usize,
        s: usize,
        lane: usize,
    ) -> Result<usize, Vec<u8>> {
        self.backend_or(p, s, lane).map_err(|e| match e {
            NoBackend::Overloaded(r) | NoBackend::Failed(r) => r,
        })
    }

    /// A connection to server `s` of pool `p`, connecting when needed. With several
    /// `server_connections` a client always uses the same one (`lane`: its index), so its
    /// requests to one server stay in order: a pipelined SET then GET must not race. `Err` is the error reply to answer. A Redis backend
    /// connection first authenticates and selects the pool's database; requests queued
    /// behind that wait for it. A connection holding `server_max_inflight` requests takes
    /// no more.
    #[inline]
    pub(super) fn backend_or(
        &mut self,
        p: usize,
        s: usize,
        lane: usize,
    ) -> Result<usize, NoBackend> {
        let pl = &self.pools[p];
        if self.active.full() || pl.active.full() {
            return Err(NoBackend::Overloaded(self.active_limit_reached(p, s)));
        }
        let k = lane % pl.conns[s].len();
        match pl.conns[s][k] {
            Some(b) if self.backends[b].queued < pl.max_inflight => Ok(b),
            Some(_) => Err(NoBackend::Overloaded(self.overloaded(p, s))),
            None => self.connect_backend(p, s, k),
        }
    }

    /// Queues a request on backend `b`; its reply goes to `to` and must be one it
    /// `expect`s. `parts` are written one after the other.
    #[inline]
    pub(super) fn enqueue(&mut self, b: usize, parts: &[&[u8]], to: ReplyTo, expect: Expect) {
        let be = &mut self.backends[b];
        if be
            .outstanding
            .as_ref()
            .is_some_and(|l| l.must_wait(be.queued))
        {
            return self.hold(b, Held::plain(parts, to, expect));
        }
        be.enqueue(parts, to, expect, None, self.now);
        let pool = be.limited_pool;
        self.count_queued(pool);
        self.mark_backend(b);
    }

    /// Queues a get that is not merged (gat, gats, lease-get, an execution's get) asking
    /// `keys`, which its reply's items must follow.
    pub(super) fn enqueue_keyed<'k>(
        &mut self,
        b: usize,
        parts: &[&[u8]],
        to: ReplyTo,
        expect: Expect,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) {
        let be = &mut self.backends[b];
        if be
            .outstanding
            .as_ref()
            .is_some_and(|l| l.must_wait(be.queued))
        {
            return self.hold(b, Held::keyed(parts, to, expect, keys));
        }
        be.enqueue_keyed(parts, to, expect, keys, self.now);
        let pool = be.limited_pool;
        self.count_queued(pool);
        self.mark_backend(b);
    }

    /// Queues a plain get/gets on backend `b`; see [`Backend::enqueue_get`].
    #[inline]
    pub(super) fn enqueue_get<'k>(
        &mut self,
        b: usize,
        cas: bool,
        keys: impl Iterator<Item = &'k [u8]> + Clone,
        to: ReplyTo,
    ) {
        let be = &mut self.backends[b];
        if be
            .outstanding
            .as_ref()
            .is_some_and(|l| l.must_wait(be.queued))
        {
            return self.hold(b, Held::get(cas, keys, to));
        }
        be.enqueue_get(cas, keys, to, self.now);
        let pool = be.limited_pool;
        self.count_queued(pool);
        self.mark_backend(b);
    }

    /// Backend `b` has bytes to write: it is flushed at the end of the loop iteration.
    pub(super) fn mark_backend(&mut self, b: usize) {
        let be = &mut self.backends[b];
        if !be.dirty {
            be.dirty = true;
            self.dirty_backends.push(b);
        }
    }

    pub(super) fn flush_backend(&mut self, b: usize) {
        let Some(be) = self.backends.get_mut(b) else {
            return;
        };
        be.close_get();
        be.dirty = false;
        if be.connecting {
            return;
        }
        while be.wpos < be.wbuf.len() {
            match be.stream.write(&be.wbuf[be.wpos..]) {
                Ok(0) => return self.fail_backend(b, Why::Eof),
                Ok(n) => be.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail_backend(b, Why::Io(e)),
            }
        }
        // TLS: records the socket refused earlier (and a new connection's ClientHello).
        match be.stream.flush() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => {
                return self.fail_backend(b, Why::Io(e))
            }
            _ => {}
        }
        be.wbuf.clear();
        be.wpos = 0;
        if be.wbuf.capacity() > 1024 * 1024 {
            be.wbuf = Vec::new();
        }
    }

    pub(super) fn backend_writable(&mut self, b: usize) {
        let Some(be) = self.backends.get_mut(b) else {
            return;
        };
        if be.connecting {
            match be.stream.connect_result() {
                Ok(true) => be.connected(),
                Ok(false) => return,
                Err(e) => return self.fail_backend(b, Why::Io(e)),
            }
        }
        self.flush_backend(b);
    }

    pub(super) fn backend_readable(&mut self, b: usize, drain: bool) {
        loop {
            let Some(be) = self.backends.get_mut(b) else {
                return;
            };
            match be.rbuf.read_from(&mut be.stream) {
                Ok((0, _)) => return self.fail_backend(b, Why::Eof),
                Ok((_, more)) => {
                    if !self.backend_replies(b) {
                        return;
                    }
                    if !more && !drain {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail_backend(b, Why::Io(e)),
            }
        }
        if let Some(be) = self.backends.get(b) {
            if be.place.is_none() && be.pending.is_empty() {
                self.close_backend(b);
            }
        }
    }

    /// Hands every complete reply in the backend's buffer to its client. False when the
    /// connection was dropped.
    pub(super) fn backend_replies(&mut self, b: usize) -> bool {
        let be = &mut self.backends[b];
        if be.connecting {
            be.connected();
        }
        let mut any = false;
        loop {
            // Bytes no request asked for: the server is out of step.
            let Some(p) = be.pending.front() else {
                if be.rbuf.is_empty() {
                    break;
                }
                return self.fail_then(b, Why::Protocol(Some(Refusal::Unexpected)));
            };
            let keys = p
                .batch
                .as_ref()
                .map_or(AskedKeys::NONE, |batch| batch.asked());
            match be.framer.next(be.rbuf.filled(), p.expect, keys) {
                Frame::Complete(n) => {
                    let reply = &be.rbuf.filled()[..n];
                    if p.to == ReplyTo::HANDSHAKE {
                        if reply.first() == Some(&b'-') {
                            let text = String::from_utf8_lossy(&reply[1..n - 2]).into_owned();
                            return self.fail_then(b, Why::Handshake(text));
                        }
                        be.pending.pop_front();
                        be.rbuf.consume(n);
                        continue;
                    }
                    let quiet = p.quiet();
                    let done = !quiet || reply == b"MN\r\n";
                    let items = be.framer.items();
                    // mcrouter pools: each request's result, for `stats servers`.
                    let mc = be.rt.counters[self.id].mc.get(be.server);
                    let merged = p.batch.as_ref().filter(|batch| batch.members().len() > 1);
                    if let Some(batch) = merged {
                        let (clients, dirty) = (&mut self.clients, &mut self.dirty_clients);
                        let scratch = &mut be.scratch;
                        batch.split_reply(reply, items, scratch, |m, part, part_items| {
                            if let Some(d) = mc {
                                d.answered(Res::of_reply(Expect::Get, part));
                            }
                            deliver(clients, dirty, m.to, part, part_items, true);
                        });
                    } else if quiet && done {
                        deliver(
                            &mut self.clients,
                            &mut self.dirty_clients,
                            p.to,
                            b"",
                            &[],
                            done,
                        );
                    } else if Arrivals::owns(p.to) {
                        self.arrivals.arrive(p.to, reply, None);
                    } else if p.to == ReplyTo::DISCARD {
                        // `ASKING`, or a command queued inside `MULTI`: what matters is
                        // the reply of the command that follows it on this connection.
                    } else if reply.first() == Some(&b'-')
                        && p.resend.as_ref().is_some_and(|r| {
                            let frame = be.resend_bytes.front(r.len as usize).iter();
                            self.redirects
                                .take(&be.rt, be.server, p.to, r, frame, reply)
                        })
                    {
                        // Sent again where the cluster points, once the turn's replies are read.
                    } else {
                        deliver(
                            &mut self.clients,
                            &mut self.dirty_clients,
                            p.to,
                            reply,
                            items,
                            done,
                        );
                    }
                    let pc = &be.rt.counters[self.id];
                    let c = &pc.servers[be.server];
                    c.response_bytes.add(n as i64);
                    if done {
                        if let (Some(d), None) = (mc, merged) {
                            d.answered(Res::of_reply(p.expect, reply));
                        }
                        let waited = self.now.saturating_duration_since(p.at);
                        pc.latency[be.server].record(waited.as_nanos() as u64);
                        c.responses.add(1);
                        c.out_queue.add(-1);
                        c.out_queue_bytes.add(-i64::from(p.bytes));
                        be.queued -= p.reqs;
                        self.active.answered(p.reqs);
                        if let Some(pool) = be.limited_pool {
                            self.pools[pool].active.answered(p.reqs);
                        }
                        let popped = be.pending.pop_front();
                        if let Some(r) = popped.as_ref().and_then(|p| p.resend.as_ref()) {
                            be.resend_bytes.pop_front(r.len as usize);
                        }
                        if let Some(mut batch) = popped.and_then(|p| p.batch) {
                            if be.spare.len() < SPARE_BATCHES {
                                batch.clear();
                                be.spare.push(batch);
                            }
                        }
                    }
                    be.rbuf.consume(n);
                    any = true;
                }
                Frame::Incomplete(total) => {
                    let dropped = self.split_early(b);
                    if dropped > 0 {
                        any = true;
                    }
                    if let Some(t) = total {
                        self.backends[b].rbuf.reserve_total(t - dropped);
                    }
                    break;
                }
                Frame::Invalid => {
                    let why = be.framer.refusal();
                    return self.fail_then(b, Why::Protocol(why));
                }
            }
        }
        if any {
            let be = &self.backends[b];
            be.rt.record_success(be.server);
            if be.outstanding.is_some() {
                self.release_held(b);
            }
        }
        true
    }

    /// A merged reply still arriving with `SPLIT_EARLY_FROM` bytes buffered: answers whom
    /// its first items settle and drops them, rather than hold it all. Returns the bytes
    /// dropped.
    fn split_early(&mut self, b: usize) -> usize {
        let be = &mut self.backends[b];
        if be.rbuf.len() < SPLIT_EARLY_FROM {
            return 0;
        }
        let Some(batch) = be.pending.front_mut().and_then(|p| p.batch.as_mut()) else {
            return 0;
        };
        if batch.members().len() < 2 {
            return 0;
        }
        let (clients, dirty) = (&mut self.clients, &mut self.dirty_clients);
        let items = be.framer.items_so_far();
        let mc = be.rt.counters[self.id].mc.get(be.server);
        let split = batch.split_partial(
            be.rbuf.filled(),
            items,
            &mut be.scratch,
            |m, part, part_items| {
                if let Some(d) = mc {
                    d.answered(Res::of_reply(Expect::Get, part));
                }
                deliver(clients, dirty, m.to, part, part_items, true);
            },
        );
        let Some((k, n)) = split else {
            return 0;
        };
        be.framer.drop_front(k, n);
        be.rbuf.consume(n);
        be.rt.counters[self.id].servers[be.server]
            .response_bytes
            .add(n as i64);
        n
    }

    pub(super) fn fail_then(&mut self, b: usize, why: Why) -> bool {
        self.fail_backend(b, why);
        false
    }

    /// Drops a broken backend connection: every request on it is answered with
    /// SERVER_ERROR and the failure counts towards ejection.
    pub(super) fn fail_backend(&mut self, b: usize, why: Why) {
        let Some(mut be) = self.backends.try_remove(b) else {
            return;
        };
        be.close_get();
        self.answered_all(&be);
        let _ = self.poll.registry().deregister(be.stream.source());
        if let Some((p, k)) = be.place {
            if let Some(pl) = self.pools.get_mut(p) {
                if pl.conns[be.server][k] == Some(b) {
                    pl.conns[be.server][k] = None;
                }
            }
        }
        let c = &be.rt.counters[self.id].servers[be.server];
        c.server_connections.add(-1);
        let text = match &why {
            Why::Eof => {
                c.server_eof.add(1);
                "Connection closed by server".to_owned()
            }
            Why::Io(e) => {
                c.server_err.add(1);
                error_text(e)
            }
            Why::Timeout => {
                c.server_timedout.add(1);
                "Connection timed out".to_owned()
            }
            Why::Protocol(_) => {
                c.server_err.add(1);
                "invalid reply from server".to_owned()
            }
            Why::Handshake(e) => {
                c.server_err.add(1);
                format!("server refused AUTH/SELECT: {e}")
            }
        };
        if let Some(slots) = be.rt.learned.as_ref().and_then(|l| l.slots.as_ref()) {
            // A cluster node gone: its slots may have a new primary already.
            slots.mark_stale();
        }
        let refused = matches!(&why, Why::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused);
        let exec_result = match &why {
            Why::Timeout if be.connecting => McResult::ConnectTimeout,
            Why::Timeout => McResult::Timeout,
            _ if be.connecting || refused => McResult::ConnectError,
            _ => McResult::RemoteError,
        };
        // An mcrouter pool's clients get mcrouter's error replies.
        let msg = if be.rt.tko.is_empty() {
            error_reply(be.rt.cfg.redis, &text)
        } else {
            exec_result.error_reply().to_vec()
        };
        match why {
            Why::Timeout => be.rt.record_tko_failure(be.server, be.connecting),
            Why::Io(_) if be.connecting || refused => be.rt.record_tko_failure(be.server, true),
            _ => {}
        }
        let handshake = be.pending.iter().any(|p| p.to == ReplyTo::HANDSHAKE);
        be.pending.retain(|p| p.to != ReplyTo::HANDSHAKE);
        be.disconnected(ConnState::Down);
        let mc = be.rt.counters[self.id].mc.get(be.server);
        let mut failed = 0;
        for p in be.pending.drain(..) {
            c.out_queue.add(-1);
            c.out_queue_bytes.add(-i64::from(p.bytes));
            if let Some(r) = &p.resend {
                let frame = be.resend_bytes.front(r.len as usize).to_vec();
                be.resend_bytes.pop_front(r.len as usize);
                if r.replica {
                    self.retry_on_primary(&be.rt, be.server, p.to, r, frame, &msg);
                    continue;
                }
            }
            for t in p.targets() {
                if t == ReplyTo::DISCARD {
                    continue;
                }
                failed += 1;
                if let Some(d) = mc {
                    d.answered(Res::of_failure(exec_result));
                }
                if Arrivals::owns(t) {
                    self.arrivals.arrive(t, b"", Some(exec_result));
                    continue;
                }
                deliver(
                    &mut self.clients,
                    &mut self.dirty_clients,
                    t,
                    &msg,
                    &[],
                    true,
                );
            }
        }
        failed += self.fail_held(&mut be, &msg, exec_result);
        be.rt.counters[self.id].pool.forward_error.add(failed);
        // An idle connection the server closed (restart, idle timeout) is not a failure.
        if failed > 0 || handshake || !matches!(why, Why::Eof) || be.connecting {
            be.rt.record_failure(be.server);
            if let Some(l) = &be.rt.learned {
                l.rest(be.server, be.rt.uptime_ms());
            }
        }
        let detail = match why {
            Why::Protocol(Some(Refusal::TooLarge(n))) => {
                format!(
                    " (a value of {n} bytes, over item_size_max {})",
                    be.rt.cfg.item_size_max
                )
            }
            Why::Protocol(Some(r)) => format!(" ({r})"),
            _ => String::new(),
        };
        crate::log::info(&format!(
            "pool '{}': server '{}' connection dropped: {text}{detail}",
            be.rt.cfg.name, be.rt.servers[be.server].stats_name
        ));
    }

    pub(super) fn close_backend(&mut self, b: usize) {
        let Some(mut be) = self.backends.try_remove(b) else {
            return;
        };
        self.answered_all(&be);
        if be.outstanding.is_some() {
            // Not expected (it closes once idle), but none may wait for it.
            let msg = error_reply(be.rt.cfg.redis, "Connection closed");
            self.fail_held(&mut be, &msg, McResult::RemoteError);
        }
        let _ = self.poll.registry().deregister(be.stream.source());
        be.disconnected(ConnState::Closed);
        be.rt.counters[self.id].servers[be.server]
            .server_connections
            .add(-1);
    }

    /// Fails backends whose oldest request is past the pool timeout; returns how long
    /// until the next deadline.
    pub(super) fn check_timeouts(&mut self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut expired = Vec::new();
        let now = self.now;
        for (b, be) in self.backends.iter() {
            let (Some(t), Some(front)) = (be.rt.timeout(), be.pending.front()) else {
                continue;
            };
            let deadline = front.at + t;
            if deadline <= now {
                expired.push(b);
            } else {
                let left = deadline - now;
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
        if !expired.is_empty() {
            self.now = now;
            for b in expired {
                self.fail_backend(b, Why::Timeout);
            }
            self.flush_all();
            return Some(Duration::from_millis(1));
        }
        next.map(|n| n + Duration::from_micros(200))
    }
}

mod connect;
mod queue;
#[cfg(test)]
mod tests;
