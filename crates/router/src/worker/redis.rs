//! Redis pools: parsing a client's RESP commands and routing each to the server that owns
//! its keys, splitting multi-key commands per server, or answering it here.

use proto::redis_cmd::{self, Kind, Local};
use proto::resp::{self, RespParse, RespRequest};
use proto::response::Expect;

use super::auth;
use super::client::{write_resp3_or_error, RedisMulti, SlotKind};
use super::reply_to::ReplyTo;
use super::{Worker, MAX_QUERY_BUFFER, NO_SERVER, RESP_LIMITS, RESP_LIMITS_UNAUTH};
use proto::resp::resp3::Shape;

impl Worker {
    pub(super) fn parse_client_resp(&mut self, ci: usize) {
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

    /// Executes one command of a Redis pool client: answered here, forwarded to the server
    /// owning its keys, or split per server.
    pub(super) fn route_redis(&mut self, ci: usize, req: &RespRequest<'_>) {
        let c = &mut self.clients[ci];
        let p = c.pool;
        if req.name().eq_ignore_ascii_case(b"hello") {
            let mut out = Vec::new();
            let now = auth::Session {
                authed: c.authed,
                proto: if c.resp3 { 3 } else { 2 },
            };
            let s = auth::hello(&c.rt.cfg, req, now, &mut out);
            (c.authed, c.resp3) = (s.authed, s.proto == 3);
            return self.local_reply(ci, &out);
        }
        if c.authed && self.transaction(ci, req) {
            return;
        }
        let c = &mut self.clients[ci];
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
                let reply = auth::auth(&c.rt.cfg, req);
                if reply == auth::OK {
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
                if c.resp3 {
                    let mut converted = Vec::with_capacity(out.len());
                    write_resp3_or_error(&out, Shape::Plain, &mut converted);
                    out = converted;
                }
                self.local_reply(ci, &out);
            }
            Kind::AnyServer => match self.pools[p].placement.for_any() {
                Some(s) => self.forward_redis(ci, p, s, req),
                None => self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER)),
            },
            Kind::Keyed | Kind::MultiGet | Kind::MultiSum | Kind::MultiSet
                if self.pools[p].placement.replica_reads =>
            {
                self.route_replica_pool(ci, p, &plan, req)
            }
            Kind::Keyed | Kind::MultiGet | Kind::MultiSum | Kind::MultiSet
                if self.is_cluster(p) =>
            {
                self.route_cluster(ci, p, &plan, req, false)
            }
            Kind::Keyed => {
                if self.pools[p].rt.servers.is_empty() {
                    return self.fail_forward(ci, p, &self.pool_error(p, NO_SERVER));
                }
                let mut none = false;
                let server = plan.server(req, |k| {
                    self.pools[p].placement.for_key(k).unwrap_or_else(|| {
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
                    self.pools[p].placement.for_key(k).unwrap_or_else(|| {
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
                let resp3 = self.clients[ci].resp3;
                let (m, frames) = RedisMulti::of_parts(kind, plan.key_count(), resp3, parts);
                let c = &mut self.clients[ci];
                let to = c.push(ci, frames.len() as u32, SlotKind::RedisMulti(Box::new(m)));
                for (f, ((_, frame), b)) in frames.iter().zip(backends).enumerate() {
                    let to = ReplyTo {
                        frag: f as u16,
                        ..to
                    };
                    self.enqueue(b, &[frame], to, Expect::Any);
                }
            }
        }
    }

    /// Sends a command unchanged (inline commands as multibulk) to server `s`.
    pub(super) fn forward_redis(&mut self, ci: usize, p: usize, s: usize, req: &RespRequest<'_>) {
        let b = match self.backend_for(p, s, ci) {
            Ok(b) => b,
            Err(msg) => return self.fail_forward(ci, p, &msg),
        };
        let c = &mut self.clients[ci];
        let kind = match c.resp3 {
            true => SlotKind::Resp3(Shape::of(req)),
            false => SlotKind::Single,
        };
        let to = c.push(ci, 1, kind);
        match req.raw_multibulk() {
            Some(raw) => self.enqueue(b, &[raw], to, Expect::Any),
            None => {
                let mut frame = Vec::new();
                req.write_multibulk(&mut frame);
                self.enqueue(b, &[&frame], to, Expect::Any);
            }
        }
    }
}
