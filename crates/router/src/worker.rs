//! One worker thread: a mio loop that owns its client connections and its own backend
//! connections (`server_connections` per server per thread).
//!
//! Each loop iteration reads every ready client, parses all complete requests and appends
//! them to the backend connections' write buffers, then writes each backend buffer once:
//! requests of many clients leave in one `write`. Replies are framed per backend connection
//! (FIFO: memcached answers in order) and handed to the client's reply queue, which keeps
//! the client's request order even when its requests went to different servers; each
//! client's ready replies are also written once per iteration.
//!
//! Pools speak memcached or, with `redis: true`, RESP2. The protocol shows in three places
//! only: how a client's bytes are parsed and routed (`parse_client` / `parse_client_resp`),
//! how a backend's replies are framed ([`ReplyFramer`]), and the wording of the errors the
//! router makes up. Queues, batching, ordering, timeouts and ejection are shared.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use proto::redis_cmd::{self, Kind, Local};
use proto::resp::{self, RespParse, RespRequest};
use proto::{Limits, Parse, Request};
use slab::Slab;

use crate::buf::ReadBuf;
use crate::get_batch::{GetBatch, Member};
use crate::net::{error_text, Listener, Stream};
use crate::redis_local;
use crate::reply_frame::{get_items, is_error_reply, is_get_reply, Frame, ReplyFramer};
use crate::shared::{Globals, PoolRt, Shared};

pub const WAKER: Token = Token(usize::MAX);
const KIND_CLIENT: usize = 0;
const KIND_BACKEND: usize = 1;
const KIND_LISTENER: usize = 2;

/// Idle read buffers a worker keeps for reuse.
const READ_POOL_MAX: usize = 256;
/// Extra clients a worker keeps before it hands new connections to a less busy worker.
/// memcached clients mostly hold their connections (pylibmc, php-memcached persistent
/// pools): spread them. Redis pools mostly serve PHP's connect, AUTH, a few commands,
/// close: keeping those on the accepting thread saves a cross-thread hand-over each.
const HANDOFF_SLACK_MEMCACHED: i64 = 4;
const HANDOFF_SLACK_REDIS: i64 = 64;
/// Full reads from one client before other connections get their turn.
const MAX_READS_PER_TURN: usize = 8;
/// Stop reading a client that has this many unanswered requests...
const MAX_SLOTS: usize = 16 * 1024;
/// ...or this many reply bytes it has not read yet.
const MAX_UNSENT: usize = 8 * 1024 * 1024;
/// A half-received Redis request may buffer this much (redis's client-query-buffer-limit).
const MAX_QUERY_BUFFER: usize = 1024 * 1024 * 1024;

const NO_SERVER: &str = "no server is available";
/// `Pending::client` of the AUTH / SELECT a Redis backend connection starts with.
const HANDSHAKE: u32 = u32::MAX;

/// redis-server's own limits; only what a client sends before AUTH is bounded tighter.
const RESP_LIMITS: resp::Limits = resp::Limits {
    max_multibulk_len: i32::MAX as i64,
    max_bulk_len: 512 * 1024 * 1024,
    max_inline_len: 64 * 1024,
    unauthenticated: false,
};
const RESP_LIMITS_UNAUTH: resp::Limits = resp::Limits {
    unauthenticated: true,
    ..RESP_LIMITS
};

/// An error reply the router makes up, in the pool's protocol.
fn error_reply(redis: bool, msg: &str) -> Vec<u8> {
    if redis {
        let mut out = Vec::with_capacity(msg.len() + 7);
        resp::write_error(&mut out, format!("ERR {msg}").as_bytes());
        out
    } else {
        format!("SERVER_ERROR {msg}\r\n").into_bytes()
    }
}
const VERSION: &[u8] =
    concat!("VERSION memfleet-route-", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes();

fn token(kind: usize, idx: usize) -> Token {
    Token(idx << 2 | kind)
}

/// Sent by the control thread.
pub enum Control {
    /// A new configuration generation (also the initial one).
    Reload {
        shared: Arc<Shared>,
        listeners: Vec<ListenerUpdate>,
    },
    /// A client connection another worker accepted for this one.
    Adopt { stream: Stream, listen_key: String },
}

/// How to reach a worker from another thread.
pub type Peer = (std::sync::mpsc::Sender<Control>, Arc<Waker>);

/// One listen address of the new generation: keep the worker's handle (`new: None`) or
/// start accepting on a new socket.
pub struct ListenerUpdate {
    pub key: String,
    pub pool: usize,
    pub new: Option<Listener>,
}

struct ListenerLocal {
    key: String,
    pool: usize,
    listener: Listener,
}

/// A pool as this worker sees it: its ring snapshot and its backend connections.
struct PoolLocal {
    rt: Arc<PoolRt>,
    ring_gen: u64,
    ring: Arc<ring::Ring>,
    /// `[server][k]` → backend slab index.
    conns: Vec<Vec<Option<usize>>>,
}

/// What a queued reply is waiting for and how it is written out.
enum SlotKind {
    /// The reply is complete in `buf`.
    Ready,
    /// One backend reply (or, for quiet meta, everything before `MN`).
    Single,
    /// A `noreply` request: the backend's reply is dropped unless it is an error.
    NoReply,
    /// A get split over servers: merged in the client's key order.
    Multi(Box<MultiGet>),
    /// flush_all sent to every server.
    Broadcast { frags: Vec<Vec<u8>>, noreply: bool },
    /// A Redis multi-key command split over servers.
    RedisMulti(Box<RedisMulti>),
}

struct RedisMulti {
    kind: Kind,
    nkeys: usize,
    /// Per fragment: positions of its keys among the command's keys.
    positions: Vec<Vec<usize>>,
    frags: Vec<Vec<u8>>,
}

struct Slot {
    remaining: u32,
    kind: SlotKind,
    buf: Vec<u8>,
}

struct MultiGet {
    keys: Vec<u8>,
    /// (start in `keys`, length, fragment) per requested key, in request order.
    spans: Vec<(u32, u32, u16)>,
    frags: Vec<Vec<u8>>,
}

struct Client {
    stream: Stream,
    gen: u32,
    pool: usize,
    rt: Arc<PoolRt>,
    rbuf: ReadBuf,
    wbuf: Vec<u8>,
    wpos: usize,
    slots: VecDeque<Slot>,
    head_seq: u64,
    swallow: usize,
    /// Close once every reply is written (quit, EOF, fatal parse error).
    closing: bool,
    eof: bool,
    paused: bool,
    dirty: bool,
    /// False until the client sent the pool's password (`client_auth`, or for a Redis pool
    /// also `redis_auth`).
    authed: bool,
    /// Where parsing of a partly received RESP command stopped.
    progress: resp::Progress,
}

impl Client {
    fn unsent(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Whether the next request in `rbuf` may be parsed now: not once the client is closing
    /// (the rest is dropped), nor while it is too far behind reading its replies (paused
    /// until it catches up).
    fn may_parse(&mut self, rbuf: &mut ReadBuf) -> bool {
        if self.closing {
            rbuf.clear();
            return false;
        }
        if self.slots.len() >= MAX_SLOTS || self.unsent() >= MAX_UNSENT {
            self.paused = true;
            return false;
        }
        true
    }

    /// Moves finished replies at the head of the queue to the write buffer.
    fn drain_ready(&mut self) {
        while let Some(front) = self.slots.front() {
            if front.remaining > 0 {
                break;
            }
            let slot = self.slots.pop_front().expect("front exists");
            self.head_seq += 1;
            finish_slot(slot, &mut self.wbuf);
        }
    }

    fn reply(&mut self, bytes: &[u8]) {
        if self.slots.is_empty() {
            self.wbuf.extend_from_slice(bytes);
        } else {
            self.slots.push_back(Slot {
                remaining: 0,
                kind: SlotKind::Ready,
                buf: bytes.to_vec(),
            });
        }
    }

    fn push(&mut self, remaining: u32, kind: SlotKind) -> u64 {
        let seq = self.head_seq + self.slots.len() as u64;
        self.slots.push_back(Slot {
            remaining,
            kind,
            buf: Vec::new(),
        });
        seq
    }
}

fn finish_slot(slot: Slot, out: &mut Vec<u8>) {
    match slot.kind {
        SlotKind::Ready | SlotKind::Single | SlotKind::NoReply => out.extend_from_slice(&slot.buf),
        SlotKind::Multi(m) => merge_get(&m, out),
        SlotKind::RedisMulti(m) => {
            let parts: Vec<(&[usize], &[u8])> = m
                .positions
                .iter()
                .zip(&m.frags)
                .map(|(p, f)| (&p[..], &f[..]))
                .collect();
            let mark = out.len();
            if redis_cmd::merge(m.kind, m.nkeys, &parts, out).is_err() {
                out.truncate(mark);
                out.extend_from_slice(b"-ERR invalid reply from server\r\n");
            }
        }
        SlotKind::Broadcast { frags, noreply } => {
            match frags.iter().find(|f| f.as_slice() != b"OK\r\n") {
                Some(bad) if !noreply || is_error_reply(bad) => out.extend_from_slice(bad),
                Some(_) => {}
                None if noreply => {}
                None => out.extend_from_slice(b"OK\r\n"),
            }
        }
    }
}

/// Merges the fragments of a split get in the order the client asked for the keys. A
/// failed fragment fails the whole request, as nutcracker does.
fn merge_get(m: &MultiGet, out: &mut Vec<u8>) {
    if let Some(bad) = m.frags.iter().find(|f| !is_get_reply(f)) {
        out.extend_from_slice(bad);
        return;
    }
    let items: Vec<_> = m.frags.iter().map(|f| get_items(f)).collect();
    let mut cursor = vec![0usize; m.frags.len()];
    for &(start, len, frag) in &m.spans {
        let f = usize::from(frag);
        let key = &m.keys[start as usize..(start + len) as usize];
        if let Some(item) = items[f].get(cursor[f]) {
            if &m.frags[f][item.key.clone()] == key {
                out.extend_from_slice(&m.frags[f][item.item.clone()]);
                cursor[f] += 1;
            }
        }
    }
    // Items a server sent that did not line up with a key (should not happen) still go out.
    for (f, list) in items.iter().enumerate() {
        for item in &list[cursor[f]..] {
            out.extend_from_slice(&m.frags[f][item.item.clone()]);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// One request in flight on a backend connection.
struct Pending {
    client: u32,
    gen: u32,
    seq: u64,
    frag: u16,
    /// Quiet meta command followed by `mn`: the reply is everything up to `MN`.
    quiet: bool,
    at: Instant,
    bytes: u32,
    /// Several clients' gets merged into one line: the reply is split between them.
    batch: Option<Box<GetBatch>>,
}

impl Pending {
    /// Each request this entry answers: itself, or every member of its merged get.
    fn targets(&self) -> impl Iterator<Item = Pending> + '_ {
        let lone = self
            .batch
            .is_none()
            .then(|| self.target(self.client, self.gen, self.seq, self.frag));
        let merged = self
            .batch
            .iter()
            .flat_map(|b| b.members())
            .map(|m| self.target(m.client, m.gen, m.seq, m.frag));
        lone.into_iter().chain(merged)
    }

    fn target(&self, client: u32, gen: u32, seq: u64, frag: u16) -> Pending {
        Pending {
            client,
            gen,
            seq,
            frag,
            quiet: self.quiet,
            at: self.at,
            bytes: 0,
            batch: None,
        }
    }
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

struct Backend {
    stream: Stream,
    rt: Arc<PoolRt>,
    server: usize,
    /// `(pool index, connection index)` in the worker's current pools; None once retired
    /// by a reload (it then closes when its queue is empty).
    place: Option<(usize, usize)>,
    connecting: bool,
    rbuf: ReadBuf,
    framer: ReplyFramer,
    wbuf: Vec<u8>,
    wpos: usize,
    pending: VecDeque<Pending>,
    dirty: bool,
    open_get: Option<OpenGet>,
    /// The keys of `open_get` as they go on the line, and its requests; the storage is
    /// reused from batch to batch.
    get_line: Vec<u8>,
    batch: GetBatch,
    /// Where split replies of a merged get are assembled.
    scratch: Vec<u8>,
}

enum Why {
    Eof,
    Io(io::Error),
    Timeout,
    Protocol,
    /// The backend refused the AUTH or SELECT the router sent for the pool.
    Handshake(String),
}

pub struct Worker {
    id: usize,
    poll: Poll,
    rx: Receiver<Control>,
    peers: Vec<Peer>,
    next_worker: usize,
    shared: Arc<Shared>,
    globals: Arc<Globals>,
    pools: Vec<PoolLocal>,
    listeners: Slab<ListenerLocal>,
    clients: Slab<Client>,
    backends: Slab<Backend>,
    next_gen: u32,
    dirty_backends: Vec<usize>,
    dirty_clients: Vec<usize>,
    /// Clients that still had data after their turn.
    read_again: Vec<(usize, bool)>,
    /// Read buffers of idle clients, shared by this worker's connections.
    read_pool: Vec<Vec<u8>>,
    limits: Limits,
    now: Instant,
}

impl Worker {
    pub fn new(
        id: usize,
        poll: Poll,
        rx: Receiver<Control>,
        peers: Vec<Peer>,
        shared: Arc<Shared>,
        globals: Arc<Globals>,
    ) -> Worker {
        Worker {
            id,
            poll,
            rx,
            next_worker: id,
            peers,
            shared,
            globals,
            pools: Vec::new(),
            listeners: Slab::new(),
            clients: Slab::new(),
            backends: Slab::new(),
            next_gen: 0,
            dirty_backends: Vec::new(),
            dirty_clients: Vec::new(),
            read_again: Vec::new(),
            read_pool: Vec::new(),
            // The backends enforce their own item size; the router only bounds what it buffers.
            limits: Limits {
                item_size_max: 64 * 1024 * 1024,
                ..Limits::default()
            },
            now: Instant::now(),
        }
    }

    pub fn new_poll() -> io::Result<(Poll, Arc<Waker>)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok((poll, waker))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut timeout = None;
        loop {
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    crate::log::warn(&format!("worker {}: poll failed: {e}", self.id));
                    return;
                }
            }
            self.now = Instant::now();
            for ev in events.iter() {
                let t = ev.token();
                if t == WAKER {
                    self.control();
                    continue;
                }
                let idx = t.0 >> 2;
                match t.0 & 3 {
                    KIND_CLIENT => {
                        if ev.is_writable() {
                            self.mark_client(idx);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.client_readable(idx, ev.is_read_closed() || ev.is_error());
                        }
                    }
                    KIND_BACKEND => {
                        if ev.is_writable() || ev.is_error() {
                            self.backend_writable(idx);
                        }
                        if ev.is_readable() || ev.is_read_closed() {
                            self.backend_readable(idx, ev.is_read_closed());
                        }
                    }
                    _ => self.accept(idx),
                }
            }
            for (ci, drain) in std::mem::take(&mut self.read_again) {
                self.client_readable(ci, drain);
            }
            self.flush_all();
            timeout = self.check_timeouts();
            if !self.read_again.is_empty() {
                timeout = Some(Duration::ZERO);
            }
        }
    }

    fn flush_all(&mut self) {
        loop {
            while let Some(b) = self.dirty_backends.pop() {
                self.flush_backend(b);
            }
            match self.dirty_clients.pop() {
                Some(c) => self.flush_client(c),
                None if self.dirty_backends.is_empty() => break,
                None => {}
            }
        }
    }

    // ---- control ----

    fn control(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Control::Reload { shared, listeners } => self.reload(shared, listeners),
                Control::Adopt { stream, listen_key } => self.adopt(stream, &listen_key),
            }
        }
    }

    fn reload(&mut self, shared: Arc<Shared>, updates: Vec<ListenerUpdate>) {
        let mut updates: HashMap<String, ListenerUpdate> =
            updates.into_iter().map(|u| (u.key.clone(), u)).collect();
        // Listeners: keep the ones still configured, drop the rest, add the new ones.
        let ids: Vec<usize> = self.listeners.iter().map(|(i, _)| i).collect();
        for i in ids {
            let key = self.listeners[i].key.clone();
            match updates.get_mut(&key) {
                Some(u) if u.new.is_none() => self.listeners[i].pool = u.pool,
                _ => {
                    let mut l = self.listeners.remove(i);
                    l.listener.unwatch(&self.poll);
                }
            }
        }
        for (key, u) in updates.drain() {
            if let Some(mut listener) = u.new {
                let entry = self.listeners.vacant_entry();
                let t = token(KIND_LISTENER, entry.key());
                // One worker accepts on each listen address (see `accept`); the others keep
                // the handle only so a reload can tell which addresses are unchanged.
                if acceptor_of(&key, self.peers.len()) != self.id {
                    entry.insert(ListenerLocal {
                        key,
                        pool: u.pool,
                        listener,
                    });
                    continue;
                }
                if let Err(e) = listener.watch(&self.poll, t) {
                    crate::log::warn(&format!(
                        "worker {}: cannot watch listener {key}: {e}",
                        self.id
                    ));
                    continue;
                }
                entry.insert(ListenerLocal {
                    key,
                    pool: u.pool,
                    listener,
                });
            }
        }
        // Pools: clients follow their listen address into the new generation.
        let new_index: HashMap<String, usize> = shared
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.listen_key(), i))
            .collect();
        let id = self.id;
        let mut to_close = Vec::new();
        for (ci, c) in self.clients.iter_mut() {
            match new_index.get(&c.rt.listen_key()) {
                Some(&i) if shared.pools[i].cfg.redis != c.rt.cfg.redis => {
                    // The listen address changed protocol: this stream cannot follow.
                    c.closing = true;
                    to_close.push(ci);
                }
                Some(&i) => {
                    let new_rt = shared.pools[i].clone();
                    let (old, new) = (&c.rt.cfg, &new_rt.cfg);
                    if old.client_auth != new.client_auth || old.redis_auth != new.redis_auth {
                        // New passwords: a client authenticated under the old ones must
                        // authenticate again.
                        c.authed = !redis_local::needs_auth(new);
                    }
                    c.rt.clients
                        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    c.rt.counters[id].pool.client_connections.add(-1);
                    new_rt
                        .clients
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    new_rt.counters[id].pool.client_connections.add(1);
                    c.rt = new_rt;
                    c.pool = i;
                }
                None => {
                    c.closing = true;
                    to_close.push(ci);
                }
            }
        }
        let retired: Vec<usize> = self.backends.iter().map(|(b, _)| b).collect();
        for b in retired {
            self.backends[b].place = None;
            if self.backends[b].pending.is_empty() {
                self.close_backend(b);
            }
        }
        self.pools = shared
            .pools
            .iter()
            .map(|rt| PoolLocal {
                rt: rt.clone(),
                ring_gen: 0,
                ring: Arc::new(rt.cfg.ring()),
                conns: vec![
                    vec![None; rt.cfg.server_connections.max(1) as usize];
                    rt.servers.len()
                ],
            })
            .collect();
        self.shared = shared;
        for ci in to_close {
            self.mark_client(ci);
        }
        for p in 0..self.pools.len() {
            if self.pools[p].rt.cfg.preconnect {
                for s in 0..self.pools[p].conns.len() {
                    for k in 0..self.pools[p].conns[s].len() {
                        let _ = self.backend_for(p, s, k);
                    }
                }
            }
        }
    }

    // ---- clients ----

    /// Accepts every pending connection. One worker accepts for each listen address and
    /// keeps the connection unless it already has `HANDOFF_SLACK_*` more clients than
    /// another worker, which then gets it (counting connections handed over but not yet
    /// adopted). Long-lived memcached connections spread over all workers; short-lived
    /// Redis ones (PHP's connect, AUTH, GET, close) stay on one thread with no hand-over,
    /// which measured 7% more connections/s than dealing them out (bench/compare-redis).
    fn accept(&mut self, li: usize) {
        loop {
            let Some(l) = self.listeners.get(li) else {
                return;
            };
            let pool = l.pool;
            match l.listener.accept() {
                Ok(stream) => {
                    let slack = if self.pools[pool].rt.cfg.redis {
                        HANDOFF_SLACK_REDIS
                    } else {
                        HANDOFF_SLACK_MEMCACHED
                    };
                    let target = self.pick_worker(slack);
                    if target == self.id {
                        self.add_client(stream, pool);
                    } else {
                        let (tx, waker) = &self.peers[target];
                        let key = self.pools[pool].rt.listen_key();
                        self.globals.handed_over[target].fetch_add(1, Relaxed);
                        if tx
                            .send(Control::Adopt {
                                stream,
                                listen_key: key,
                            })
                            .is_ok()
                        {
                            let _ = waker.wake();
                        } else {
                            self.globals.handed_over[target].fetch_sub(1, Relaxed);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    crate::log::warn(&format!("accept failed: {e}"));
                    return;
                }
            }
        }
    }

    /// This worker, or the least loaded one when this one has `slack` more clients.
    fn pick_worker(&mut self, slack: i64) -> usize {
        let g = &self.globals;
        let loads: Vec<i64> = (0..self.peers.len())
            .map(|w| g.per_worker[w].curr_connections.get() + g.handed_over[w].load(Relaxed))
            .collect();
        let target = choose_worker(&loads, self.id, self.next_worker, slack);
        if target != self.id {
            self.next_worker = target;
        }
        target
    }

    fn adopt(&mut self, stream: Stream, listen_key: &str) {
        // Another worker accepted it, possibly under the previous configuration.
        self.globals.handed_over[self.id].fetch_sub(1, Relaxed);
        if let Some(pool) = self
            .pools
            .iter()
            .position(|p| p.rt.listen_key() == listen_key)
        {
            self.add_client(stream, pool);
        }
    }

    fn add_client(&mut self, mut stream: Stream, pool: usize) {
        let rt = self.pools[pool].rt.clone();
        let limit = rt.cfg.client_connections;
        let n = rt
            .clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if limit > 0 && n >= i64::from(limit) {
            rt.clients
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            rt.counters[self.id].pool.client_err.add(1);
            return;
        }
        let entry = self.clients.vacant_entry();
        if stream
            .register(self.poll.registry(), token(KIND_CLIENT, entry.key()))
            .is_err()
        {
            rt.clients
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.next_gen = self.next_gen.wrapping_add(1);
        rt.counters[self.id].pool.client_connections.add(1);
        let g = &self.globals.per_worker[self.id];
        g.total_connections.add(1);
        g.curr_connections.add(1);
        entry.insert(Client {
            stream,
            gen: self.next_gen,
            pool,
            rt,
            rbuf: ReadBuf::default(),
            wbuf: Vec::new(),
            wpos: 0,
            slots: VecDeque::new(),
            head_seq: 0,
            swallow: 0,
            closing: false,
            eof: false,
            paused: false,
            dirty: false,
            authed: !redis_local::needs_auth(&self.pools[pool].rt.cfg),
            progress: resp::Progress::default(),
        });
    }

    fn mark_client(&mut self, ci: usize) {
        if let Some(c) = self.clients.get_mut(ci) {
            if !c.dirty {
                c.dirty = true;
                self.dirty_clients.push(ci);
            }
        }
    }

    /// Reads and parses until the socket is empty. `drain`: keep reading until `WouldBlock`
    /// or EOF even after a short read (the peer closed, or events were skipped while paused).
    fn client_readable(&mut self, ci: usize, drain: bool) {
        for _ in 0..MAX_READS_PER_TURN {
            let Some(c) = self.clients.get_mut(ci) else {
                return;
            };
            if c.paused || c.closing {
                return;
            }
            if !c.rbuf.has_storage() {
                if let Some(storage) = self.read_pool.pop() {
                    c.rbuf.set_storage(storage);
                }
            }
            match c.rbuf.read_from(&mut c.stream) {
                Ok((0, _)) => {
                    c.eof = true;
                    c.closing = true;
                    self.mark_client(ci);
                    return;
                }
                Ok((_, more)) => {
                    self.parse_client(ci);
                    // Idle connections hold no read buffer: it goes back to the pool.
                    if let Some(c) = self.clients.get_mut(ci) {
                        if let Some(storage) = c.rbuf.take_storage() {
                            if self.read_pool.len() < READ_POOL_MAX {
                                self.read_pool.push(storage);
                            }
                        }
                    }
                    if !more && !drain {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_client(ci, true);
                    return;
                }
            }
        }
        // A client that keeps its socket full gets another turn after everyone else.
        self.read_again.push((ci, drain));
    }

    fn parse_client(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if c.rt.cfg.redis {
            return self.parse_client_resp(ci);
        }
        let mut rbuf = std::mem::take(&mut c.rbuf);
        loop {
            let c = &mut self.clients[ci];
            if !c.may_parse(&mut rbuf) {
                break;
            }
            if c.swallow > 0 {
                let n = c.swallow.min(rbuf.len());
                rbuf.consume(n);
                c.swallow -= n;
                if c.swallow > 0 {
                    break;
                }
                continue;
            }
            if rbuf.is_empty() {
                break;
            }
            let data = rbuf.filled();
            match proto::parse(data, &self.limits) {
                Parse::Incomplete { total } => {
                    if let Some(t) = total {
                        rbuf.reserve_total(t);
                    }
                    break;
                }
                Parse::Error {
                    reply,
                    consumed,
                    swallow,
                    close,
                    ..
                } => {
                    c.reply(reply);
                    c.swallow = swallow;
                    if close {
                        c.closing = true;
                    }
                    rbuf.consume(consumed);
                    self.mark_client(ci);
                }
                Parse::Request(req, n) => {
                    let pool = c.pool;
                    if c.authed {
                        self.route(ci, pool, req, &data[..n]);
                    } else {
                        let reply = authenticate(&req, c.rt.cfg.client_auth.as_deref());
                        c.authed = reply == proto::reply::STORED;
                        c.reply(reply);
                        self.mark_client(ci);
                    }
                    rbuf.consume(n);
                }
            }
        }
        if let Some(c) = self.clients.get_mut(ci) {
            c.rbuf = rbuf;
        }
    }

    fn parse_client_resp(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let mut rbuf = std::mem::take(&mut c.rbuf);
        loop {
            let c = &mut self.clients[ci];
            if !c.may_parse(&mut rbuf) {
                break;
            }
            if rbuf.is_empty() {
                break;
            }
            let limits = if c.authed {
                &RESP_LIMITS
            } else {
                &RESP_LIMITS_UNAUTH
            };
            let data = rbuf.filled();
            match resp::parse_request_resume(data, limits, &mut c.progress) {
                RespParse::Incomplete { .. } if rbuf.len() > MAX_QUERY_BUFFER => {
                    // redis-server's client-query-buffer-limit: the same answer, a close.
                    crate::log::warn("client closed: query buffer over 1 GB");
                    c.closing = true;
                    rbuf.clear();
                    self.mark_client(ci);
                    break;
                }
                RespParse::Incomplete { total } => {
                    if let Some(t) = total {
                        rbuf.reserve_total(t);
                    }
                    break;
                }
                RespParse::Skip(n) => rbuf.consume(n),
                RespParse::Error { reply, close } => {
                    c.reply(reply);
                    // redis-server always closes after a protocol error; where the bad
                    // request ends is unknown, so nothing after it can be parsed.
                    c.closing = close;
                    rbuf.clear();
                    self.mark_client(ci);
                    break;
                }
                RespParse::Request(req, n) => {
                    self.route_redis(ci, &req);
                    rbuf.consume(n);
                }
            }
        }
        if let Some(c) = self.clients.get_mut(ci) {
            c.rbuf = rbuf;
        }
    }

    fn flush_client(&mut self, ci: usize) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.dirty = false;
        while c.wpos < c.wbuf.len() {
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => {
                    self.close_client(ci, true);
                    return;
                }
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close_client(ci, true);
                    return;
                }
            }
        }
        if c.wpos == c.wbuf.len() {
            c.wbuf.clear();
            c.wpos = 0;
            if c.wbuf.capacity() > 16 * 1024 {
                c.wbuf = Vec::new();
            }
            if c.closing && c.slots.is_empty() {
                self.close_client(ci, false);
                return;
            }
        }
        if c.paused && c.slots.len() < MAX_SLOTS / 2 && c.unsent() < MAX_UNSENT / 2 {
            c.paused = false;
            self.parse_client(ci);
            self.client_readable(ci, true);
        }
    }

    fn close_client(&mut self, ci: usize, error: bool) {
        if !self.clients.contains(ci) {
            return;
        }
        // Closing the socket removes it from epoll: no deregister call needed.
        let mut c = self.clients.remove(ci);
        // The read buffer goes back to the pool: freeing 16 KB per short-lived connection
        // makes the allocator hand memory back to the kernel (madvise, TLB shootdowns).
        c.rbuf.clear();
        if let Some(storage) = c.rbuf.take_storage() {
            if self.read_pool.len() < READ_POOL_MAX {
                self.read_pool.push(storage);
            }
        }
        let counters = &c.rt.counters[self.id].pool;
        counters.client_connections.add(-1);
        if error {
            counters.client_err.add(1);
        } else if c.eof {
            counters.client_eof.add(1);
        }
        c.rt.clients
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.globals.per_worker[self.id].curr_connections.add(-1);
    }

    fn local_reply(&mut self, ci: usize, bytes: &[u8]) {
        if let Some(c) = self.clients.get_mut(ci) {
            c.reply(bytes);
        }
        self.mark_client(ci);
    }

    // ---- routing ----

    fn route(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        match req {
            Request::Get { keys, cas } => {
                let cmd: &[u8] = if cas { b"gets" } else { b"get" };
                self.route_get(ci, p, raw, cmd, keys);
            }
            Request::Gat { keys, .. } => {
                // "gat <exptime>" exactly as the client wrote it.
                let line = first_line(raw);
                let mut toks = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
                let (c0, c1) = (toks.next().unwrap_or(b"gat"), toks.next().unwrap_or(b"0"));
                let mut cmd = c0.to_vec();
                cmd.push(b' ');
                cmd.extend_from_slice(c1);
                self.route_get(ci, p, raw, &cmd, keys);
            }
            Request::Store { key, noreply, .. }
            | Request::Delete { key, noreply }
            | Request::Arith { key, noreply, .. }
            | Request::Touch { key, noreply, .. } => {
                if noreply {
                    if let Some((line, rest)) = strip_noreply(raw) {
                        self.route_key(
                            ci,
                            p,
                            key,
                            &[line, b"\r\n", rest],
                            SlotKind::NoReply,
                            false,
                        );
                        return;
                    }
                }
                self.route_key(ci, p, key, &[raw], SlotKind::Single, false);
            }
            Request::MetaGet { key, flags, .. }
            | Request::MetaSet { key, flags, .. }
            | Request::MetaDelete { key, flags }
            | Request::MetaArithmetic { key, flags, .. } => {
                if flags.noreply() {
                    // The backend decides what q hides; `mn` marks where its answer ends.
                    self.route_key(
                        ci,
                        p,
                        key.as_bytes(),
                        &[raw, b"mn\r\n"],
                        SlotKind::Single,
                        true,
                    );
                } else {
                    self.route_key(ci, p, key.as_bytes(), &[raw], SlotKind::Single, false);
                }
            }
            Request::MetaDebug { key } => {
                self.route_key(ci, p, key.as_bytes(), &[raw], SlotKind::Single, false)
            }
            Request::FlushAll { noreply, .. } => self.broadcast(ci, p, raw, noreply),
            Request::MetaNoop => self.local_reply(ci, b"MN\r\n"),
            Request::Version => self.local_reply(ci, VERSION),
            Request::Verbosity { noreply, .. } => {
                if !noreply {
                    self.local_reply(ci, b"OK\r\n")
                }
            }
            Request::Stats { .. } => {
                let text = crate::stats::text(&self.shared, &self.globals, p);
                self.local_reply(ci, &text);
            }
            Request::Quit => {
                if let Some(c) = self.clients.get_mut(ci) {
                    c.closing = true;
                }
                self.mark_client(ci);
            }
            Request::Shutdown(_) => self.local_reply(ci, proto::reply::ERROR_SHUTDOWN_NOT_ENABLED),
            Request::CacheMemlimit { .. } | Request::Admin { .. } => {
                self.local_reply(ci, proto::reply::ERROR)
            }
        }
    }

    /// Executes one command of a Redis pool client: answered here, forwarded to the server
    /// owning its keys, or split per server.
    fn route_redis(&mut self, ci: usize, req: &RespRequest<'_>) {
        let c = &mut self.clients[ci];
        let p = c.pool;
        if req.name().eq_ignore_ascii_case(b"hello") {
            let mut out = Vec::new();
            c.authed = redis_local::hello(&c.rt.cfg, req, c.authed, &mut out);
            return self.local_reply(ci, &out);
        }
        // Like redis-server: unknown commands and arity errors first, then authentication.
        let plan = match redis_cmd::classify(req) {
            Ok(plan) => plan,
            Err(reply) => return self.local_reply(ci, reply),
        };
        let kind = plan.kind();
        if !c.authed && !matches!(kind, Kind::Local(Local::Auth | Local::Quit)) {
            return self.local_reply(ci, redis_cmd::ERR_NOAUTH);
        }
        match kind {
            Kind::Local(Local::Auth) => {
                let reply = redis_local::auth(&c.rt.cfg, req);
                if reply == redis_local::OK {
                    c.authed = true;
                }
                self.local_reply(ci, reply);
            }
            Kind::Local(Local::Quit) => {
                c.reply(b"+OK\r\n");
                c.closing = true;
                self.mark_client(ci);
            }
            Kind::Local(Local::Select) => {
                self.local_reply(ci, redis_cmd::select_reply(req.arg(1).unwrap_or_default()))
            }
            Kind::Local(_) => {
                let mut out = Vec::new();
                redis_cmd::answer_local(&plan, req, &mut out);
                self.local_reply(ci, &out);
            }
            Kind::AnyServer => {
                let rt = &self.pools[p].rt;
                let s = (0..rt.servers.len())
                    .find(|&s| !rt.servers[s].is_ejected())
                    .unwrap_or(0);
                self.forward_redis(ci, p, s, req);
            }
            Kind::Keyed => {
                if self.pools[p].rt.servers.is_empty() {
                    return self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
                }
                let mut none = false;
                let server = plan.server(req, |k| {
                    self.server_for(p, k).unwrap_or_else(|| {
                        none = true;
                        0
                    })
                });
                match server {
                    _ if none => self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER)),
                    Ok(s) => self.forward_redis(ci, p, s, req),
                    Err(reply) => self.local_reply(ci, reply),
                }
            }
            Kind::MultiGet | Kind::MultiSum | Kind::MultiSet => {
                let mut none = false;
                let parts = redis_cmd::split_multi(&plan, req, |k| {
                    self.server_for(p, k).unwrap_or_else(|| {
                        none = true;
                        0
                    })
                });
                if none {
                    return self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
                }
                if parts.len() == 1 {
                    return self.forward_redis(ci, p, parts[0].server, req);
                }
                let mut backends = Vec::with_capacity(parts.len());
                for part in &parts {
                    match self.backend_for(p, part.server, ci) {
                        Ok(b) => backends.push(b),
                        Err(msg) => return self.fail_forward(ci, p, &msg),
                    }
                }
                self.pools[p].rt.counters[self.id]
                    .pool
                    .fragments
                    .add(parts.len() as i64);
                let mut m = RedisMulti {
                    kind,
                    nkeys: plan.key_count(),
                    positions: Vec::with_capacity(parts.len()),
                    frags: vec![Vec::new(); parts.len()],
                };
                let mut frames = Vec::with_capacity(parts.len());
                for part in parts {
                    m.positions.push(part.positions);
                    frames.push(part.bytes);
                }
                let c = &mut self.clients[ci];
                let seq = c.push(frames.len() as u32, SlotKind::RedisMulti(Box::new(m)));
                let gen = c.gen;
                for (f, (frame, b)) in frames.iter().zip(backends).enumerate() {
                    self.enqueue(b, &[frame], ci, gen, seq, f as u16, false);
                }
            }
        }
    }

    /// Sends a command unchanged (inline commands as multibulk) to server `s`.
    fn forward_redis(&mut self, ci: usize, p: usize, s: usize, req: &RespRequest<'_>) {
        let b = match self.backend_for(p, s, ci) {
            Ok(b) => b,
            Err(msg) => return self.fail_forward(ci, p, &msg),
        };
        let c = &mut self.clients[ci];
        let seq = c.push(1, SlotKind::Single);
        let gen = c.gen;
        match req.raw_multibulk() {
            Some(raw) => self.enqueue(b, &[raw], ci, gen, seq, 0, false),
            None => {
                let mut frame = Vec::new();
                req.write_multibulk(&mut frame);
                self.enqueue(b, &[&frame], ci, gen, seq, 0, false);
            }
        }
    }

    fn server_for(&mut self, p: usize, key: &[u8]) -> Option<usize> {
        let pl = &mut self.pools[p];
        if let Some((g, r)) = pl.rt.ring_if_newer(pl.ring_gen) {
            pl.ring_gen = g;
            pl.ring = r;
        }
        pl.ring.server_for(key)
    }

    fn route_key(
        &mut self,
        ci: usize,
        p: usize,
        key: &[u8],
        parts: &[&[u8]],
        kind: SlotKind,
        quiet: bool,
    ) {
        let Some(s) = self.server_for(p, key) else {
            self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
            return;
        };
        let b = match self.backend_for(p, s, ci) {
            Ok(b) => b,
            Err(msg) => {
                self.fail_forward(ci, p, &msg);
                return;
            }
        };
        let c = &mut self.clients[ci];
        let seq = c.push(1, kind);
        let gen = c.gen;
        self.enqueue(b, parts, ci, gen, seq, 0, quiet);
    }

    fn route_get(&mut self, ci: usize, p: usize, raw: &[u8], cmd: &[u8], keys: proto::Keys<'_>) {
        // get/gets (not gat) may share one line with other clients' gets.
        let plain = match cmd {
            b"get" => Some(false),
            b"gets" => Some(true),
            _ => None,
        };
        // First pass without allocating: usually every key is on one server and the
        // request goes out exactly as the client wrote it.
        let mut first = None;
        let mut same = true;
        for k in keys {
            let Ok(k) = k else {
                self.local_reply(ci, proto::reply::CLIENT_ERROR_BAD_FORMAT);
                return;
            };
            let Some(s) = self.server_for(p, k) else {
                self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
                return;
            };
            match first {
                None => first = Some(s),
                Some(f) if f != s => same = false,
                Some(_) => {}
            }
        }
        let Some(s0) = first else {
            self.local_reply(ci, proto::reply::ERROR);
            return;
        };
        if same {
            let b = match self.backend_for(p, s0, ci) {
                Ok(b) => b,
                Err(msg) => {
                    self.fail_forward(ci, p, &msg);
                    return;
                }
            };
            let c = &mut self.clients[ci];
            let seq = c.push(1, SlotKind::Single);
            let gen = c.gen;
            match plain {
                Some(cas) => self.enqueue_get(b, cas, keys.flatten(), ci, gen, seq, 0),
                None => self.enqueue(b, &[raw], ci, gen, seq, 0, false),
            }
            return;
        }
        let mut list: Vec<(&[u8], usize)> = Vec::with_capacity(16);
        for k in keys.flatten() {
            let s = self.server_for(p, k).unwrap_or(s0);
            list.push((k, s));
        }
        // Split: one fragment per server, in order of first appearance.
        let mut servers: Vec<usize> = Vec::new();
        let mut m = MultiGet {
            keys: Vec::new(),
            spans: Vec::with_capacity(list.len()),
            frags: Vec::new(),
        };
        for &(k, s) in &list {
            let f = match servers.iter().position(|&x| x == s) {
                Some(f) => f,
                None => {
                    servers.push(s);
                    servers.len() - 1
                }
            };
            m.spans
                .push((m.keys.len() as u32, k.len() as u32, f as u16));
            m.keys.extend_from_slice(k);
        }
        let mut backends = Vec::with_capacity(servers.len());
        for &s in &servers {
            match self.backend_for(p, s, ci) {
                Ok(b) => backends.push(b),
                Err(msg) => {
                    self.fail_forward(ci, p, &msg);
                    return;
                }
            }
        }
        m.frags = vec![Vec::new(); servers.len()];
        // gat/gats lines are built here; plain gets join the servers' merged get lines.
        let mut lines: Vec<Vec<u8>> = Vec::new();
        if plain.is_none() {
            lines = vec![cmd.to_vec(); servers.len()];
            for (&(k, _), &(_, _, f)) in list.iter().zip(m.spans.iter()) {
                let l = &mut lines[usize::from(f)];
                l.push(b' ');
                l.extend_from_slice(k);
            }
        }
        self.pools[p].rt.counters[self.id]
            .pool
            .fragments
            .add(servers.len() as i64);
        let c = &mut self.clients[ci];
        let seq = c.push(servers.len() as u32, SlotKind::Multi(Box::new(m)));
        let gen = c.gen;
        for (f, b) in backends.into_iter().enumerate() {
            match plain {
                Some(cas) => {
                    let frag_keys = list
                        .iter()
                        .filter(|&&(_, s)| s == servers[f])
                        .map(|&(k, _)| k);
                    self.enqueue_get(b, cas, frag_keys, ci, gen, seq, f as u16);
                }
                None => {
                    let line = &mut lines[f];
                    line.extend_from_slice(b"\r\n");
                    self.enqueue(b, &[line], ci, gen, seq, f as u16, false);
                }
            }
        }
    }

    /// flush_all goes to every live server of the pool; OK when all say OK.
    fn broadcast(&mut self, ci: usize, p: usize, raw: &[u8], noreply: bool) {
        let rt = self.pools[p].rt.clone();
        let live: Vec<usize> = (0..rt.servers.len())
            .filter(|&s| !rt.servers[s].is_ejected())
            .collect();
        let stripped = if noreply { strip_noreply(raw) } else { None };
        let mut backends = Vec::new();
        for &s in &live {
            match self.backend_for(p, s, ci) {
                Ok(b) => backends.push(b),
                Err(msg) => {
                    self.local_reply(ci, &msg);
                    return;
                }
            }
        }
        if backends.is_empty() {
            self.local_reply(ci, &self.pool_error(p, NO_SERVER));
            return;
        }
        let c = &mut self.clients[ci];
        let seq = c.push(
            backends.len() as u32,
            SlotKind::Broadcast {
                frags: vec![Vec::new(); backends.len()],
                noreply,
            },
        );
        let gen = c.gen;
        for (f, b) in backends.into_iter().enumerate() {
            match stripped {
                Some((line, rest)) => {
                    self.enqueue(b, &[line, b"\r\n", rest], ci, gen, seq, f as u16, false)
                }
                None => self.enqueue(b, &[raw], ci, gen, seq, f as u16, false),
            }
        }
    }

    // ---- backends ----

    /// An error reply made up by the router, in pool `p`'s protocol.
    fn pool_error(&self, p: usize, msg: &str) -> Vec<u8> {
        error_reply(self.pools[p].rt.cfg.redis, msg)
    }

    /// A request that cannot be forwarded: count it and answer the client at once.
    fn fail_forward(&mut self, ci: usize, p: usize, reply: &[u8]) {
        self.pools[p].rt.counters[self.id].pool.forward_error.add(1);
        self.local_reply(ci, reply);
    }

    /// A connection to server `s` of pool `p`, connecting when needed. With several
    /// `server_connections` a client always uses the same one (`lane`: its index), so its
    /// requests to one server stay in order: a pipelined SET then GET must not race. `Err` is the error reply to answer. A Redis backend
    /// connection first authenticates and selects the pool's database; requests queued
    /// behind that wait for it.
    fn backend_for(&mut self, p: usize, s: usize, lane: usize) -> Result<usize, Vec<u8>> {
        let pl = &mut self.pools[p];
        let k = lane % pl.conns[s].len();
        if let Some(b) = pl.conns[s][k] {
            return Ok(b);
        }
        let rt = pl.rt.clone();
        let counters = &rt.counters[self.id].servers[s];
        match Stream::connect(&rt.servers[s].addr, rt.cfg.tcpkeepalive) {
            Ok(mut stream) => {
                let entry = self.backends.vacant_entry();
                let b = entry.key();
                if let Err(e) = stream.register(self.poll.registry(), token(KIND_BACKEND, b)) {
                    return Err(error_reply(rt.cfg.redis, &error_text(&e)));
                }
                counters.server_connections.add(1);
                let mut wbuf = Vec::new();
                let mut pending = VecDeque::new();
                if rt.cfg.redis {
                    let now = self.now;
                    let mut handshake = |args: &[&[u8]]| {
                        resp::write_command(&mut wbuf, args.len(), args.iter().copied());
                        pending.push_back(Pending {
                            client: HANDSHAKE,
                            gen: 0,
                            seq: 0,
                            frag: 0,
                            quiet: false,
                            at: now,
                            bytes: 0,
                            batch: None,
                        });
                    };
                    if let Some(pw) = &rt.cfg.redis_auth {
                        handshake(&[b"AUTH", pw.as_bytes()]);
                    }
                    if rt.cfg.redis_db != 0 {
                        let db = rt.cfg.redis_db.to_string();
                        handshake(&[b"SELECT", db.as_bytes()]);
                    }
                }
                entry.insert(Backend {
                    stream,
                    rt: rt.clone(),
                    server: s,
                    place: Some((p, k)),
                    connecting: true,
                    rbuf: ReadBuf::default(),
                    framer: ReplyFramer::new(rt.cfg.redis),
                    wbuf,
                    wpos: 0,
                    pending,
                    dirty: false,
                    open_get: None,
                    get_line: Vec::new(),
                    batch: GetBatch::default(),
                    scratch: Vec::new(),
                });
                self.pools[p].conns[s][k] = Some(b);
                Ok(b)
            }
            Err(e) => {
                counters.server_err.add(1);
                rt.record_failure(s);
                Err(error_reply(rt.cfg.redis, &error_text(&e)))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        b: usize,
        parts: &[&[u8]],
        ci: usize,
        gen: u32,
        seq: u64,
        frag: u16,
        quiet: bool,
    ) {
        let be = &mut self.backends[b];
        let bytes: usize = parts.iter().map(|p| p.len()).sum();
        for part in parts {
            be.wbuf.extend_from_slice(part);
        }
        if let Some(open) = &mut be.open_get {
            open.wbuf_after += bytes;
            open.pending_after += 1;
            if !open.barred.contains(&(ci as u32, gen)) {
                open.barred.push((ci as u32, gen));
            }
        }
        be.pending.push_back(Pending {
            client: ci as u32,
            gen,
            seq,
            frag,
            quiet,
            at: self.now,
            bytes: bytes as u32,
            batch: None,
        });
        let c = &be.rt.counters[self.id].servers[be.server];
        c.requests.add(1);
        c.request_bytes.add(bytes as i64);
        c.out_queue.add(1);
        c.out_queue_bytes.add(bytes as i64);
        if !be.dirty {
            be.dirty = true;
            self.dirty_backends.push(b);
        }
    }

    /// Queues a plain get/gets, merged into the backend's open get line when it may join
    /// (see get_batch.rs and [`OpenGet`]).
    #[allow(clippy::too_many_arguments)]
    fn enqueue_get<'k>(
        &mut self,
        b: usize,
        cas: bool,
        keys: impl Iterator<Item = &'k [u8]> + Clone,
        ci: usize,
        gen: u32,
        seq: u64,
        frag: u16,
    ) {
        let (nkeys, bytes) = keys
            .clone()
            .fold((0, 0), |(n, len), k| (n + 1, len + 1 + k.len()));
        let be = &self.backends[b];
        let joins = match &be.open_get {
            Some(o) => {
                o.cas == cas && be.batch.fits(nkeys, bytes) && !o.barred.contains(&(ci as u32, gen))
            }
            None => false,
        };
        if !joins {
            self.close_get(b);
            let be = &mut self.backends[b];
            be.get_line
                .extend_from_slice(if cas { b"gets" } else { b"get" });
            be.open_get = Some(OpenGet {
                cas,
                at: self.now,
                wbuf_after: 0,
                pending_after: 0,
                barred: Vec::new(),
            });
        }
        let be = &mut self.backends[b];
        for k in keys.clone() {
            be.get_line.push(b' ');
            be.get_line.extend_from_slice(k);
        }
        let member = Member {
            client: ci as u32,
            gen,
            seq,
            frag,
            nkeys: 0,
        };
        be.batch.push(member, keys);
        let c = &be.rt.counters[self.id].servers[be.server];
        c.requests.add(1);
        c.request_bytes.add(bytes as i64);
        if !be.dirty {
            be.dirty = true;
            self.dirty_backends.push(b);
        }
    }

    /// Ends the open get line, if any, and puts it and its queue entry where the line
    /// opened.
    fn close_get(&mut self, b: usize) {
        let Some(be) = self.backends.get_mut(b) else {
            return;
        };
        let Some(open) = be.open_get.take() else {
            return;
        };
        be.get_line.extend_from_slice(b"\r\n");
        let at = be.wbuf.len() - open.wbuf_after;
        be.wbuf.splice(at..at, be.get_line.drain(..));
        let bytes = (be.wbuf.len() - at - open.wbuf_after) as u32;
        let first = be.batch.members()[0];
        let batch = if be.batch.members().len() == 1 {
            be.batch.clear();
            None
        } else {
            Some(Box::new(std::mem::take(&mut be.batch)))
        };
        let entry = Pending {
            client: first.client,
            gen: first.gen,
            seq: first.seq,
            frag: first.frag,
            quiet: false,
            at: open.at,
            bytes,
            batch,
        };
        let at = be.pending.len() - open.pending_after;
        be.pending.insert(at, entry);
        let c = &be.rt.counters[self.id].servers[be.server];
        c.out_queue.add(1);
        c.out_queue_bytes.add(i64::from(bytes));
    }

    fn flush_backend(&mut self, b: usize) {
        self.close_get(b);
        let Some(be) = self.backends.get_mut(b) else {
            return;
        };
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
        be.wbuf.clear();
        be.wpos = 0;
        if be.wbuf.capacity() > 1024 * 1024 {
            be.wbuf = Vec::new();
        }
    }

    fn backend_writable(&mut self, b: usize) {
        let Some(be) = self.backends.get_mut(b) else {
            return;
        };
        if be.connecting {
            match be.stream.connect_result() {
                Ok(true) => be.connecting = false,
                Ok(false) => return,
                Err(e) => return self.fail_backend(b, Why::Io(e)),
            }
        }
        self.flush_backend(b);
    }

    fn backend_readable(&mut self, b: usize, drain: bool) {
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
    fn backend_replies(&mut self, b: usize) -> bool {
        let be = &mut self.backends[b];
        if be.connecting {
            be.connecting = false;
        }
        let mut any = false;
        loop {
            match be.framer.next(be.rbuf.filled()) {
                Frame::Complete(n) => {
                    let Some(p) = be.pending.front() else {
                        return self.fail_then(b, Why::Protocol);
                    };
                    let reply = &be.rbuf.filled()[..n];
                    if p.client == HANDSHAKE {
                        if reply.first() == Some(&b'-') {
                            let text = String::from_utf8_lossy(&reply[1..n - 2]).into_owned();
                            return self.fail_then(b, Why::Handshake(text));
                        }
                        be.pending.pop_front();
                        be.rbuf.consume(n);
                        continue;
                    }
                    let done = !p.quiet || reply == b"MN\r\n";
                    if let Some(batch) = &p.batch {
                        let (clients, dirty) = (&mut self.clients, &mut self.dirty_clients);
                        batch.split_reply(reply, &mut be.scratch, |m, part| {
                            let t = p.target(m.client, m.gen, m.seq, m.frag);
                            deliver(clients, dirty, &t, part, true);
                        });
                    } else {
                        let body: &[u8] = if p.quiet && done { b"" } else { reply };
                        deliver(&mut self.clients, &mut self.dirty_clients, p, body, done);
                    }
                    let c = &be.rt.counters[self.id].servers[be.server];
                    c.response_bytes.add(n as i64);
                    if done {
                        c.responses.add(1);
                        c.out_queue.add(-1);
                        c.out_queue_bytes.add(-i64::from(p.bytes));
                        be.pending.pop_front();
                    }
                    be.rbuf.consume(n);
                    any = true;
                }
                Frame::Incomplete(total) => {
                    if let Some(t) = total {
                        be.rbuf.reserve_total(t);
                    }
                    break;
                }
                Frame::Invalid => return self.fail_then(b, Why::Protocol),
            }
        }
        if any {
            be.rt.record_success(be.server);
        }
        true
    }

    fn fail_then(&mut self, b: usize, why: Why) -> bool {
        self.fail_backend(b, why);
        false
    }

    /// Drops a broken backend connection: every request on it is answered with
    /// SERVER_ERROR and the failure counts towards ejection.
    fn fail_backend(&mut self, b: usize, why: Why) {
        self.close_get(b);
        let Some(be) = self.backends.try_remove(b) else {
            return;
        };
        let mut be = be;
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
            Why::Protocol => {
                c.server_err.add(1);
                "invalid reply from server".to_owned()
            }
            Why::Handshake(e) => {
                c.server_err.add(1);
                format!("server refused AUTH/SELECT: {e}")
            }
        };
        let msg = error_reply(be.rt.cfg.redis, &text);
        let handshake = be.pending.iter().any(|p| p.client == HANDSHAKE);
        be.pending.retain(|p| p.client != HANDSHAKE);
        let mut failed = 0;
        for p in be.pending.drain(..) {
            c.out_queue.add(-1);
            c.out_queue_bytes.add(-i64::from(p.bytes));
            for t in p.targets() {
                failed += 1;
                deliver(&mut self.clients, &mut self.dirty_clients, &t, &msg, true);
            }
        }
        be.rt.counters[self.id].pool.forward_error.add(failed);
        // An idle connection the server closed (restart, idle timeout) is not a failure.
        if failed > 0 || handshake || !matches!(why, Why::Eof) || be.connecting {
            be.rt.record_failure(be.server);
        }
        crate::log::info(&format!(
            "pool '{}': server '{}' connection dropped: {}",
            be.rt.cfg.name, be.rt.servers[be.server].stats_name, text
        ));
    }

    fn close_backend(&mut self, b: usize) {
        let Some(mut be) = self.backends.try_remove(b) else {
            return;
        };
        let _ = self.poll.registry().deregister(be.stream.source());
        be.rt.counters[self.id].servers[be.server]
            .server_connections
            .add(-1);
    }

    /// Fails backends whose oldest request is past the pool timeout; returns how long
    /// until the next deadline.
    fn check_timeouts(&mut self) -> Option<Duration> {
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

/// The worker that accepts on listen address `key` (the same answer in every worker).
/// `me`, unless it has more than `slack` clients over the least loaded other worker, which
/// is then chosen; the scan starts after `last` (the previous choice) so ties rotate.
fn choose_worker(loads: &[i64], me: usize, last: usize, slack: i64) -> usize {
    let n = loads.len();
    let mut best = me;
    for i in 1..=n {
        let w = (last + i) % n;
        if w != me && loads[w] < loads[best] {
            best = w;
        }
    }
    if best != me && loads[me] > loads[best] + slack {
        best
    } else {
        me
    }
}

fn acceptor_of(key: &str, workers: usize) -> usize {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h % workers.max(1) as u64) as usize
}

/// Gives one backend reply (or part of a quiet one) to the client waiting for it.
fn deliver(
    clients: &mut Slab<Client>,
    dirty: &mut Vec<usize>,
    p: &Pending,
    reply: &[u8],
    done: bool,
) {
    let ci = p.client as usize;
    let Some(c) = clients.get_mut(ci) else { return };
    if c.gen != p.gen {
        return;
    }
    let i = p.seq.wrapping_sub(c.head_seq) as usize;
    let Some(slot) = c.slots.get_mut(i) else {
        return;
    };
    if i == 0
        && done
        && slot.remaining == 1
        && slot.buf.is_empty()
        && matches!(slot.kind, SlotKind::Single)
    {
        // The common case: the reply the client waits for next, in one piece.
        c.wbuf.extend_from_slice(reply);
        c.slots.pop_front();
        c.head_seq += 1;
    } else {
        match &mut slot.kind {
            SlotKind::Single | SlotKind::Ready => slot.buf.extend_from_slice(reply),
            SlotKind::NoReply => {
                if is_error_reply(reply) {
                    slot.buf.extend_from_slice(reply)
                }
            }
            SlotKind::Multi(m) => m.frags[usize::from(p.frag)].extend_from_slice(reply),
            SlotKind::Broadcast { frags, .. } => {
                frags[usize::from(p.frag)].extend_from_slice(reply)
            }
            SlotKind::RedisMulti(m) => m.frags[usize::from(p.frag)].extend_from_slice(reply),
        }
        if done {
            slot.remaining = slot.remaining.saturating_sub(1);
        }
    }
    c.drain_ready();
    if !c.dirty {
        c.dirty = true;
        dirty.push(ci);
    }
}

/// memcached's text-protocol authentication (`-Y authfile`), against the pool's
/// `client_auth` password: the first command must be `set <any key> <flags> <exptime>
/// <bytes>` whose data is `<user> <password>`; any user name is accepted.
fn authenticate(req: &Request<'_>, password: Option<&str>) -> &'static [u8] {
    let Request::Store {
        cmd: proto::StoreCmd::Set,
        data,
        ..
    } = req
    else {
        return b"CLIENT_ERROR unauthenticated\r\n";
    };
    let mut tokens = data.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let (Some(_user), Some(pass)) = (tokens.next(), tokens.next()) else {
        return b"CLIENT_ERROR bad authentication token format\r\n";
    };
    if password.is_some_and(|pw| redis_local::same_secret(pw.as_bytes(), pass)) {
        proto::reply::STORED
    } else {
        b"CLIENT_ERROR authentication failure\r\n"
    }
}

fn first_line(raw: &[u8]) -> &[u8] {
    let end = memchr::memchr(b'\n', raw).unwrap_or(raw.len());
    let line = &raw[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Splits a classic request ending in `noreply` into (its line without `noreply`, the data
/// block after the line), so the backend answers and the router drops the answer.
fn strip_noreply(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = memchr::memchr(b'\n', raw)?;
    let line = first_line(raw);
    let trimmed = line.trim_ascii_end();
    let head = trimmed.strip_suffix(b"noreply")?;
    if !head.ends_with(b" ") {
        return None;
    }
    Some((head.trim_ascii_end(), &raw[nl + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_are_dealt_evenly_past_the_slack() {
        // Worker 0 accepts 64 connections in a row; each choice is then counted as load.
        for (slack, max_spread) in [(0, 1), (4, 5)] {
            let mut loads = vec![0i64; 3];
            let mut last = 0;
            for _ in 0..64 {
                let w = choose_worker(&loads, 0, last, slack);
                if w != 0 {
                    last = w;
                }
                loads[w] += 1;
            }
            let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(hi - lo <= max_spread, "slack {slack}: {loads:?}");
            assert!(
                loads[1] > 0 && loads[2] > 0,
                "every worker gets some: {loads:?}"
            );
        }
        // Under the slack everything stays with the acceptor.
        assert_eq!(choose_worker(&[10, 0], 0, 1, 64), 0);
    }

    #[test]
    fn noreply_is_stripped_from_the_line_only() {
        let raw = b"set k 0 0 7 noreply\r\nnoreply\r\n";
        let (line, rest) = strip_noreply(raw).unwrap();
        assert_eq!(line, b"set k 0 0 7");
        assert_eq!(rest, b"noreply\r\n");
        let (line, rest) = strip_noreply(b"delete k noreply  \n").unwrap();
        assert_eq!((line, rest), (&b"delete k"[..], &b""[..]));
        assert!(strip_noreply(b"delete noreply\r\n").is_some());
        assert!(strip_noreply(b"delete xnoreply\r\n").is_none());
    }

    fn multi(keys: &[&str], frag_of: &[u16], frags: &[&[u8]]) -> Vec<u8> {
        let mut m = MultiGet {
            keys: Vec::new(),
            spans: Vec::new(),
            frags: frags.iter().map(|f| f.to_vec()).collect(),
        };
        for (k, &f) in keys.iter().zip(frag_of) {
            m.spans.push((m.keys.len() as u32, k.len() as u32, f));
            m.keys.extend_from_slice(k.as_bytes());
        }
        let mut out = Vec::new();
        merge_get(&m, &mut out);
        out
    }

    #[test]
    fn multi_get_merges_in_key_order() {
        let out = multi(
            &["a", "b", "c", "a", "d"],
            &[0, 1, 0, 0, 1],
            &[
                b"VALUE a 0 1\r\n1\r\nVALUE c 0 1\r\n3\r\nVALUE a 0 1\r\n1\r\nEND\r\n",
                b"VALUE d 0 1\r\n4\r\nEND\r\n",
            ],
        );
        assert_eq!(
            out,
            b"VALUE a 0 1\r\n1\r\nVALUE c 0 1\r\n3\r\nVALUE a 0 1\r\n1\r\nVALUE d 0 1\r\n4\r\nEND\r\n"
        );
        let out = multi(
            &["a", "b"],
            &[0, 1],
            &[b"END\r\n", b"SERVER_ERROR Connection refused\r\n"],
        );
        assert_eq!(out, b"SERVER_ERROR Connection refused\r\n");
        let out = multi(
            &["x", "y"],
            &[1, 0],
            &[
                b"VALUE y 1 0\r\n\r\nEND\r\n",
                b"VALUE x 2 0 9\r\n\r\nEND\r\n",
            ],
        );
        assert_eq!(out, b"VALUE x 2 0 9\r\n\r\nVALUE y 1 0\r\n\r\nEND\r\n");
    }

    #[test]
    fn redis_multi_merges_or_answers_an_error() {
        let slot = |kind, frags: Vec<&[u8]>| Slot {
            remaining: 0,
            kind: SlotKind::RedisMulti(Box::new(RedisMulti {
                kind,
                nkeys: 3,
                positions: vec![vec![0, 2], vec![1]],
                frags: frags.into_iter().map(|f| f.to_vec()).collect(),
            })),
            buf: Vec::new(),
        };
        let mut out = Vec::new();
        finish_slot(
            slot(
                Kind::MultiGet,
                vec![b"*2\r\n$1\r\na\r\n$-1\r\n", b"*1\r\n$1\r\nb\r\n"],
            ),
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
        out.clear();
        finish_slot(slot(Kind::MultiSum, vec![b":2\r\n", b":1\r\n"]), &mut out);
        assert_eq!(out, b":3\r\n");
        out.clear();
        let down: &[u8] = b"-ERR Connection refused\r\n";
        finish_slot(slot(Kind::MultiSet, vec![b"+OK\r\n", down]), &mut out);
        assert_eq!(out, down);
        out.clear();
        // A reply of the wrong shape never reaches the client half-merged.
        finish_slot(
            slot(Kind::MultiGet, vec![b"*1\r\n:1\r\n", b"+OK\r\n"]),
            &mut out,
        );
        assert_eq!(out, b"-ERR invalid reply from server\r\n");
    }

    #[test]
    fn error_replies_follow_the_pool_protocol() {
        assert_eq!(
            error_reply(true, "Connection refused"),
            b"-ERR Connection refused\r\n"
        );
        assert_eq!(
            error_reply(false, "Connection refused"),
            b"SERVER_ERROR Connection refused\r\n"
        );
        assert_eq!(acceptor_of("127.0.0.1:1", 1), 0);
        assert!(acceptor_of("/run/r.sock", 3) < 3);
    }

    #[test]
    fn broadcast_needs_every_ok() {
        let mut out = Vec::new();
        let slot = |frags: Vec<&[u8]>, noreply| Slot {
            remaining: 0,
            kind: SlotKind::Broadcast {
                frags: frags.into_iter().map(|f| f.to_vec()).collect(),
                noreply,
            },
            buf: Vec::new(),
        };
        finish_slot(slot(vec![b"OK\r\n", b"OK\r\n"], false), &mut out);
        assert_eq!(out, b"OK\r\n");
        out.clear();
        finish_slot(
            slot(vec![b"OK\r\n", b"SERVER_ERROR x\r\n"], false),
            &mut out,
        );
        assert_eq!(out, b"SERVER_ERROR x\r\n");
        out.clear();
        finish_slot(slot(vec![b"OK\r\n", b"OK\r\n"], true), &mut out);
        assert!(out.is_empty());
    }
}
