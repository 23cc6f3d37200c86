//! Carrying out the [`Plan`]s of one client request: a tree of nodes, one per plan node,
//! that says which servers to send to next and what the client gets once replies come
//! back. Pure: the worker sends what [`Action::Send`] names and feeds each reply back with
//! [`Exec::on_reply`]; nothing here does I/O or looks at the clock.
//!
//! Semantics follow mcrouter's route handles: All* modes, FailoverRoute (moves on only on
//! the error results its `failover_errors` name for the operation), MissFailoverRoute,
//! WarmUpRoute (a warm hit fills cold in the background with an `add`, or for gets/gat/gats
//! before cold is asked again; deletes reach cold and warm, cold answers once both did),
//! shadows (sent once the main child has answered, replies ignored), NullRoute's default
//! reply and ErrorRoute's error. A FailoverRoute notes which
//! child handed out a lease ([`Exec::take_issued`]) and sends the request that spends it
//! back there ([`Exec::pin_leases`]); the book itself is `crate::lease`'s.

use crate::{AllMode, FailoverLimit, Plan, RouteId, Send, TokenRate};

use std::time::Instant;

use crate::lease::{self, Issued, LeaseBook};
use crate::reply::{self, default_reply, is_hit, McResult, Reply};
use crate::request::ReqSpec;

/// What the worker does next.
// `node` and `part` are described by each variant.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send node `node`'s request ([`Exec::request`]) to its server ([`Exec::send`]), then
    /// call [`Exec::on_reply`] with the reply or the error it met.
    Send { node: usize },
    /// As `Send`, for a shadow copy: the client already has its reply, so the worker sends
    /// it after the replies that are ready, not before them.
    SendCopy { node: usize },
    /// Part `part` (a key of the client's request) has its reply ([`Exec::part`]).
    Done { part: usize },
    /// Call [`Exec::on_timer`] with `node` and `timer` once `ms` milliseconds have passed.
    Wait { node: usize, timer: u8, ms: u64 },
    /// Call [`Exec::on_plan`] with `node` and the config the request was planned with.
    Plan { node: usize },
}

struct Node {
    parent: Option<usize>,
    /// Index into `requests` of what this subtree sends.
    req: usize,
    done: bool,
    /// The client part this node answers when it is a root.
    part: Option<usize>,
    kind: Kind,
}

enum Kind {
    Send(Send),
    All {
        mode: AllMode,
        children: Vec<usize>,
        /// Replies in arrival order.
        replies: Vec<Reply>,
        /// The first child's reply, once there.
        first_reply: Option<Reply>,
    },
    Failover {
        route: RouteId,
        /// One per child of the route, in config order.
        children: Vec<usize>,
        /// The failover policy's order (indexes of `children`), and the position in it.
        order: Vec<usize>,
        next: usize,
        /// The child asked last (an index of `children`).
        current: usize,
        /// Errors other than `tko` met, and how many end the failovers.
        error_tries: usize,
        max_error_tries: usize,
        errors: Vec<String>,
        limit: Option<FailoverLimit>,
        /// LeastFailuresPolicy's `max_tries`: `order` is made when the request starts.
        least_failures: Option<usize>,
        /// The child that handed out the lease this request spends: no failover.
        pinned: Option<usize>,
    },
    MissFailover {
        children: Vec<usize>,
        best: bool,
        next: usize,
        replies: Vec<Reply>,
    },
    WarmUp {
        cold: usize,
        warm: usize,
        warm_plan: Plan,
        cold_plan: Plan,
        exptime: u32,
        asked_warm: bool,
    },
    Shadowed {
        main: usize,
        shadows: Vec<usize>,
    },
    RateLimit {
        child: usize,
        fallback: Option<usize>,
        rate: TokenRate,
        bucket: (RouteId, u8),
    },
    /// A warm hit being copied to cold: first the read of the warm item, then the add.
    Fill {
        read: usize,
        cold_plan: Plan,
        exptime: u32,
    },
    /// KeySplitRoute's replica: `child` runs a copy of the request with `key`.
    Rekey {
        child: usize,
        key: Vec<u8>,
    },
    L1L2(keysplit::L1L2),
    /// LatencyInjectionRoute.
    Delay(choice::Delay),
    /// WarmUpRoute's gets/gat/gats: cold, warm, the add to cold, cold again.
    WarmUpCas(warmup_cas::WarmUpCas),
    /// WarmUpRoute's lease-get: cold, a read of warm, the lease-set to cold.
    WarmUpLease(warmup_lease::WarmUpLease),
    /// PoolRoute's `slow_warmup`: the target or the failover, chosen when it starts.
    SlowWarmUp(slow_warmup::SlowWarmUp),
    /// StagingRoute: `warm` answers, then staging gets its copy in the background.
    Staging(staging::Staging),
    /// L1L2SizeSplitRoute's get or set.
    SizeSplit(size_split::SizeSplit),
    /// A plan made once its key is known: `child` once [`Exec::on_plan`] made it.
    Deferred {
        plan: Box<crate::plan::Deferred>,
        child: Option<usize>,
    },
    /// L1L2CacheRoute's refresh of a negative entry: the read of l2, then a set of l1.
    L1Refresh(keysplit::Refresh),
    Null,
    Error(String),
}

/// The execution of one client request: one root per key.
pub struct Exec {
    requests: Vec<ReqSpec>,
    nodes: Vec<Node>,
    roots: Vec<usize>,
    parts: Vec<Option<Reply>>,
    open: usize,
    outstanding: usize,
    /// The worker's failover buckets, lent for the length of a `start`/`on_reply` call.
    limits: FailoverState,
    /// Leases FailoverRoutes saw handed out, for the worker's book.
    issued: Vec<Issued>,
}

impl Exec {
    /// One plan per request part (`plans[i]` runs `requests[i]`). `sample(p)` decides
    /// whether a shadow with request fraction `p` gets this request.
    pub fn new(
        requests: Vec<ReqSpec>,
        plans: Vec<Plan>,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Exec {
        let mut exec = Exec {
            open: plans.len(),
            parts: vec![None; plans.len()],
            requests,
            nodes: Vec::new(),
            roots: Vec::new(),
            outstanding: 0,
            limits: FailoverState::default(),
            issued: Vec::new(),
        };
        for (i, plan) in plans.iter().enumerate() {
            let root = exec.build(plan, None, i, sample);
            exec.nodes[root].part = Some(i);
            exec.roots.push(root);
        }
        exec
    }

    /// Before [`Exec::start`]: each FailoverRoute whose request spends a lease token the
    /// book knows (at `now`) sends it only to the child that handed it out.
    pub fn pin_leases(&mut self, book: &LeaseBook, now: Instant) {
        for node in &mut self.nodes {
            let Kind::Failover {
                route,
                children,
                pinned,
                ..
            } = &mut node.kind
            else {
                continue;
            };
            let req = &self.requests[node.req];
            if let Some(token) = lease::spent(req) {
                *pinned = book
                    .child(*route, req.key(), token, now)
                    .filter(|&c| c < children.len());
            }
        }
    }

    /// The leases handed out through FailoverRoutes since the last call.
    pub fn take_issued(&mut self) -> Vec<Issued> {
        std::mem::take(&mut self.issued)
    }

    /// Starts every part; the actions come out in the order to carry them out.
    pub fn start(&mut self, limits: &mut FailoverState, out: &mut Vec<Action>) {
        std::mem::swap(&mut self.limits, limits);
        for i in 0..self.roots.len() {
            let root = self.roots[i];
            self.start_node(root, out);
        }
        std::mem::swap(&mut self.limits, limits);
    }

    /// The server a [`Action::Send`] node names.
    pub fn send(&self, node: usize) -> &Send {
        match &self.nodes[node].kind {
            Kind::Send(s) => s,
            _ => unreachable!("Action::Send names Send nodes only"),
        }
    }

    /// The request a node sends.
    pub fn request(&self, node: usize) -> &ReqSpec {
        &self.requests[self.nodes[node].req]
    }

    /// The requests of the client's parts, in order.
    pub fn parts_requests(&self) -> &[ReqSpec] {
        &self.requests[..self.roots.len()]
    }

    /// Every part's reply, once all are there.
    pub fn replies(&self) -> Option<Vec<&Reply>> {
        self.parts.iter().map(Option::as_ref).collect()
    }

    /// Whether nothing is in flight any more (background sends included).
    pub fn finished(&self) -> bool {
        self.open == 0 && self.outstanding == 0
    }

    /// The reply (or the error met) for a node that was sent.
    pub fn on_reply(
        &mut self,
        node: usize,
        reply: Reply,
        limits: &mut FailoverState,
        out: &mut Vec<Action>,
    ) {
        std::mem::swap(&mut self.limits, limits);
        self.outstanding = self.outstanding.saturating_sub(1);
        self.complete(node, reply, out);
        std::mem::swap(&mut self.limits, limits);
    }

    fn build(
        &mut self,
        plan: &Plan,
        parent: Option<usize>,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> usize {
        if let Plan::KeySplit {
            replicas,
            fanout,
            pick,
        } = plan
        {
            return self.build_key_split(replicas, *fanout, *pick, parent, req, sample);
        }
        if let Plan::Random { plans } = plan {
            return self.build_random(plans, parent, req, sample);
        }
        if let Some(l1) = self.size_split_whole(plan, req) {
            return self.build(l1, parent, req, sample);
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            parent,
            req,
            done: false,
            part: None,
            kind: Kind::Null,
        });
        let mut list = |exec: &mut Exec, plans: &[Plan]| -> Vec<usize> {
            plans
                .iter()
                .map(|p| exec.build(p, Some(id), req, sample))
                .collect()
        };
        let kind = match plan {
            Plan::Send(s) => Kind::Send(s.clone()),
            Plan::All { mode, plans } => Kind::All {
                mode: *mode,
                children: list(self, plans),
                replies: Vec::new(),
                first_reply: None,
            },
            Plan::Failover {
                plans,
                order,
                least_failures,
                max_error_tries,
                errors,
                limit,
                route,
            } => Kind::Failover {
                route: *route,
                children: list(self, plans),
                order: order.clone(),
                next: 0,
                current: 0,
                error_tries: 0,
                max_error_tries: *max_error_tries,
                errors: errors.clone(),
                limit: *limit,
                least_failures: *least_failures,
                pinned: None,
            },
            Plan::MissFailover {
                plans,
                return_best_on_error,
            } => Kind::MissFailover {
                children: list(self, plans),
                best: *return_best_on_error,
                next: 0,
                replies: Vec::new(),
            },
            Plan::WarmUp {
                cold,
                warm,
                fill,
                exptime,
            } if warmup_cas::rereads_cold(&self.requests[req]) => {
                self.build_warmup_cas(id, [cold, warm, fill], *exptime, req, sample)
            }
            Plan::WarmUp {
                cold,
                warm,
                fill,
                exptime,
            } if matches!(self.requests[req], ReqSpec::LeaseGet { .. }) => {
                self.build_warmup_lease(id, [cold, warm, fill], *exptime, req, sample)
            }
            Plan::WarmUp {
                cold,
                warm,
                fill,
                exptime,
            } => Kind::WarmUp {
                cold: self.build(cold, Some(id), req, sample),
                warm: self.build(warm, Some(id), req, sample),
                warm_plan: (**warm).clone(),
                cold_plan: (**fill).clone(),
                exptime: *exptime,
                asked_warm: false,
            },
            Plan::Shadowed { main, shadows } => {
                let main = self.build(main, Some(id), req, sample);
                let mut copies = Vec::new();
                for (fraction, plan) in shadows {
                    if sample(*fraction) {
                        copies.push(self.build(plan, Some(id), req, sample));
                    }
                }
                Kind::Shadowed {
                    main,
                    shadows: copies,
                }
            }
            Plan::Rekey { key, plan } => self.build_rekey(id, key, plan, req, sample),
            Plan::L1L2 { .. } => self.build_l1l2(id, plan, req, sample),
            Plan::SizeSplit { .. } => self.build_size_split(id, plan, req, sample),
            Plan::KeySplit { .. } | Plan::Random { .. } => unreachable!("built above"),
            Plan::Delay { .. } => self.build_delay(id, plan, req, sample),
            Plan::SlowWarmUp { .. } => self.build_slow_warmup(id, plan, req, sample),
            Plan::Staging { warm, staging, op } => {
                self.build_staging(id, warm, staging, *op, req, sample)
            }
            Plan::RateLimit {
                plan,
                fallback,
                rate,
                bucket,
            } => Kind::RateLimit {
                child: self.build(plan, Some(id), req, sample),
                fallback: fallback
                    .as_ref()
                    .map(|f| self.build(f, Some(id), req, sample)),
                rate: *rate,
                bucket: *bucket,
            },
            Plan::Deferred(d) => Kind::Deferred {
                plan: d.clone(),
                child: None,
            },
            Plan::Null => Kind::Null,
            Plan::Error(m) => Kind::Error(m.clone()),
        };
        self.nodes[id].kind = kind;
        id
    }

    fn start_node(&mut self, id: usize, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        match &self.nodes[id].kind {
            Kind::Send(_) => {
                self.outstanding += 1;
                out.push(Action::Send { node: id });
            }
            Kind::All { mode, children, .. } => {
                let (mode, children) = (*mode, children.clone());
                for c in children {
                    self.start_node(c, out);
                }
                if mode == AllMode::Async {
                    self.complete(id, default_reply(self.requests[req].reply_op()), out);
                }
            }
            Kind::Failover {
                route,
                children,
                order,
                limit,
                pinned,
                ..
            } => {
                if let Some(limit) = limit {
                    self.limits.earn(*route, limit);
                }
                let at = pinned.unwrap_or(order[0]);
                let first = children[at];
                if let Kind::Failover {
                    route,
                    current,
                    order,
                    least_failures,
                    ..
                } = &mut self.nodes[id].kind
                {
                    *current = at;
                    if let Some(max_tries) = *least_failures {
                        self.limits.order_by_failures(*route, order, max_tries);
                    }
                }
                self.start_node(first, out);
            }
            Kind::MissFailover { children, .. } => {
                let first = children[0];
                self.start_node(first, out);
            }
            Kind::WarmUp { cold, .. } => {
                let cold = *cold;
                self.start_node(cold, out);
            }
            // The copies go out once the main child has answered (see `child_done`), so
            // the client's reply never waits behind a shadow's send or its reply.
            Kind::Shadowed { main, .. } => {
                let main = *main;
                self.start_node(main, out);
            }
            Kind::Fill { read, .. } => {
                let read = *read;
                self.start_node(read, out);
            }
            Kind::Rekey { child, .. } => {
                let child = *child;
                self.start_node(child, out);
            }
            Kind::L1L2(l) => {
                let l1 = l.l1;
                self.start_node(l1, out);
            }
            Kind::SlowWarmUp(_) => self.start_slow_warmup(id, out),
            Kind::WarmUpCas(_) => self.start_warmup_cas(id, out),
            Kind::WarmUpLease(_) => self.start_warmup_lease(id, out),
            Kind::SizeSplit(s) => {
                let first = s.first;
                self.start_node(first, out);
            }
            Kind::Staging(st) => {
                let warm = st.warm;
                self.start_node(warm, out);
            }
            Kind::L1Refresh(r) => {
                let read = r.read;
                self.start_node(read, out);
            }
            Kind::Delay(_) => self.start_delay(id, out),
            Kind::Deferred { .. } => {
                self.outstanding += 1;
                out.push(Action::Plan { node: id });
            }
            Kind::RateLimit {
                child,
                fallback,
                rate,
                bucket,
            } => {
                let (child, fallback) = (*child, *fallback);
                if self.limits.take_token(*bucket, rate) {
                    self.start_node(child, out);
                } else if let Some(f) = fallback {
                    self.start_node(f, out);
                } else {
                    self.complete(id, default_reply(self.requests[req].reply_op()), out);
                }
            }
            Kind::Null => self.complete(id, default_reply(self.requests[req].reply_op()), out),
            Kind::Error(m) => {
                let reply = Reply::local_error(m);
                self.complete(id, reply, out)
            }
        }
    }

    fn complete(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        if self.nodes[id].done {
            return;
        }
        self.nodes[id].done = true;
        if let Some(part) = self.nodes[id].part {
            self.parts[part] = Some(reply);
            self.open -= 1;
            out.push(Action::Done { part });
            return;
        }
        if let Some(parent) = self.nodes[id].parent {
            self.child_done(parent, id, reply, out);
        }
    }

    fn child_done(&mut self, id: usize, child: usize, reply: Reply, out: &mut Vec<Action>) {
        if self.nodes[id].done {
            // Background children (AllAsync, AllInitial, shadows...) of a node that answered.
            return;
        }
        if matches!(self.nodes[id].kind, Kind::L1L2(_) | Kind::L1Refresh(_)) {
            return self.l1l2_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::Delay(_)) {
            return self.delay_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::SlowWarmUp(_)) {
            return self.slow_warmup_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::WarmUpCas(_)) {
            return self.warmup_cas_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::WarmUpLease(_)) {
            return self.warmup_lease_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::Staging(_)) {
            return self.staging_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::SizeSplit(_)) {
            return self.size_split_child_done(id, reply, out);
        }
        if matches!(self.nodes[id].kind, Kind::Deferred { .. }) {
            return self.complete(id, reply, out);
        }
        enum Next {
            Wait,
            Reply(Reply),
            /// Answer, then send the shadow copies.
            ReplyThenCopy(Reply, Vec<usize>),
            Start(usize),
            Fill(Reply),
            AddToCold(Reply),
        }
        let req = self.nodes[id].req;
        let next = match &mut self.nodes[id].kind {
            Kind::All {
                mode,
                children,
                replies,
                first_reply,
            } => {
                let total = children.len();
                let first = children[0] == child;
                if first {
                    *first_reply = Some(reply.clone());
                }
                replies.push(reply);
                let last = replies.last().cloned();
                match mode {
                    AllMode::Sync if replies.len() == total => Next::Reply(
                        reply::worst(replies)
                            .cloned()
                            .unwrap_or_else(|| Reply::error(McResult::LocalError)),
                    ),
                    AllMode::Initial if first => Next::Reply(last.expect("just pushed")),
                    AllMode::InitialSync if replies.len() == total => {
                        Next::Reply(first_reply.clone().expect("the first child answered"))
                    }
                    AllMode::Majority => match reply::majority(replies, total) {
                        Some(r) => Next::Reply(r.clone()),
                        None => Next::Wait,
                    },
                    AllMode::FirstHit => {
                        let r = last.expect("just pushed");
                        let good = match self.requests[req].reply_op() {
                            reply::Op::Update | reply::Op::MetaUpdate => r.result == McResult::Ok,
                            _ => is_hit(&r),
                        };
                        if good || replies.len() == total {
                            Next::Reply(r)
                        } else {
                            Next::Wait
                        }
                    }
                    AllMode::Fastest => {
                        let r = last.expect("just pushed");
                        if !r.result.is_error() || replies.len() == total {
                            Next::Reply(r)
                        } else {
                            Next::Wait
                        }
                    }
                    _ => Next::Wait,
                }
            }
            Kind::Failover {
                route,
                children,
                order,
                next,
                current,
                error_tries,
                max_error_tries,
                errors,
                limit,
                least_failures,
                pinned,
            } => {
                if least_failures.is_some() {
                    let error = reply.result.is_error();
                    self.limits.record(*route, children.len(), *current, error);
                }
                let listed = pinned.is_none()
                    && reply.result.is_error()
                    && errors.iter().any(|e| e == reply.result.name());
                // A TKO'd child was not asked: it does not count as a try (as in mcrouter).
                if listed && reply.result != McResult::Tko {
                    *error_tries += 1;
                }
                let fails_over = listed
                    && *next + 1 < order.len()
                    && *error_tries < *max_error_tries
                    && limit.as_ref().is_none_or(|l| self.limits.spend(*route, l));
                if fails_over {
                    *next += 1;
                    *current = order[*next];
                    Next::Start(children[*current])
                } else {
                    if let Some((token, ttl)) = lease::handed_out(&self.requests[req], &reply) {
                        self.issued.push(Issued {
                            route: *route,
                            key: self.requests[req].key().to_vec(),
                            token,
                            child: *current,
                            ttl,
                        });
                    }
                    Next::Reply(reply)
                }
            }
            Kind::MissFailover {
                children,
                best,
                next,
                replies,
            } => {
                if is_hit(&reply) {
                    Next::Reply(reply)
                } else if *next + 1 < children.len() {
                    replies.push(reply);
                    *next += 1;
                    Next::Start(children[*next])
                } else if *best {
                    replies.push(reply);
                    Next::Reply(reply::best_of(replies).cloned().expect("one at least"))
                } else {
                    Next::Reply(reply)
                }
            }
            Kind::WarmUp {
                warm, asked_warm, ..
            } => {
                if !*asked_warm && !is_hit(&reply) {
                    *asked_warm = true;
                    Next::Start(*warm)
                } else if *asked_warm && is_hit(&reply) {
                    Next::Fill(reply)
                } else {
                    Next::Reply(reply)
                }
            }
            Kind::Shadowed { main, shadows } if *main == child => {
                Next::ReplyThenCopy(reply, std::mem::take(shadows))
            }
            Kind::Fill { read, .. } if *read == child => Next::AddToCold(reply),
            Kind::Rekey { key, .. } => {
                let client = self.requests[req].key();
                Next::Reply(Reply {
                    bytes: reply::rekey(&reply.bytes, key, client),
                    result: reply.result,
                })
            }
            Kind::RateLimit { .. } => Next::Reply(reply),
            Kind::Fill { .. } => {
                self.nodes[id].done = true;
                Next::Wait
            }
            _ => Next::Wait,
        };
        match next {
            Next::Wait => {}
            Next::Reply(r) => self.complete(id, r, out),
            Next::ReplyThenCopy(r, shadows) => {
                self.complete(id, r, out);
                let from = out.len();
                for s in shadows {
                    self.start_node(s, out);
                }
                for a in &mut out[from..] {
                    if let Action::Send { node } = *a {
                        *a = Action::SendCopy { node };
                    }
                }
            }
            Next::Start(c) => self.start_node(c, out),
            Next::Fill(r) => {
                self.start_fill(id, out);
                self.complete(id, r, out);
            }
            Next::AddToCold(r) => self.add_to_cold(id, &r, out),
        }
    }

    /// A node with no parent, for work that runs after the client's reply (its kind set
    /// once its children are built).
    pub(super) fn background_root(&mut self, req: usize) -> usize {
        self.nodes.push(Node {
            parent: None,
            req,
            done: false,
            part: None,
            kind: Kind::Null,
        });
        self.nodes.len() - 1
    }
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;

#[path = "exec_keysplit.rs"]
mod keysplit;

#[path = "exec_state.rs"]
mod state;
pub use state::FailoverState;

#[path = "exec_ratelimit.rs"]
mod ratelimit;

#[path = "exec_choice.rs"]
pub mod choice;

#[cfg(test)]
#[path = "exec_choice_tests.rs"]
mod choice_tests;
#[path = "exec_staging.rs"]
mod staging;

#[path = "exec_slow_warmup.rs"]
mod slow_warmup;

#[path = "exec_size_split.rs"]
mod size_split;

#[path = "exec_warmup_fill.rs"]
mod warmup_fill;

#[path = "exec_warmup_cas.rs"]
mod warmup_cas;

#[path = "exec_warmup_lease.rs"]
mod warmup_lease;

#[path = "exec_deferred.rs"]
mod deferred;
