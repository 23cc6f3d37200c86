//! Binary-protocol clients of a memcached pool. A request is answered here (noop, version,
//! quit, stat, SASL) or sent to the backends as its text equivalent through the same routing
//! as a text request; the text reply is translated back when it reaches the head of the
//! client's queue (`proto::binary::bridge` does both translations).

use proto::binary::{self, bridge, BinParse, BinRequest, Command, Settings, Status};
use proto::{Limits, Parse};

use super::auth;
use super::Worker;
use crate::buf::ReadBuf;

impl Worker {
    /// Handles the binary request at the head of `rbuf` (its first byte is the magic 0x80).
    /// False: the request is not all here yet.
    pub(super) fn parse_binary(&mut self, ci: usize, rbuf: &mut ReadBuf) -> bool {
        let c = &mut self.clients[ci];
        let settings = Settings {
            limits: Limits {
                item_size_max: c.rt.cfg.item_size_max as usize,
                ..self.limits
            },
            // memcached without -S answers the SASL opcodes unknown command.
            sasl: c.rt.cfg.client_auth.is_some(),
            authenticated: c.authed,
        };
        let mut out = Vec::new();
        if c.authed {
            if let Some(n) = bridge::verbosity(rbuf.filled(), &mut out) {
                c.reply(&out);
                rbuf.consume(n);
                self.mark_client(ci);
                return true;
            }
        }
        match binary::parse_request(rbuf.filled(), &settings) {
            BinParse::Incomplete { total } => {
                rbuf.reserve_total(total);
                false
            }
            BinParse::Error(e) => {
                e.write_reply(&mut out);
                c.reply(&out);
                c.swallow = e.swallow;
                c.closing |= e.close;
                rbuf.consume(e.consumed);
                self.mark_client(ci);
                true
            }
            BinParse::Request(req, n) => {
                self.binary_request(ci, &req);
                rbuf.consume(n);
                true
            }
        }
    }

    fn binary_request(&mut self, ci: usize, req: &BinRequest<'_>) {
        let mut out = Vec::new();
        let c = &mut self.clients[ci];
        match req.command {
            Command::Noop => req.write_ok(&mut out, 0, b""),
            Command::Version => req.write_ok(&mut out, 0, proto::reply::VERSION.as_bytes()),
            Command::Quit => {
                req.write_ok(&mut out, 0, b"");
                c.closing = true;
            }
            // The router's own statistics, as text `stats` answers them.
            Command::Stat { key: b"" } => {
                let text = crate::stats::text(&self.shared, &self.globals, c.pool);
                bridge::write_stats(req.opaque, &text, &mut out);
            }
            Command::Stat { .. } => req.write_error(&mut out, Status::KeyNotFound),
            Command::SaslListMechs => req.write_ok(&mut out, 0, b"PLAIN"),
            Command::Sasl {
                step,
                mechanism,
                data,
            } => {
                // PLAIN against the pool's client_auth, any user name, as the text login.
                let password = c.rt.cfg.client_auth.as_deref().unwrap_or_default();
                let ok = !step
                    && mechanism == b"PLAIN"
                    && bridge::sasl_plain_password(data)
                        .is_some_and(|p| auth::same_secret(password.as_bytes(), p));
                if ok {
                    c.authed = true;
                    req.write_ok(&mut out, 0, b"Authenticated");
                } else {
                    req.write_error(&mut out, Status::AuthError);
                }
            }
            _ => return self.forward_binary(ci, req),
        }
        self.local_reply(ci, &out);
    }

    /// Routes the text equivalent of `req` and marks its reply for translation.
    fn forward_binary(&mut self, ci: usize, req: &BinRequest<'_>) {
        let mut text = Vec::new();
        let pending = match bridge::forward(req, &mut text) {
            Ok(Some(p)) => p,
            // Every other command was answered by the caller.
            other => {
                let mut out = Vec::new();
                req.write_error(&mut out, other.err().unwrap_or(Status::UnknownCommand));
                return self.local_reply(ci, &out);
            }
        };
        let parse = if self.shared.mcrouter.is_some() {
            proto::parse_mcrouter
        } else {
            proto::parse
        };
        let Parse::Request(text_req, _) = parse(&text, &self.limits) else {
            // Not expected: `bridge::forward` writes only what the text parser reads.
            let mut out = Vec::new();
            req.write_error(&mut out, Status::InvalidArguments);
            return self.local_reply(ci, &out);
        };
        let c = &self.clients[ci];
        let (pool, seq, mark) = (c.pool, c.head_seq + c.slots.len() as u64, c.wbuf.len());
        self.route(ci, pool, text_req, &text);
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let i = seq.wrapping_sub(c.head_seq) as usize;
        if let Some(slot) = c.slots.get_mut(i) {
            slot.bin = Some(Box::new(pending));
        } else if c.wbuf.len() > mark {
            // Answered at once (no server, say) with nothing queued before it.
            let reply = c.wbuf.split_off(mark);
            pending.write_reply(&reply, &mut c.wbuf);
        }
        self.mark_client(ci);
    }
}
