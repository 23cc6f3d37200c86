//! `MULTI` … `EXEC` on Redis pools. The router answers `MULTI` and each `+QUEUED` itself and
//! keeps the commands; `EXEC` sends `MULTI`, the commands and `EXEC` together, in one write,
//! to the one server (a cluster: the one slot) all their keys live on. A pooled server
//! connection carries them: nothing of another client can come between them, as the
//! worker writes them in one go. Only `EXEC`'s reply reaches the client. `WATCH` would need
//! a connection of the client's own and is refused.

use proto::redis_cmd::{self, Kind};
use proto::resp::resp3::Shape;
use proto::resp::RespRequest;
use proto::response::Expect;
use ring::redis_slot::redis_slot;

use super::client::SlotKind;
use super::reply_to::ReplyTo;
use super::Worker;

const ERR_NESTED: &[u8] = b"-ERR MULTI calls can not be nested\r\n";
const ERR_EXEC: &[u8] = b"-ERR EXEC without MULTI\r\n";
const ERR_DISCARD: &[u8] = b"-ERR DISCARD without MULTI\r\n";
const ERR_ABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
const ERR_NOT_IN_MULTI: &[u8] =
    b"-ERR memfleet route queues only commands with keys inside MULTI\r\n";
const ERR_TOO_LARGE: &[u8] = b"-ERR memfleet route: transaction larger than 64 MB\r\n";
const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";
/// The most a client's queued commands may take.
const MAX_BYTES: usize = 64 << 20;

use super::queued_tx::{Place, Transaction};

impl Worker {
    /// Handles `MULTI`, `EXEC`, `DISCARD` and any command while a transaction is open.
    /// False when the command is none of these (it goes the usual way).
    pub(super) fn transaction(&mut self, ci: usize, req: &RespRequest<'_>) -> bool {
        let name = req.name();
        let open = self.clients[ci].tx.is_some();
        if name.eq_ignore_ascii_case(b"multi") {
            let reply: &[u8] = if open { ERR_NESTED } else { b"+OK\r\n" };
            self.clients[ci].tx.get_or_insert_with(Default::default);
            self.local_reply(ci, reply);
            return true;
        }
        if name.eq_ignore_ascii_case(b"discard") {
            let reply: &[u8] = match self.clients[ci].tx.take() {
                Some(_) => b"+OK\r\n",
                None => ERR_DISCARD,
            };
            self.local_reply(ci, reply);
            return true;
        }
        if name.eq_ignore_ascii_case(b"exec") {
            match self.clients[ci].tx.take() {
                Some(tx) => self.exec(ci, *tx),
                None => self.local_reply(ci, ERR_EXEC),
            }
            return true;
        }
        if !open || name.eq_ignore_ascii_case(b"quit") {
            return false;
        }
        let reply = self.queue(ci, req);
        if reply != b"+QUEUED\r\n" {
            if let Some(tx) = self.clients[ci].tx.as_mut() {
                tx.failed = true;
                tx.cmds.clear();
            }
        }
        self.local_reply(ci, reply);
        true
    }

    /// Queues one command of client `ci`'s transaction; the reply to give it.
    fn queue(&mut self, ci: usize, req: &RespRequest<'_>) -> &'static [u8] {
        let plan = match redis_cmd::classify(req) {
            Ok(plan) => plan,
            Err(reply) => return reply,
        };
        if !matches!(
            plan.kind(),
            Kind::Keyed | Kind::MultiGet | Kind::MultiSum | Kind::MultiSet
        ) {
            return ERR_NOT_IN_MULTI;
        }
        let p = self.clients[ci].pool;
        let cluster = self.is_cluster(p);
        let mut place = self.clients[ci].tx.as_ref().and_then(|t| t.place);
        for i in plan.key_indexes() {
            let key = req.arg(i).unwrap_or_default();
            let here = match cluster {
                true => Place::Slot(redis_slot(key)),
                false => match self.pools[p].placement.for_tx_key(key) {
                    Some(s) => Place::Server(s),
                    None => return b"-ERR no server is available\r\n",
                },
            };
            match place {
                Some(there) if there != here => {
                    return match cluster {
                        true => super::cluster::ERR_CROSSSLOT,
                        false => redis_cmd::ERR_CROSS_SERVER,
                    }
                }
                _ => place = Some(here),
            }
        }
        let mut frame = Vec::new();
        match req.raw_multibulk() {
            Some(raw) => frame.extend_from_slice(raw),
            None => req.write_multibulk(&mut frame),
        }
        let Some(tx) = self.clients[ci].tx.as_mut() else {
            return ERR_EXEC;
        };
        if tx.failed {
            // Redis keeps answering while a failed transaction waits for EXEC.
            return b"+QUEUED\r\n";
        }
        if tx.bytes + frame.len() > MAX_BYTES {
            return ERR_TOO_LARGE;
        }
        tx.bytes += frame.len();
        tx.place = place;
        tx.cmds.push(frame);
        b"+QUEUED\r\n"
    }

    /// Sends a transaction to its server; only `EXEC`'s reply reaches the client.
    fn exec(&mut self, ci: usize, tx: Transaction) {
        if tx.failed {
            return self.local_reply(ci, ERR_ABORT);
        }
        let p = self.clients[ci].pool;
        let server = match tx.place {
            None => return self.local_reply(ci, b"*0\r\n"),
            Some(Place::Server(s)) => Some(s),
            Some(Place::Slot(slot)) => self.pools[p].placement.for_slot(slot),
        };
        let Some(s) = server else {
            return self.fail_forward(ci, p, b"-CLUSTERDOWN Hash slot not served\r\n");
        };
        let b = match self.backend_for(p, s, ci) {
            Ok(b) => b,
            Err(msg) => return self.fail_forward(ci, p, &msg),
        };
        let c = &mut self.clients[ci];
        let kind = match c.resp3 {
            true => SlotKind::Resp3(Shape::Plain),
            false => SlotKind::Single,
        };
        let to = c.push(ci, 1, kind);
        self.enqueue(b, &[MULTI], ReplyTo::DISCARD, Expect::Any);
        for cmd in &tx.cmds {
            self.enqueue(b, &[cmd], ReplyTo::DISCARD, Expect::Any);
        }
        self.enqueue(b, &[EXEC], to, Expect::Any);
    }
}
