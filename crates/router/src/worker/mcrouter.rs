//! Requests of clients of an mcrouter config. Each is planned by the route tree; a plan that
//! is one server getting the request unchanged is passed on as a nutcracker pool's request
//! is ([`Planned::Server`]). Anything else is split per key and carried out by an [`Exec`]
//! held here until its last background send answered. Sends go out on the worker's
//! ordinary backend connections with a [`ReplyTo`] that names the execution instead of a
//! client; their replies (and failures) come back through `backend::Arrivals` and are fed
//! to the execution at the end of the loop turn. The client gets one reply per request in
//! its own slot, so its pipelined requests stay in order.
//!
//! A failed delete that a PoolRoute's asynclog spools is appended to its spool at once but
//! answered only after the end of the loop turn has synced that spool ([`Spooled`]): one
//! fsync per spool per turn, however many deletes the turn spooled.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::response::Expect;
use proto::Request;
use ring::RoutingKey;
use routetree::{AllMode, Plan, Send};
use slab::Slab;

use super::backend::NoBackend;
use super::client::{deliver, SlotKind};
use super::reply_to::{ReplyTo, EXEC_CLIENT};
use super::Worker;
use crate::asynclog::GroupCommit;
use crate::shared::McRoutes;
use routetree::exec::{Action, Exec, FailoverState};
use routetree::reply::{self, McResult, Reply};
use routetree::request::{single_key, ReqSpec};

/// One client request being carried out.
struct Running {
    exec: Exec,
    /// The client's slot.
    to: ReplyTo,
    /// The generation it was planned in: a send after a reload fails (its pool indexes
    /// belong to the old generation).
    routes: Arc<McRoutes>,
    /// A meta command with `q`: `Some(is mg)`.
    quiet: Option<bool>,
    replied: bool,
    /// Tells a reused slab index apart in [`ReplyTo::gen`].
    gen: u32,
}

/// A failed send whose delete was spooled this turn: its node is answered once the spool
/// is synced.
struct Spooled {
    x: usize,
    gen: u32,
    node: usize,
    result: McResult,
    /// Its spool in [`Execs::group`].
    ticket: usize,
}

/// A wait of an execution: when it is over, the execution, its generation, the node and
/// which of the node's timers.
type Timer = (Instant, usize, u32, usize, u8);

/// The executions of one worker.
#[derive(Default)]
pub(super) struct Execs {
    running: Slab<Running>,
    /// Spools appended to this turn, and the sends waiting for them.
    group: GroupCommit,
    spooled: Vec<Spooled>,
    /// Shadow copies (execution, its generation, node), sent once the turn's replies are out.
    copies: Vec<(usize, u32, usize)>,
    gen: u32,
    scratch: Vec<u8>,
    /// The key of the send being queued.
    key: Vec<u8>,
    rng: u64,
    /// FailoverRoutes' `failover_limit` buckets, and the generation they belong to.
    limits: FailoverState,
    limits_of: Option<Arc<McRoutes>>,
    /// LatencyInjectionRoutes' waits, soonest first.
    timers: BinaryHeap<Reverse<Timer>>,
}

impl Execs {
    /// The client whose request execution send `to` belongs to.
    pub(super) fn client_of(&self, to: ReplyTo) -> Option<(u32, u32)> {
        let run = self.running.get((to.seq >> 32) as usize)?;
        (run.gen == to.gen).then_some((run.to.client, run.to.gen))
    }

    /// The loop turn's time: RateLimitRoutes' buckets refill up to it.
    pub(super) fn set_now(&mut self, now: std::time::Instant) {
        self.limits.set_now(now);
    }

    /// xorshift64*: enough to sample shadow request fractions.
    fn sample(&mut self, fraction: f64) -> bool {
        if fraction >= 1.0 {
            return true;
        }
        if self.rng == 0 {
            self.rng = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
                | 1;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        (x as f64 / (1u64 << 53) as f64) < fraction
    }
}

/// What became of a request of an mcrouter config's client.
pub(super) enum Planned {
    /// Carried out (or answered) here.
    Done,
    /// Its plan is one server that gets the request exactly as the client sent it: passed
    /// on as a nutcracker pool's request is, to (pool, server).
    Server(usize, usize),
    /// Not a routed request (version, stats, ...): the router answers it.
    Here,
}

impl Worker {
    /// Carries out `req` with the route tree.
    pub(super) fn route_plan(&mut self, ci: usize, req: &Request<'_>) -> Planned {
        let Some(routes) = self.shared.mcrouter.clone() else {
            return Planned::Here;
        };
        let single = single_key(req);
        let admin = matches!(single, Some(("get" | "gets", k)) if k.starts_with(b"__mcrouter__."));
        if admin && self.admin_get(ci, req, &routes) {
            return Planned::Done;
        }
        let mut planned = None;
        let now = self.unix_now;
        let chunks_of = self.clients[ci].chunks_of;
        if let Some((op, key)) = single {
            let plan = match chunks_of {
                Some(base) => routes
                    .config
                    .plan_chunk_at(base, op, key, &routes.prefix, now),
                None => routes.config.plan_at(op, key, &routes.prefix, now),
            };
            if let Plan::Send(send) = &plan {
                let as_sent = send.keep_prefix || RoutingKey::parse(key).prefix.is_empty();
                let logged = send.asynclog.is_some() && crate::asynclog::enabled();
                if as_sent && send.exptime.is_empty() && !logged {
                    let p = routes.pools[send.pool];
                    if self.tko_blocks(p, send.index) {
                        self.local_reply(ci, McResult::Tko.error_reply());
                        return Planned::Done;
                    }
                    return Planned::Server(p, send.index);
                }
            }
            planned = Some(plan);
        }
        if self.route_exec(ci, req, routes, planned) {
            Planned::Done
        } else {
            Planned::Here
        }
    }

    /// Whether server `s` of pool `p` is TKO, so a send to it fails at once (counted).
    fn tko_blocks(&self, p: usize, s: usize) -> bool {
        let rt = &self.pools[p].rt;
        let tko = rt.is_tko(s);
        if tko {
            rt.counters[self.id].tko_failed[s].add(1);
        }
        tko
    }

    /// Carries out `req` with an [`Exec`]. False when the request is not routed.
    /// `planned`: the plan `route_plan` already made for a single-key request.
    fn route_exec(
        &mut self,
        ci: usize,
        req: &Request<'_>,
        routes: Arc<McRoutes>,
        planned: Option<Plan>,
    ) -> bool {
        if let Request::Get { keys, .. } | Request::Gat { keys, .. } | Request::LeaseGet { keys } =
            req
        {
            if keys.into_iter().any(|k| k.is_err()) {
                self.local_reply(ci, proto::reply::CLIENT_ERROR_BAD_FORMAT);
                return true;
            }
        }
        let Some(specs) = ReqSpec::split(req) else {
            return false;
        };
        if specs.is_empty() {
            self.local_reply(ci, proto::reply::ERROR);
            return true;
        }
        let (kind, quiet) = match req {
            Request::Store { noreply: true, .. }
            | Request::LeaseSet { noreply: true, .. }
            | Request::Delete { noreply: true, .. }
            | Request::Arith { noreply: true, .. }
            | Request::Touch { noreply: true, .. }
            | Request::FlushAll { noreply: true, .. } => (SlotKind::NoReply, None),
            Request::MetaGet { flags, .. } if flags.noreply() => (SlotKind::Single, Some(true)),
            Request::MetaSet { flags, .. }
            | Request::MetaDelete { flags, .. }
            | Request::MetaArithmetic { flags, .. }
                if flags.noreply() =>
            {
                (SlotKind::Single, Some(false))
            }
            _ => (SlotKind::Single, None),
        };
        let chunks_of = self.clients[ci].chunks_of;
        let plans: Vec<Plan> = match planned {
            Some(plan) if specs.len() == 1 => vec![plan],
            _ => specs
                .iter()
                .map(|spec| match spec {
                    ReqSpec::FlushAll { .. } => every_server(&routes),
                    _ if chunks_of.is_some() => routes.config.plan_chunk_at(
                        chunks_of.unwrap_or("get"),
                        spec.operation(),
                        spec.key(),
                        &routes.prefix,
                        self.unix_now,
                    ),
                    _ => routes.config.plan_at(
                        spec.operation(),
                        spec.key(),
                        &routes.prefix,
                        self.unix_now,
                    ),
                })
                .collect(),
        };
        let mc = &mut self.mc;
        if !mc
            .limits_of
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, &routes))
        {
            mc.limits.clear();
            mc.limits_of = Some(routes.clone());
        }
        let mut exec = Exec::new(specs, plans, &mut |f| mc.sample(f));
        exec.pin_leases(&routes.leases, std::time::Instant::now());
        let to = self.clients[ci].push(ci, 1, kind);
        self.mc.gen = self.mc.gen.wrapping_add(1);
        let x = self.mc.running.insert(Running {
            exec,
            to,
            routes,
            quiet,
            replied: false,
            gen: self.mc.gen,
        });
        let mut actions = Vec::new();
        self.mc.running[x]
            .exec
            .start(&mut self.mc.limits, &mut actions);
        self.drive(x, actions);
        true
    }

    /// Feeds the replies that arrived this turn to their executions.
    pub(super) fn run_arrivals(&mut self) {
        for a in self.arrivals.take() {
            let x = (a.to.seq >> 32) as usize;
            let node = (a.to.seq & 0xffff_ffff) as usize;
            let mc = &mut self.mc;
            let Some(run) = mc.running.get_mut(x) else {
                continue;
            };
            if run.gen != a.to.gen {
                continue;
            }
            let reply = match a.failed {
                Some(result) => match asynclog(run, node, result, &mut mc.group) {
                    Ok(ticket) => {
                        let gen = run.gen;
                        mc.spooled.push(Spooled {
                            x,
                            gen,
                            node,
                            result,
                            ticket,
                        });
                        continue;
                    }
                    Err(reply) => reply,
                },
                None => {
                    let req = run.exec.request(node);
                    let sent = req.key_for(run.exec.send(node));
                    Reply::from_server(&reply::rekey(&a.reply, sent, req.key()))
                }
            };
            let mut actions = Vec::new();
            run.exec.on_reply(node, reply, &mut mc.limits, &mut actions);
            self.drive(x, actions);
        }
    }

    /// Carries out an execution's actions, and those they lead to.
    fn drive(&mut self, x: usize, mut actions: Vec<Action>) {
        let mut i = 0;
        while i < actions.len() {
            match actions[i] {
                Action::Send { node } => {
                    if let Err(reply) = self.send_node(x, node) {
                        let mc = &mut self.mc;
                        let run = &mut mc.running[x];
                        let result = reply.result;
                        match asynclog(run, node, result, &mut mc.group) {
                            Ok(ticket) => mc.spooled.push(Spooled {
                                x,
                                gen: run.gen,
                                node,
                                result,
                                ticket,
                            }),
                            Err(_) => run.exec.on_reply(node, reply, &mut mc.limits, &mut actions),
                        }
                    }
                }
                Action::SendCopy { node } => {
                    let gen = self.mc.running[x].gen;
                    self.mc.copies.push((x, gen, node));
                }
                Action::Done { .. } => self.answer_client(x),
                Action::Plan { node } => {
                    let now = self.unix_now;
                    let mc = &mut self.mc;
                    let run = &mut mc.running[x];
                    let config = &run.routes.config;
                    run.exec
                        .on_plan(node, config, now, &mut mc.limits, &mut actions);
                }
                Action::Wait { node, timer, ms } => {
                    let due = self.now + Duration::from_millis(ms);
                    let gen = self.mc.running[x].gen;
                    self.mc.timers.push(Reverse((due, x, gen, node, timer)));
                }
            }
            i += 1;
        }
        let run = &mut self.mc.running[x];
        let issued = run.exec.take_issued();
        if !issued.is_empty() {
            let now = std::time::Instant::now();
            for lease in &issued {
                run.routes.leases.record(lease, now);
            }
        }
        if self.mc.running[x].exec.finished() {
            self.mc.running.remove(x);
        }
    }

    /// Goes on with the executions whose waits are over.
    pub(super) fn fire_timers(&mut self) {
        while let Some(Reverse((due, x, gen, node, timer))) = self.mc.timers.peek().copied() {
            if due > self.now {
                return;
            }
            self.mc.timers.pop();
            let mc = &mut self.mc;
            let Some(run) = mc.running.get_mut(x).filter(|run| run.gen == gen) else {
                continue;
            };
            let mut actions = Vec::new();
            run.exec.on_timer(node, timer, &mut mc.limits, &mut actions);
            self.drive(x, actions);
        }
    }

    /// How long until the next wait is over (rounded up to a whole millisecond, so that
    /// the poll does not wake just before it).
    pub(super) fn next_timer(&self) -> Option<Duration> {
        let Reverse((due, ..)) = self.mc.timers.peek()?;
        let left = due.saturating_duration_since(Instant::now());
        Some(left + Duration::from_micros(999))
    }

    /// Whether shadow copies wait for [`Worker::send_copies`].
    pub(super) fn has_copies(&self) -> bool {
        !self.mc.copies.is_empty()
    }

    /// Sends the shadow copies held back while the turn's client replies went out.
    pub(super) fn send_copies(&mut self) {
        for (x, gen, node) in std::mem::take(&mut self.mc.copies) {
            if self.mc.running.get(x).is_some_and(|run| run.gen == gen) {
                self.drive(x, vec![Action::Send { node }]);
            }
        }
    }

    /// Whether deletes spooled this turn wait for [`Worker::commit_spooled`].
    pub(super) fn has_spooled(&self) -> bool {
        !self.mc.spooled.is_empty()
    }

    /// The end of a loop turn: syncs each spool appended to in it once, then answers the
    /// spooled deletes, as mcrouter does when the spool holds them, with their error when
    /// the sync failed.
    pub(super) fn commit_spooled(&mut self) {
        let durable = self.mc.group.commit();
        for s in std::mem::take(&mut self.mc.spooled) {
            let mc = &mut self.mc;
            let Some(run) = mc.running.get_mut(s.x) else {
                continue;
            };
            if run.gen != s.gen {
                continue;
            }
            let reply = if durable[s.ticket] {
                reply::default_reply(run.exec.request(s.node).reply_op())
            } else {
                Reply::error(s.result)
            };
            let mut actions = Vec::new();
            run.exec
                .on_reply(s.node, reply, &mut mc.limits, &mut actions);
            self.drive(s.x, actions);
        }
    }

    /// Queues one send; `Err` is the error met at once (TKO, no connection, too many
    /// requests on the connection, stale plan).
    fn send_node(&mut self, x: usize, node: usize) -> Result<(), Reply> {
        let run = &self.mc.running[x];
        let current = self.shared.mcrouter.as_ref();
        if !current.is_some_and(|c| Arc::ptr_eq(c, &run.routes)) {
            return Err(Reply::error(McResult::LocalError));
        }
        let send: &Send = run.exec.send(node);
        let p = run.routes.pools[send.pool];
        let s = send.index;
        if self.tko_blocks(p, s) {
            return Err(Reply::error(McResult::Tko));
        }
        let mut bytes = std::mem::take(&mut self.mc.scratch);
        bytes.clear();
        let req = run.exec.request(node);
        req.write(send, &mut bytes);
        let expect = req.expect();
        // Its items must be of the key as sent (the routing prefix may be stripped).
        let mut key = std::mem::take(&mut self.mc.key);
        key.clear();
        key.extend_from_slice(req.key_for(send));
        let client = (run.to.client, run.to.gen);
        let to = ReplyTo {
            client: EXEC_CLIENT,
            gen: run.gen,
            seq: (x as u64) << 32 | node as u64,
            frag: 0,
        };
        let result = match self.backend_or(p, s, 0) {
            Ok(b) => {
                match expect {
                    Expect::Get | Expect::LeaseGet => {
                        self.enqueue_keyed(b, &[&bytes], to, expect, [&key[..]])
                    }
                    _ => self.enqueue(b, &[&bytes], to, expect),
                }
                self.backends[b].bar(client.0, client.1);
                Ok(())
            }
            Err(NoBackend::Overloaded(bytes)) => Err(Reply {
                bytes,
                result: McResult::LocalError,
            }),
            Err(NoBackend::Failed(_)) => Err(Reply::error(McResult::ConnectError)),
        };
        self.mc.scratch = bytes;
        self.mc.key = key;
        result
    }

    /// Every part answered: the client's reply goes to its slot.
    fn answer_client(&mut self, x: usize) {
        let run = &mut self.mc.running[x];
        if run.replied {
            return;
        }
        let Some(parts) = run.exec.replies() else {
            return;
        };
        run.replied = true;
        let mut out = Vec::new();
        if matches!(
            run.exec.parts_requests()[0],
            ReqSpec::Get { .. } | ReqSpec::LeaseGet { .. }
        ) {
            let owned: Vec<Reply> = parts.into_iter().cloned().collect();
            reply::merge_gets(&owned, &mut out);
        } else {
            let first = &parts[0].bytes;
            let hidden = run.quiet.is_some_and(|mg| reply::quiet_hides(mg, first));
            if !hidden {
                out.extend_from_slice(first);
            }
        }
        let to = run.to;
        deliver(
            &mut self.clients,
            &mut self.dirty_clients,
            to,
            &out,
            &[],
            true,
        );
    }
}

/// A send that failed with `result`: a delete through a PoolRoute with `asynclog` is
/// appended to its server's spool (`Ok`: its ticket in `group`; it is answered once the
/// spool is synced); anything else gets its error reply.
fn asynclog(
    run: &Running,
    node: usize,
    result: McResult,
    group: &mut GroupCommit,
) -> Result<usize, Reply> {
    let send = run.exec.send(node);
    if send.asynclog.is_none() || !crate::asynclog::spools(result) {
        return Err(Reply::error(result));
    }
    let req = run.exec.request(node);
    let server = run
        .routes
        .config
        .pools
        .get(send.pool)
        .and_then(|p| p.servers.get(send.index));
    server
        .and_then(|s| crate::asynclog::spool_delete(&s.host, s.port, req.key_for(send), group))
        .ok_or_else(|| Reply::error(result))
}

/// flush_all: every server of every pool, all answering (the worst reply wins).
fn every_server(routes: &McRoutes) -> Plan {
    let mut plans = Vec::new();
    for (pool, p) in routes.config.pools.iter().enumerate() {
        for index in 0..p.servers.len() {
            plans.push(Plan::Send(Send {
                pool,
                index,
                keep_prefix: true,
                exptime: Vec::new(),
                asynclog: None,
            }));
        }
    }
    if plans.is_empty() {
        return Plan::Null;
    }
    Plan::All {
        mode: AllMode::Sync,
        plans,
    }
}
