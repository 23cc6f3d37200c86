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
//! only: how a client's bytes are parsed and routed (`memcached.rs`, `redis.rs`), how a
//! backend's replies are framed (`proto::response::ReplyFramer`), and the wording of the
//! errors the router makes up. Queues, batching, ordering, timeouts and ejection are shared.
//!
//! Modules, one concept each: this one is the event loop (poll, control messages, reload);
//! `accept` takes new connections and hands them over, `client` is a client connection and
//! its reply queue, `backend` a server connection and its queue of requests in flight
//! (`get_batch`: gets of many clients merged on one line), `memcached` and `redis` parse and
//! route each protocol's requests (asking `crate::route::Placement` where they go), and
//! `auth` answers client authentication for both; `hotcache` answers gets of hot keys from
//! the pool's hot-key cache and tells it of writes.

mod accept;
mod active;
mod admin;
mod auth;
mod backend;
mod bigvalue;
mod binary;
mod client;
mod cluster;
mod get_batch;
mod held;
mod hotcache;
mod mcrouter;
mod memcached;
mod outstanding;
mod queued_tx;
mod rates;
mod redis;
mod reply_to;
mod transaction;

use std::collections::HashMap;
use std::io;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};
use proto::resp;
use proto::Limits;
use slab::Slab;

use crate::net::{Listener, Stream};
use crate::route::Placement;
use crate::shared::{Globals, PoolRt, Shared};
use accept::acceptor_of;
pub(crate) use backend::redis_handshake;
use backend::Backend;
use client::Client;

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
/// ...or this many reply bytes it has not read yet, or as many on their way (its requests
/// in flight times the size of its recent replies): replies already asked for must be
/// taken from the shared server connection, so a client that pipelines large gets and never
/// reads would otherwise make the router hold them all.
const MAX_UNSENT: usize = 8 * 1024 * 1024;
/// A client holding this many reply bytes it has not read is closed, as Redis closes a
/// client over its output buffer's hard limit. The pause above keeps a client far below it
/// unless it first reads small replies, then pipelines large gets and stops reading: what it
/// asked for then may be up to `MAX_SLOTS` replies, which the router would otherwise hold.
/// Well above an honest client's multi-get (100 keys of memcached's largest default item:
/// 100 MB).
const MAX_UNREAD: usize = 256 * 1024 * 1024;
/// A new client's replies are taken to be this large (memcached's largest item by default)
/// until some arrive: its first burst puts 8 requests in flight, more as small replies come.
const REPLY_ESTIMATE_START: u32 = 1024 * 1024;
/// A half-received Redis request may buffer this much (redis's client-query-buffer-limit).
const MAX_QUERY_BUFFER: usize = 1024 * 1024 * 1024;

const NO_SERVER: &str = "no server is available";

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
    /// A big value's helper finished: the reply for the client's slot.
    BigDone {
        to: reply_to::ReplyTo,
        reply: Vec<u8>,
    },
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

/// A pool as this worker sees it: where its requests go and its backend connections.
struct PoolLocal {
    rt: Arc<PoolRt>,
    placement: Placement,
    /// `[server][k]` → backend slab index.
    conns: Vec<Vec<Option<usize>>>,
    /// Requests a backend connection may hold before further ones fail at once
    /// (`server_max_inflight`; `u32::MAX`: no limit).
    max_inflight: u32,
    /// An mcrouter PoolRoute's `max_outstanding` (0: none).
    max_outstanding: u32,
    /// Hot-key handling (`rt.hot`, held here so a get need not touch the Arc's count).
    hot: Option<Arc<crate::hot::HotShared>>,
    /// Picks the gets whose keys feed this thread's hot-key sketch.
    sampler: hotkeys::Sampler,
    /// This thread's share of the pool's `active_req_limit`.
    active: active::Active,
    /// This thread's share of the pool's rate limits, if it has any.
    rates: Option<Box<rates::PoolBuckets>>,
    /// Requests take the slower path through `route_special` (hot keys or rate limits).
    special: bool,
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
    /// Clients that fell under half their limits while their replies went out: read again
    /// at the start of the next turn.
    resumed: Vec<usize>,
    /// Read buffers of idle clients, shared by this worker's connections.
    read_pool: Vec<Vec<u8>>,
    limits: Limits,
    now: Instant,
    /// Unix seconds at `now`: the time MigrateRoutes and shard splits go by, read once per
    /// loop turn rather than per request.
    unix_now: i64,
    /// Requests of an mcrouter config being carried out, and replies that came for them.
    mc: mcrouter::Execs,
    arrivals: backend::Arrivals,
    /// Redis Cluster commands to send again where a redirection points.
    redirects: cluster::Redirects,
    /// Client requests in flight to servers, against `--active-req-limit`.
    active: active::Active,
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
            pools: Vec::new(),
            listeners: Slab::new(),
            clients: Slab::new(),
            backends: Slab::new(),
            next_gen: 0,
            dirty_backends: Vec::new(),
            dirty_clients: Vec::new(),
            read_again: Vec::new(),
            resumed: Vec::new(),
            read_pool: Vec::new(),
            // The backends enforce their own item size; the router only bounds what it buffers.
            limits: Limits {
                item_size_max: 64 * 1024 * 1024,
                ..Limits::default()
            },
            now: Instant::now(),
            unix_now: routetree::unix_now(),
            mc: mcrouter::Execs::default(),
            arrivals: backend::Arrivals::default(),
            redirects: cluster::Redirects::default(),
            active: active::Active::new(globals.active_req_limit, globals.threads),
            globals,
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
            self.unix_now = routetree::unix_now();
            self.mc.set_now(self.now);
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
            for ci in std::mem::take(&mut self.resumed) {
                self.parse_client(ci);
                self.client_readable(ci, true);
            }
            for (ci, drain) in std::mem::take(&mut self.read_again) {
                self.client_readable(ci, drain);
            }
            self.fire_timers();
            self.fire_redirects();
            self.flush_all();
            timeout = self.check_timeouts();
            for wait in [self.next_timer(), self.next_redirect()]
                .into_iter()
                .flatten()
            {
                timeout = Some(timeout.map_or(wait, |t| t.min(wait)));
            }
            if !self.read_again.is_empty() || !self.resumed.is_empty() {
                timeout = Some(Duration::ZERO);
            }
        }
    }

    fn flush_all(&mut self) {
        loop {
            if !self.arrivals.is_empty() {
                self.run_arrivals();
            }
            if !self.redirects.is_empty() {
                self.run_redirects();
            }
            while let Some(b) = self.dirty_backends.pop() {
                self.flush_backend(b);
            }
            match self.dirty_clients.pop() {
                Some(c) => self.flush_client(c),
                // Shadow copies once the replies are out: a copied key's client does not
                // wait for the write to the shadow.
                None if self.dirty_backends.is_empty()
                    && self.arrivals.is_empty()
                    && self.has_copies() =>
                {
                    self.send_copies()
                }
                // Last, once every ready reply is out: one fsync per spool for the turn.
                None if self.dirty_backends.is_empty()
                    && self.arrivals.is_empty()
                    && self.has_spooled() =>
                {
                    self.commit_spooled()
                }
                None if self.dirty_backends.is_empty()
                    && self.arrivals.is_empty()
                    && self.redirects.is_empty() =>
                {
                    break
                }
                None => {}
            }
        }
    }

    fn control(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Control::Reload { shared, listeners } => self.reload(shared, listeners),
                Control::Adopt { stream, listen_key } => self.adopt(stream, &listen_key),
                Control::BigDone { to, reply } => self.big_done(to, &reply),
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
            .listening_pools()
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
                        c.authed = !auth::needs_auth(new);
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
            self.backends[b].limited_pool = None;
            if self.backends[b].pending.is_empty() {
                self.close_backend(b);
            }
        }
        let outstanding = outstanding::pool_limits(&shared);
        self.pools = shared
            .pools
            .iter()
            .zip(outstanding)
            .map(|(rt, max_outstanding)| PoolLocal {
                rt: rt.clone(),
                placement: Placement::new(rt.clone()),
                conns: vec![
                    vec![None; rt.cfg.server_connections.max(1) as usize];
                    rt.servers.len()
                ],
                max_inflight: match rt.cfg.server_max_inflight {
                    0 => u32::MAX,
                    n => n,
                },
                max_outstanding,
                hot: rt.hot.clone(),
                sampler: hotkeys::Sampler::new(
                    rt.cfg.hot_keys.sample,
                    0x9e37_79b9_7f4a_7c15 ^ self.id as u64,
                ),
                active: active::Active::new(rt.cfg.active_req_limit, rt.counters.len()),
                rates: rates::PoolBuckets::new(&rt.cfg.rates, rt.counters.len(), self.now),
                special: rt.hot.is_some() || rt.cfg.rates.any(),
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
