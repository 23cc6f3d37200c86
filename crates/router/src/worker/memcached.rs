//! memcached pools: parsing a client's requests and routing each to the server(s) that own
//! its keys, or answering it here.

use proto::response::Expect;
use proto::{forward, Limits, Parse, Request};

use super::auth;
use super::client::{MultiGet, SlotKind};
use super::mcrouter::Planned;
use super::reply_to::ReplyTo;
use super::{Worker, NO_SERVER};

/// Where a key-bearing request goes: by the placement of a nutcracker pool, or to the one
/// server (pool, index) a route tree chose.
#[derive(Clone, Copy)]
pub(super) enum Dest {
    Pool(usize),
    Server(usize, usize),
}

impl Dest {
    fn pool(self) -> usize {
        match self {
            Dest::Pool(p) | Dest::Server(p, _) => p,
        }
    }
}

impl Worker {
    pub(super) fn parse_client(&mut self, ci: usize) {
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
            if data[0] == proto::binary::REQUEST_MAGIC {
                if self.parse_binary(ci, &mut rbuf) {
                    continue;
                }
                break;
            }
            // An mcrouter config's clients may also send mcrouter's lease commands.
            let parse = if self.shared.mcrouter.is_some() {
                proto::parse_mcrouter
            } else {
                proto::parse
            };
            let limits = Limits {
                item_size_max: c.rt.cfg.item_size_max as usize,
                ..self.limits
            };
            match parse(data, &limits) {
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
                        let reply = auth::memcached_login(&req, c.rt.cfg.client_auth.as_deref());
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

    #[inline(always)]
    pub(super) fn route(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        if self.pools[p].special {
            return self.route_special(ci, p, req, raw);
        }
        self.route_cold(ci, p, req, raw)
    }

    /// Routes a request, hot-key cache aside. Inlined into both callers: a request is not
    /// copied once more on its way.
    #[inline(always)]
    pub(super) fn route_cold(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        let splits = self.clients[ci].rt.cfg.big_value_split_threshold != 0
            || self.shared.mcrouter.as_ref().is_some_and(|r| r.big_values);
        if !splits {
            return self.route_request(ci, p, req, raw);
        }
        self.route_splitting(ci, p, req, raw)
    }

    /// `route` in a pool that splits big values.
    #[inline(never)]
    fn route_splitting(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        if self.big_store(ci, &req) {
            return;
        }
        let get = match req {
            Request::Get { keys, .. } | Request::Gat { keys, .. } => self.big_reads(ci, keys),
            _ => false,
        };
        let before = self.clients[ci].slots.len();
        self.route_request(ci, p, req, raw);
        if get {
            if let Some(c) = self.clients.get_mut(ci) {
                if c.slots.len() > before {
                    if let Some(slot) = c.slots.back_mut() {
                        slot.big = true;
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn route_request(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        let mut d = Dest::Pool(p);
        if self.shared.mcrouter.is_some() {
            match self.route_plan(ci, &req) {
                Planned::Done => return,
                Planned::Server(bp, s) => d = Dest::Server(bp, s),
                Planned::Here => {}
            }
        }
        let expect = Expect::of(&req).unwrap_or(Expect::Any);
        match req {
            Request::Get { keys, cas } => {
                let cmd: &[u8] = if cas { b"gets" } else { b"get" };
                self.route_get(ci, d, raw, cmd, keys);
            }
            Request::Gat { keys, .. } => {
                self.route_get(ci, d, raw, forward::gat_command(raw), keys);
            }
            Request::Store { key, noreply, .. }
            | Request::Delete { key, noreply }
            | Request::Arith { key, noreply, .. }
            | Request::Touch { key, noreply, .. } => {
                if noreply {
                    if let Some((line, rest)) = forward::strip_noreply(raw) {
                        self.route_key(
                            ci,
                            d,
                            key,
                            &[line, b"\r\n", rest],
                            SlotKind::NoReply,
                            expect,
                        );
                        return;
                    }
                }
                self.route_key(ci, d, key, &[raw], SlotKind::Single, expect);
            }
            Request::MetaGet { key, flags, .. }
            | Request::MetaSet { key, flags, .. }
            | Request::MetaDelete { key, flags }
            | Request::MetaArithmetic { key, flags, .. } => {
                // The backend decides what q hides; `mn` marks where its answer ends.
                let with_mn = [raw, b"mn\r\n"];
                let parts = if flags.noreply() {
                    &with_mn[..]
                } else {
                    &[raw]
                };
                let Some(b) = self.key_backend(ci, d, key.as_bytes()) else {
                    return;
                };
                let to = self.clients[ci].push(ci, 1, SlotKind::Single);
                // A reply echoes the opaque and the key (as sent): a reply to another
                // request shows by them.
                let opaque = flags.opaque();
                if opaque.is_none() && !flags.has(b'k') {
                    self.enqueue(b, parts, to, expect);
                } else {
                    let key = if flags.has(b'k') { key.wire() } else { b"" };
                    let echo = [opaque.unwrap_or_default(), key];
                    self.enqueue_keyed(b, parts, to, expect, echo);
                }
            }
            Request::MetaDebug { key } => {
                self.route_key(ci, d, key.as_bytes(), &[raw], SlotKind::Single, expect)
            }
            Request::FlushAll { noreply, .. } => self.broadcast(ci, p, raw, noreply),
            Request::MetaNoop => self.local_reply(ci, b"MN\r\n"),
            // memcached's form: client libraries parse the number (proto::reply::VERSION).
            Request::Version => {
                let reply = format!("VERSION {}\r\n", proto::reply::VERSION);
                self.local_reply(ci, reply.as_bytes())
            }
            Request::Verbosity { noreply, .. } => {
                if !noreply {
                    self.local_reply(ci, b"OK\r\n")
                }
            }
            Request::Stats { mut args } => {
                // mcrouter's per-server groups (mcrouter configs only); anything else gets
                // the router's own stats.
                let mc = match (args.next(), args.next()) {
                    (Some(group), None) => crate::mcstats::answer(&self.shared, group),
                    _ => None,
                };
                let text = mc.unwrap_or_else(|| crate::stats::text(&self.shared, &self.globals, p));
                self.local_reply(ci, &text);
            }
            Request::Quit => {
                if let Some(c) = self.clients.get_mut(ci) {
                    c.closing = true;
                }
                self.mark_client(ci);
            }
            Request::Shutdown(_) => self.local_reply(ci, proto::reply::ERROR_SHUTDOWN_NOT_ENABLED),
            // Lease commands come only with an mcrouter config, whose route tree takes them.
            Request::CacheMemlimit { .. }
            | Request::Admin { .. }
            | Request::LeaseGet { .. }
            | Request::LeaseSet { .. } => self.local_reply(ci, proto::reply::ERROR),
        }
    }

    /// The server of `key` at `d`: the pool's placement, or the server a route tree chose.
    #[inline]
    fn server_for(&mut self, d: Dest, key: &[u8]) -> Option<usize> {
        match d {
            Dest::Pool(p) => self.pools[p].placement.for_key(key),
            Dest::Server(_, s) => Some(s),
        }
    }

    /// Forwards a request of one key; `expect`: see [`Worker::enqueue`].
    pub(super) fn route_key(
        &mut self,
        ci: usize,
        d: Dest,
        key: &[u8],
        parts: &[&[u8]],
        kind: SlotKind,
        expect: Expect,
    ) {
        let Some(b) = self.key_backend(ci, d, key) else {
            return;
        };
        let to = self.clients[ci].push(ci, 1, kind);
        self.enqueue(b, parts, to, expect);
    }

    /// The backend connection for `key`, or None when the client was answered an error.
    fn key_backend(&mut self, ci: usize, d: Dest, key: &[u8]) -> Option<usize> {
        let p = d.pool();
        let Some(s) = self.server_for(d, key) else {
            self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
            return None;
        };
        match self.backend_for(p, s, ci) {
            Ok(b) => Some(b),
            Err(msg) => {
                self.fail_forward(ci, p, &msg);
                None
            }
        }
    }

    pub(super) fn route_get(
        &mut self,
        ci: usize,
        d: Dest,
        raw: &[u8],
        cmd: &[u8],
        keys: proto::Keys<'_>,
    ) {
        // get/gets (not gat) may share one line with other clients' gets.
        let plain = match cmd {
            b"get" => Some(false),
            b"gets" => Some(true),
            _ => None,
        };
        let p = d.pool();
        // First pass without allocating: usually every key is on one server and the
        // request goes out exactly as the client wrote it.
        let mut first = None;
        let mut same = true;
        for k in keys {
            let Ok(k) = k else {
                self.local_reply(ci, proto::reply::CLIENT_ERROR_BAD_FORMAT);
                return;
            };
            let Some(s) = self.server_for(d, k) else {
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
            let to = self.clients[ci].push(ci, 1, SlotKind::Single);
            match plain {
                Some(cas) => self.enqueue_get(b, cas, keys.flatten(), to),
                None => self.enqueue_keyed(b, &[raw], to, Expect::Get, keys.flatten()),
            }
            return;
        }
        let mut list: Vec<(&[u8], usize)> = Vec::with_capacity(16);
        for k in keys.flatten() {
            let s = self.server_for(d, k).unwrap_or(s0);
            list.push((k, s));
        }
        // Split: one fragment per server, in order of first appearance.
        let mut servers: Vec<usize> = Vec::new();
        let mut m = MultiGet {
            keys: Vec::new(),
            spans: Vec::with_capacity(list.len()),
            frags: Vec::new(),
            items: Vec::new(),
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
        m.items = vec![Vec::new(); servers.len()];
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
        let to = self.clients[ci].push(ci, servers.len() as u32, SlotKind::Multi(Box::new(m)));
        for (f, b) in backends.into_iter().enumerate() {
            let to = ReplyTo {
                frag: f as u16,
                ..to
            };
            let frag_keys = list
                .iter()
                .filter(|&&(_, s)| s == servers[f])
                .map(|&(k, _)| k);
            match plain {
                Some(cas) => self.enqueue_get(b, cas, frag_keys, to),
                None => {
                    let line = &mut lines[f];
                    line.extend_from_slice(b"\r\n");
                    self.enqueue_keyed(b, &[line], to, Expect::Get, frag_keys);
                }
            }
        }
    }

    /// flush_all goes to every live server of the pool; OK when all say OK.
    pub(super) fn broadcast(&mut self, ci: usize, p: usize, raw: &[u8], noreply: bool) {
        let live = self.pools[p].placement.for_all();
        let stripped = if noreply {
            forward::strip_noreply(raw)
        } else {
            None
        };
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
        let to = self.clients[ci].push(
            ci,
            backends.len() as u32,
            SlotKind::Broadcast {
                frags: vec![Vec::new(); backends.len()],
                noreply,
            },
        );
        for (f, b) in backends.into_iter().enumerate() {
            let to = ReplyTo {
                frag: f as u16,
                ..to
            };
            match stripped {
                Some((line, rest)) => self.enqueue(b, &[line, b"\r\n", rest], to, Expect::Ok),
                None => self.enqueue(b, &[raw], to, Expect::Ok),
            }
        }
    }
}
