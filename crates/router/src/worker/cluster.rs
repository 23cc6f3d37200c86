//! Redis Cluster pools: each command goes to its hash slot's primary; a redirection the
//! cluster answers with (`MOVED`, `ASK`) is followed here, and `TRYAGAIN`/`CLUSTERDOWN`
//! retried shortly, so clients never see them.

use std::time::{Duration, Instant};

use proto::redis_cmd::{self, CommandPlan, Kind};
use proto::resp::cluster::{parse_redirect, Redirect};
use proto::resp::RespRequest;
use proto::response::Expect;
use ring::redis_slot::redis_slot;

use super::client::{RedisMulti, SlotKind};
use super::reply_to::ReplyTo;
use super::Worker;
use proto::resp::resp3::Shape;

/// Redis Cluster's reply to keys in more than one slot.
pub const ERR_CROSSSLOT: &[u8] = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
/// A slot no primary serves (Redis Cluster's own text).
const ERR_UNSERVED: &[u8] = b"-CLUSTERDOWN Hash slot not served\r\n";

/// Redirections followed for one command before its last reply is passed on.
const MAX_REDIRECTS: u8 = 8;
/// How long a `TRYAGAIN` waits (a slot's keys are moving) and how long a
/// `CLUSTERDOWN` or an unknown node waits (a failover or a new node).
const TRYAGAIN_WAIT: Duration = Duration::from_millis(20);
const DOWN_WAIT: Duration = Duration::from_millis(100);
/// Without a pool timeout, how long a command keeps being retried.
const RETRY_FOR: Duration = Duration::from_secs(2);

/// What a backend connection keeps of a cluster command it sent (its bytes are in the
/// connection's `resend_bytes`).
#[derive(Clone, Copy)]
pub(super) struct ResendMeta {
    pub len: u32,
    pub slot: u16,
    pub tries: u8,
    pub first: Instant,
    /// A read sent to a replica: should the connection fail, the primary answers it.
    pub replica: bool,
}

/// A cluster command taken from its connection to be sent again.
pub(super) struct Resend {
    pub frame: Vec<u8>,
    pub slot: u16,
    pub tries: u8,
    pub first: Instant,
}

/// Sent again after a redirection, a retry or a failed replica: to the primary, which
/// knows the slot's latest state (a replica may lag behind a move).
const AGAIN_TO_REPLICA: bool = false;

/// A reply that asked for the command to go elsewhere, or later.
pub(super) struct Redirected {
    /// The pool as the command was sent (a reload may have replaced it since).
    rt: std::sync::Arc<crate::shared::PoolRt>,
    /// The server that answered.
    from: usize,
    to: ReplyTo,
    resend: Box<Resend>,
    redirect: Redirect,
    /// The reply, passed on when the command may not be retried any more.
    reply: Vec<u8>,
}

/// Commands waiting to go again: now (followed at the end of the loop turn) or later.
#[derive(Default)]
pub(super) struct Redirects {
    now: Vec<Redirected>,
    later: Vec<(Instant, Redirected)>,
}

impl Redirects {
    pub(super) fn is_empty(&self) -> bool {
        self.now.is_empty()
    }

    /// Whether `reply` to cluster command `meta` (bytes `frame`) is one to follow; then it
    /// is kept.
    pub(super) fn take<'f>(
        &mut self,
        rt: &std::sync::Arc<crate::shared::PoolRt>,
        from: usize,
        to: ReplyTo,
        meta: &ResendMeta,
        frame: impl Iterator<Item = &'f u8>,
        reply: &[u8],
    ) -> bool {
        if reply.first() != Some(&b'-') {
            return false;
        }
        let Some(redirect) = parse_redirect(reply) else {
            return false;
        };
        self.now.push(Redirected {
            rt: rt.clone(),
            from,
            to,
            resend: Box::new(Resend {
                frame: frame.copied().collect(),
                slot: meta.slot,
                tries: meta.tries,
                first: meta.first,
            }),
            redirect,
            reply: reply.to_vec(),
        });
        true
    }
}

impl Worker {
    /// The server of pool `p` serving `slot`, None when no primary does.
    fn slot_owner(&mut self, p: usize, slot: u16) -> Option<usize> {
        self.pools[p].placement.for_slot(slot)
    }

    /// Whether pool `p` places keys by a cluster's slot map.
    #[inline]
    pub(super) fn is_cluster(&self, p: usize) -> bool {
        self.pools[p]
            .rt
            .learned
            .as_ref()
            .is_some_and(|l| l.slots.is_some())
    }

    /// A keyed or multi-key command of a pool reading from replicas: a read-only one goes
    /// to a replica (a cluster's: of its slot's primary), anything else to the primary.
    /// A Sentinel pool has one data set: the whole request goes to one server.
    pub(super) fn route_replica_pool(
        &mut self,
        ci: usize,
        p: usize,
        plan: &CommandPlan,
        req: &RespRequest<'_>,
    ) {
        let read = plan.read_only();
        if self.is_cluster(p) {
            return self.route_cluster(ci, p, plan, req, read);
        }
        let placement = &mut self.pools[p].placement;
        let primary = placement.for_any();
        let target = match read {
            true => placement.for_read(0),
            false => primary.map(|s| (s, false)),
        };
        let Some((mut s, replica)) = target else {
            return self.fail_forward(ci, p, &self.pool_error(p, super::NO_SERVER));
        };
        if replica {
            match self.backend_for(p, s, ci) {
                Ok(_) => self.pools[p].rt.counters[self.id].replica_reads.add(1),
                Err(_) => {
                    self.rest_replica(p, s);
                    s = primary.unwrap_or(s);
                }
            }
        }
        self.forward_redis(ci, p, s, req)
    }

    /// Server `s` of pool `p` failed: it takes no reads for a while.
    pub(super) fn rest_replica(&self, p: usize, s: usize) {
        let rt = &self.pools[p].rt;
        if let Some(l) = &rt.learned {
            l.rest(s, rt.uptime_ms());
        }
    }

    /// A read a replica took and never answered (its connection failed): the primary
    /// answers it; `reply` is the error passed on should that be impossible.
    pub(super) fn retry_on_primary(
        &mut self,
        rt: &std::sync::Arc<crate::shared::PoolRt>,
        from: usize,
        to: ReplyTo,
        meta: &ResendMeta,
        frame: Vec<u8>,
        reply: &[u8],
    ) {
        let again = Redirected {
            rt: rt.clone(),
            from,
            to,
            resend: Box::new(Resend {
                frame,
                slot: meta.slot,
                tries: meta.tries.saturating_add(1),
                first: meta.first,
            }),
            redirect: Redirect::ClusterDown,
            reply: reply.to_vec(),
        };
        self.redirects.later.push((self.now, again));
    }

    /// A keyed or multi-key command of a cluster pool (`read`: it may go to a replica).
    pub(super) fn route_cluster(
        &mut self,
        ci: usize,
        p: usize,
        plan: &CommandPlan,
        req: &RespRequest<'_>,
        read: bool,
    ) {
        match plan.kind() {
            Kind::Keyed => {
                let mut slot = None;
                for i in plan.key_indexes() {
                    let s = redis_slot(req.arg(i).unwrap_or_default());
                    match slot {
                        Some(first) if first != s => return self.local_reply(ci, ERR_CROSSSLOT),
                        _ => slot = Some(s),
                    }
                }
                let Some(slot) = slot else {
                    return self.local_reply(ci, redis_cmd::ERR_EVAL_NO_KEYS);
                };
                let c = &mut self.clients[ci];
                let kind = match c.resp3 {
                    true => SlotKind::Resp3(Shape::of(req)),
                    false => SlotKind::Single,
                };
                let to = c.push(ci, 1, kind);
                let mut inline = Vec::new();
                let frame = match req.raw_multibulk() {
                    Some(raw) => raw,
                    None => {
                        req.write_multibulk(&mut inline);
                        &inline
                    }
                };
                self.send_cluster(p, to, frame, slot, 0, self.now, None, read);
            }
            Kind::MultiGet | Kind::MultiSum | Kind::MultiSet => {
                let parts = redis_cmd::split_multi(plan, req, |k| usize::from(redis_slot(k)));
                let kind = plan.kind();
                self.pools[p].rt.counters[self.id]
                    .pool
                    .fragments
                    .add(parts.len() as i64);
                let resp3 = self.clients[ci].resp3;
                let (m, frames) = RedisMulti::of_parts(kind, plan.key_count(), resp3, parts);
                let c = &mut self.clients[ci];
                let to = c.push(ci, frames.len() as u32, SlotKind::RedisMulti(Box::new(m)));
                let now = self.now;
                for (f, (slot, frame)) in frames.into_iter().enumerate() {
                    let slot = slot as u16;
                    let to = ReplyTo {
                        frag: f as u16,
                        ..to
                    };
                    self.send_cluster(p, to, &frame, slot, 0, now, None, read);
                }
            }
            _ => {}
        }
    }

    /// Sends `frame` for `slot` to its primary, a replica of it (`read`) or server `ask`
    /// (after `ASKING`); its reply goes to `to`.
    #[allow(clippy::too_many_arguments)]
    fn send_cluster(
        &mut self,
        p: usize,
        to: ReplyTo,
        frame: &[u8],
        slot: u16,
        tries: u8,
        first: Instant,
        ask: Option<usize>,
        read: bool,
    ) {
        let (server, replica) = match ask {
            Some(s) => (Some(s), false),
            None if read => match self.pools[p].placement.for_read(slot) {
                Some((s, replica)) => (Some(s), replica),
                None => (None, false),
            },
            None => (self.slot_owner(p, slot), false),
        };
        let Some(s) = server else {
            self.pools[p].rt.counters[self.id].pool.forward_error.add(1);
            return self.answer_slot(to, ERR_UNSERVED);
        };
        let b = match self.backend_for(p, s, to.client as usize) {
            Ok(b) => b,
            Err(_) if replica => {
                self.rest_replica(p, s);
                return self.send_cluster(p, to, frame, slot, tries, first, None, false);
            }
            Err(msg) => {
                self.pools[p].rt.counters[self.id].pool.forward_error.add(1);
                if let Some(l) = &self.pools[p].rt.learned {
                    if let Some(slots) = &l.slots {
                        slots.mark_stale();
                    }
                }
                return self.answer_slot(to, &msg);
            }
        };
        if ask.is_some() {
            self.enqueue(
                b,
                &[b"*1\r\n$6\r\nASKING\r\n"],
                ReplyTo::DISCARD,
                Expect::Any,
            );
        }
        self.enqueue(b, &[frame], to, Expect::Any);
        if replica {
            self.pools[p].rt.counters[self.id].replica_reads.add(1);
        }
        let meta = ResendMeta {
            len: frame.len() as u32,
            slot,
            tries,
            first,
            replica,
        };
        self.backends[b].keep_for_resend(to, meta, frame);
    }

    /// Follows the redirections the turn's replies asked for.
    pub(super) fn run_redirects(&mut self) {
        for r in std::mem::take(&mut self.redirects.now) {
            self.follow(r);
        }
    }

    fn follow(&mut self, r: Redirected) {
        crate::failovers::redirected(&r.rt, r.from, &r.redirect);
        let found = (0..self.pools.len())
            .find(|&p| self.pools[p].rt.cfg.name == r.rt.cfg.name && self.is_cluster(p));
        let Some(p) = found else {
            return self.answer_slot(r.to, &r.reply);
        };
        let rt = self.pools[p].rt.clone();
        let Some(slots) = rt.learned.as_ref().and_then(|l| l.slots.as_ref()) else {
            return self.answer_slot(r.to, &r.reply);
        };
        let limit = rt.timeout().unwrap_or(RETRY_FOR);
        if r.resend.tries >= MAX_REDIRECTS || r.resend.first.elapsed() >= limit {
            return self.answer_slot(r.to, &r.reply);
        }
        let Resend {
            frame,
            slot,
            tries,
            first,
        } = *r.resend;
        let tries = tries + 1;
        let target = match &r.redirect {
            Redirect::Moved { addr, .. } | Redirect::Ask { addr, .. } => {
                crate::topology::full_addr(&r.rt, addr, r.from)
                    .and_then(|a| crate::topology::server_at(&rt, &a))
            }
            _ => None,
        };
        match (&r.redirect, target) {
            (Redirect::Moved { slot: moved, .. }, Some(s)) => {
                slots
                    .moved
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                slots.moved_to(*moved, s as u16);
                self.send_cluster(p, r.to, &frame, slot, tries, first, None, AGAIN_TO_REPLICA);
            }
            (Redirect::Ask { .. }, Some(s)) => {
                slots.ask.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.send_cluster(p, r.to, &frame, slot, tries, first, Some(s), false);
            }
            (redirect, _) => {
                // A node not known yet, a slot mid-move or a failover: the map is read
                // again and the command waits a little.
                slots.mark_stale();
                slots
                    .retried
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let wait = match redirect {
                    Redirect::TryAgain => TRYAGAIN_WAIT,
                    _ => DOWN_WAIT,
                };
                let resend = Box::new(Resend {
                    frame,
                    slot,
                    tries,
                    first,
                });
                self.redirects
                    .later
                    .push((self.now + wait, Redirected { resend, ..r }));
            }
        }
    }

    /// Sends the commands whose wait is over.
    pub(super) fn fire_redirects(&mut self) {
        if self.redirects.later.is_empty() {
            return;
        }
        let now = self.now;
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.redirects.later)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.redirects.later = wait;
        for (_, r) in due {
            let Resend {
                frame,
                slot,
                tries,
                first,
            } = *r.resend;
            let found = (0..self.pools.len())
                .find(|&p| self.pools[p].rt.cfg.name == r.rt.cfg.name && self.is_cluster(p));
            match found {
                Some(p) => {
                    self.send_cluster(p, r.to, &frame, slot, tries, first, None, AGAIN_TO_REPLICA)
                }
                None => self.answer_slot(r.to, &r.reply),
            }
        }
    }

    /// How long until the next waiting command goes.
    pub(super) fn next_redirect(&self) -> Option<Duration> {
        let at = self.redirects.later.iter().map(|(at, _)| *at).min()?;
        Some(at.saturating_duration_since(Instant::now()) + Duration::from_micros(999))
    }
}
