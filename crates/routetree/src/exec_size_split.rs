//! L1L2SizeSplitRoute's execution, as mcrouter's: a large set goes to l2 first and only
//! once l2 stored it does l1 get the sentinel (flag 0x20), so a reader never finds a
//! sentinel without its value having been stored. A `set`'s sentinel is empty and its value
//! is on l2 under the same key; a `lease-set`'s sentinel holds the suffix of the l2 key
//! (`<key>|==|<suffix>`), which is planned once l1's reply names it. A read that finds a
//! sentinel whose value l2 no longer has removes the sentinel (a `cas` on its token, so a
//! newer item stays) and, for gets and lease-get, asks l1 again.

use super::keysplit::item;
use super::{Action, Exec, Kind};
use crate::plan::{l2_key, Deferred, SizeSplitLevels, SizeSplitOp, SizeSplitRule};
use crate::reply::{is_hit, McResult, Reply};
use crate::request::{GetCmd, ReqSpec};
use crate::Plan;

/// mcrouter's MC_MSG_FLAG_SIZE_SPLIT: the l1 item is a sentinel, the value is on l2.
pub const SIZE_SPLIT_FLAG: u32 = 0x20;

pub(super) struct SizeSplit {
    /// The child that starts.
    pub(super) first: usize,
    l1_plan: Plan,
    l2_plan: Plan,
    levels: SizeSplitLevels,
    rule: SizeSplitRule,
    op: SizeSplitOp,
    step: Step,
    /// gets: the CAS of l1's sentinel, which the reply carries in place of l2's (a `cas`
    /// goes to l1 only, as in mcrouter, so it must hold l1's token).
    l1_cas: Option<u64>,
    /// The sentinel's value: empty, or the suffix of the l2 key.
    sentinel: Vec<u8>,
    /// Times l1 may still be asked again.
    retries: u32,
    /// What answers once the sentinel is removed; `None`: ask l1 again.
    after_cleanup: Option<Reply>,
    /// lease-set: the nodes of l1's plan built with the request, never started, so that
    /// [`Exec::pin_leases`] pins them; the l1 request built later takes their pins.
    pinned_l1: Option<(usize, usize)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// get: waiting for l1.
    GetL1,
    /// get: l1 had a sentinel; waiting for l2.
    GetL2,
    /// l2 lost the value: reading the sentinel's token on l1.
    CleanRead,
    /// Removing the sentinel with a `cas`.
    CleanCas,
    /// set with `both_full_set`: waiting for l1's whole copy.
    SetBoth,
    /// set: waiting for l2's copy.
    SetL2,
    /// set: l2 stored it; waiting for l1's sentinel.
    SetSentinel,
    /// lease-set: waiting for l2's copy under the suffixed key.
    LeaseSetL2,
    /// lease-set: waiting for l1 (the sentinel, or the whole value when l2 failed).
    LeaseSetL1,
    /// lease-set with `both_full_set`: waiting for l1's whole copy under the suffixed key.
    LeaseSetBoth,
}

/// A write the route splits, if `req` is one: `(key, flags, exptime, value)`.
fn split_write(req: &ReqSpec) -> Option<(&[u8], u32, i64, &[u8])> {
    match req {
        ReqSpec::Store {
            cmd: proto::StoreCmd::Set,
            key,
            flags,
            exptime,
            data,
            ..
        }
        | ReqSpec::LeaseSet {
            key,
            flags,
            exptime,
            data,
            ..
        } => Some((key, *flags, *exptime, data)),
        _ => None,
    }
}

fn set_request(key: &[u8], flags: u32, exptime: i64, data: Vec<u8>) -> ReqSpec {
    ReqSpec::Store {
        cmd: proto::StoreCmd::Set,
        key: key.to_vec(),
        flags,
        exptime,
        data,
        cas: 0,
    }
}

/// A sentinel in l1's reply: its value, and for a lease-get miss (`LVALUE`) its token.
struct Sentinel<'r> {
    value: &'r [u8],
    token: Option<u64>,
}

fn sentinel(reply: &Reply) -> Option<Sentinel<'_>> {
    if is_hit(reply) {
        let (flags, value) = item(&reply.bytes)?;
        return (flags & SIZE_SPLIT_FLAG != 0).then_some(Sentinel { value, token: None });
    }
    // LVALUE <key> <token> <flags> <bytes>
    let nl = memchr::memchr(b'\n', &reply.bytes)?;
    let line = reply.bytes[..nl].strip_suffix(b"\r")?;
    let mut tokens = line.split(|&b| b == b' ');
    if tokens.next()? != b"LVALUE" {
        return None;
    }
    let num = |t: &[u8]| -> Option<u64> { std::str::from_utf8(t).ok()?.parse().ok() };
    let token = num(tokens.nth(1)?)?;
    let flags = num(tokens.next()?)?;
    let len = usize::try_from(num(tokens.next()?)?).ok()?;
    let value = reply.bytes.get(nl + 1..nl + 1 + len)?;
    (flags & u64::from(SIZE_SPLIT_FLAG) != 0).then_some(Sentinel {
        value,
        token: Some(token),
    })
}

/// Whether memcached takes `key`: at most 250 bytes, no spaces or control characters.
fn valid_key(key: &[u8]) -> bool {
    key.len() <= 250 && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// mcrouter's failover errors: the ones after which a sentinel is removed.
fn failover_error(result: McResult) -> bool {
    result.is_error() && result != McResult::ClientError
}

impl Exec {
    /// A write that stays whole on l1 is just l1's plan: `Some` of it then.
    pub(super) fn size_split_whole<'p>(&self, plan: &'p Plan, req: usize) -> Option<&'p Plan> {
        let Plan::SizeSplit { l1, rule, op, .. } = plan else {
            return None;
        };
        if !matches!(op, SizeSplitOp::Set | SizeSplitOp::LeaseSet { .. }) {
            return None;
        }
        let (key, _, exptime, data) = split_write(&self.requests[req])?;
        rule.whole_to_l1(key, data.len(), exptime).then_some(&**l1)
    }

    pub(super) fn build_size_split(
        &mut self,
        id: usize,
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let Plan::SizeSplit {
            l1,
            l2,
            rule,
            op,
            levels,
        } = plan
        else {
            unreachable!("called for SizeSplit plans")
        };
        let mut pinned_l1 = None;
        let request = &self.requests[req];
        let is_set = matches!(
            request,
            ReqSpec::Store {
                cmd: proto::StoreCmd::Set,
                ..
            }
        );
        let first = match (op, request) {
            (
                SizeSplitOp::Get,
                ReqSpec::Get {
                    cmd: GetCmd::Get | GetCmd::Gets,
                    ..
                },
            )
            | (SizeSplitOp::LeaseGet, ReqSpec::LeaseGet { .. }) => {
                Some((self.build(l1, Some(id), req, sample), Step::GetL1))
            }
            (SizeSplitOp::Set, _) if is_set => Some(if rule.both_full_set {
                (self.build(l1, Some(id), req, sample), Step::SetBoth)
            } else {
                (self.build(l2, Some(id), req, sample), Step::SetL2)
            }),
            (SizeSplitOp::LeaseSet { suffix }, ReqSpec::LeaseSet { .. }) => {
                if !rule.both_full_set {
                    let from = self.nodes.len();
                    self.build(l1, Some(id), req, &mut |_| false);
                    pinned_l1 = Some((from, self.nodes.len()));
                }
                Some(self.start_lease_set(id, req, levels, rule.both_full_set, *suffix))
            }
            _ => None,
        };
        // A meta get or set would see, or leave, a sentinel it does not know.
        let Some((first, step)) = first else {
            let cmd = self.requests[req].operation();
            return Kind::Error(format!(
                "L1L2SizeSplitRoute serves get, gets, set, lease-get and lease-set, not {cmd}"
            ));
        };
        Kind::SizeSplit(SizeSplit {
            first,
            l1_plan: (**l1).clone(),
            l2_plan: (**l2).clone(),
            levels: levels.clone(),
            rule: *rule,
            op: *op,
            step,
            l1_cas: None,
            sentinel: Vec::new(),
            retries: rule.retries,
            after_cleanup: None,
            pinned_l1,
        })
    }

    /// A large lease-set's first child: the value to l2 under the suffixed key, or with
    /// `both_full_set` the lease-set itself to l1 under that key (as mcrouter sends it).
    fn start_lease_set(
        &mut self,
        id: usize,
        req: usize,
        levels: &SizeSplitLevels,
        both_full_set: bool,
        suffix: u32,
    ) -> (usize, Step) {
        let Some((key, flags, exptime, data)) = split_write(&self.requests[req]) else {
            unreachable!("a lease-set")
        };
        let suffixed = l2_key(key, suffix.to_string().as_bytes());
        let deferred = |target, op| {
            Plan::Deferred(Box::new(Deferred {
                target,
                key: suffixed.clone(),
                op,
                exptime: levels.exptime.clone(),
            }))
        };
        if both_full_set {
            let plan = deferred(levels.l1, "lease-set");
            return (
                self.build(&plan, Some(id), req, &mut |_| false),
                Step::LeaseSetBoth,
            );
        }
        let plan = deferred(levels.l2, "set");
        let set = set_request(key, flags, exptime, data.to_vec());
        self.requests.push(set);
        let set = self.requests.len() - 1;
        (
            self.build(&plan, Some(id), set, &mut |_| false),
            Step::LeaseSetL2,
        )
    }

    pub(super) fn size_split_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::SizeSplit(s) = &mut self.nodes[id].kind else {
            return;
        };
        match s.step {
            Step::GetL1 => {
                let Some(found) = sentinel(&reply) else {
                    return self.complete(id, reply, out);
                };
                // mcrouter turns a lease miss (or hot miss) on a sentinel into a plain one.
                if let Some(token) = found.token.filter(|&t| t >= 1) {
                    let key = String::from_utf8_lossy(self.requests[req].key()).into_owned();
                    let miss = format!("LVALUE {key} {token} 0 0\r\n\r\nEND\r\n");
                    return self.complete(id, Reply::from_server(miss.as_bytes()), out);
                }
                s.sentinel = found.value.to_vec();
                s.l1_cas = value_cas(&reply.bytes);
                s.step = Step::GetL2;
                self.follow_sentinel(id, out);
            }
            Step::GetL2 => self.size_split_l2_read(id, reply, out),
            Step::CleanRead => {
                let matches = is_hit(&reply)
                    && item(&reply.bytes).is_some_and(|(_, v)| v == s.sentinel.as_slice());
                let token = value_cas(&reply.bytes).filter(|_| matches);
                let Some(cas) = token else {
                    return self.size_split_cleaned(id, out);
                };
                s.step = Step::CleanCas;
                let plan = s.l1_plan.clone();
                // exptime -1: the item expires at once.
                self.requests.push(ReqSpec::Store {
                    cmd: proto::StoreCmd::Cas,
                    key: self.requests[req].key().to_vec(),
                    flags: 0,
                    exptime: -1,
                    data: Vec::new(),
                    cas,
                });
                let cas = self.requests.len() - 1;
                let l1 = self.build(&plan, Some(id), cas, &mut |_| false);
                self.start_node(l1, out);
            }
            Step::CleanCas => self.size_split_cleaned(id, out),
            Step::SetBoth => {
                let l2_plan = s.l2_plan.clone();
                let stored = reply.result == McResult::Ok;
                self.complete(id, reply, out);
                if stored {
                    let copy = self.requests[req].clone();
                    self.size_split_background(&l2_plan, copy, out);
                }
            }
            Step::SetL2 if reply.result == McResult::Ok => {
                s.step = Step::SetSentinel;
                let plan = s.l1_plan.clone();
                let Some((key, flags, exptime, _)) = split_write(&self.requests[req]) else {
                    return;
                };
                let sentinel = set_request(key, flags | SIZE_SPLIT_FLAG, exptime, Vec::new());
                self.requests.push(sentinel);
                let sentinel = self.requests.len() - 1;
                let l1 = self.build(&plan, Some(id), sentinel, &mut |_| false);
                self.start_node(l1, out);
            }
            Step::LeaseSetL2 => {
                let SizeSplitOp::LeaseSet { suffix } = s.op else {
                    return;
                };
                let (stored, failure_ttl) = (reply.result == McResult::Ok, s.rule.failure_ttl);
                s.step = Step::LeaseSetL1;
                let plan = s.l1_plan.clone();
                let mut lease_set = self.requests[req].clone();
                if let ReqSpec::LeaseSet {
                    flags,
                    exptime,
                    data,
                    ..
                } = &mut lease_set
                {
                    if stored {
                        *flags |= SIZE_SPLIT_FLAG;
                        *data = suffix.to_string().into_bytes();
                    } else if *exptime > failure_ttl || *exptime == 0 {
                        // l2 is failing: the whole value on l1, for a short while.
                        *exptime = failure_ttl;
                    }
                }
                let pinned = s.pinned_l1;
                self.requests.push(lease_set);
                let lease_set = self.requests.len() - 1;
                let from = self.nodes.len();
                let l1 = self.build(&plan, Some(id), lease_set, &mut |_| false);
                if let Some((start, end)) = pinned {
                    self.copy_pins(start, from, end - start);
                }
                self.start_node(l1, out);
            }
            Step::LeaseSetBoth => {
                let SizeSplitOp::LeaseSet { suffix } = s.op else {
                    return;
                };
                let (target, rewrites) = (s.levels.l2, s.levels.exptime.clone());
                let stored = reply.result == McResult::Ok;
                self.complete(id, reply, out);
                let Some((key, flags, exptime, data)) = split_write(&self.requests[req]) else {
                    return;
                };
                if stored {
                    let plan = Plan::Deferred(Box::new(Deferred {
                        target,
                        key: l2_key(key, suffix.to_string().as_bytes()),
                        op: "set",
                        exptime: rewrites,
                    }));
                    let set = set_request(key, flags, exptime, data.to_vec());
                    self.size_split_background(&plan, set, out);
                }
            }
            Step::SetL2 | Step::SetSentinel | Step::LeaseSetL1 => self.complete(id, reply, out),
        }
    }

    /// l1 had a sentinel: ask l2 for its value, under the key the sentinel names.
    fn follow_sentinel(&mut self, id: usize, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::SizeSplit(s) = &self.nodes[id].kind else {
            return;
        };
        let client = &self.requests[req];
        let gets = matches!(
            client,
            ReqSpec::Get {
                cmd: GetCmd::Gets,
                ..
            }
        );
        let key = client.key().to_vec();
        let (plan, l2_req) = if s.sentinel.is_empty() {
            // l2 gets the client's get or gets; a lease-get becomes a get.
            let l2_req = matches!(client, ReqSpec::LeaseGet { .. }).then(|| ReqSpec::Get {
                cmd: GetCmd::Get,
                key: key.clone(),
            });
            (s.l2_plan.clone(), l2_req)
        } else {
            let suffixed = l2_key(&key, &s.sentinel);
            // The value is any client's item with flag 0x20: never sent as a key unchecked.
            if !valid_key(&suffixed) {
                let error = Reply {
                    bytes: b"CLIENT_ERROR bad key in L1L2SizeSplitRoute sentinel\r\n".to_vec(),
                    result: McResult::ClientError,
                };
                return self.complete(id, error, out);
            }
            let cmd = if gets { GetCmd::Gets } else { GetCmd::Get };
            let plan = Plan::Deferred(Box::new(Deferred {
                target: s.levels.l2,
                key: suffixed,
                op: if gets { "gets" } else { "get" },
                exptime: s.levels.exptime.clone(),
            }));
            (plan, Some(ReqSpec::Get { cmd, key }))
        };
        let l2_req = match l2_req {
            Some(r) => {
                self.requests.push(r);
                self.requests.len() - 1
            }
            None => req,
        };
        let l2 = self.build(&plan, Some(id), l2_req, &mut |_| false);
        self.start_node(l2, out);
    }

    /// l2's reply to a sentinel's read.
    fn size_split_l2_read(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::SizeSplit(s) = &mut self.nodes[id].kind else {
            return;
        };
        if is_hit(&reply) {
            let reply = match s.l1_cas {
                Some(cas) => with_cas(reply, cas),
                None => reply,
            };
            return self.complete(id, reply, out);
        }
        let plain_get = matches!(
            self.requests[req],
            ReqSpec::Get {
                cmd: GetCmd::Get,
                ..
            }
        );
        // mcrouter passes l2's reply on for a plain get of a set's (empty) sentinel.
        if plain_get && s.sentinel.is_empty() {
            return self.complete(id, reply, out);
        }
        let clean_up = if reply.result.is_error() {
            let error = Reply::error(reply.result);
            if !failover_error(reply.result) {
                return self.complete(id, error, out);
            }
            Some(error)
        } else if plain_get || s.retries == 0 {
            // A miss; gets and lease-get ask l1 again while retries last.
            if !plain_get {
                return self.complete(id, Reply::error(McResult::LocalError), out);
            }
            Some(Reply::error(McResult::LocalError))
        } else {
            s.retries -= 1;
            None
        };
        s.after_cleanup = clean_up;
        s.step = Step::CleanRead;
        let plan = s.l1_plan.clone();
        let key = self.requests[req].key().to_vec();
        self.requests.push(ReqSpec::Get {
            cmd: GetCmd::Gets,
            key,
        });
        let read = self.requests.len() - 1;
        let l1 = self.build(&plan, Some(id), read, &mut |_| false);
        self.start_node(l1, out);
    }

    /// The sentinel is gone (or was replaced): answer, or ask l1 again.
    fn size_split_cleaned(&mut self, id: usize, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::SizeSplit(s) = &mut self.nodes[id].kind else {
            return;
        };
        if let Some(reply) = s.after_cleanup.take() {
            return self.complete(id, reply, out);
        }
        s.step = Step::GetL1;
        s.l1_cas = None;
        s.sentinel.clear();
        let plan = s.l1_plan.clone();
        let l1 = self.build(&plan, Some(id), req, &mut |_| false);
        self.start_node(l1, out);
    }

    /// Gives the `n` nodes from `to` (built from the same plan as those from `from`) the
    /// lease pins of those.
    fn copy_pins(&mut self, from: usize, to: usize, n: usize) {
        for i in 0..n {
            let Kind::Failover { pinned: p, .. } = self.nodes[from + i].kind else {
                continue;
            };
            if let Some(Kind::Failover { pinned, .. }) =
                self.nodes.get_mut(to + i).map(|n| &mut n.kind)
            {
                *pinned = p;
            }
        }
    }

    /// Sends `request` along `plan` after the client's reply, nobody waiting for it.
    fn size_split_background(&mut self, plan: &Plan, request: ReqSpec, out: &mut Vec<Action>) {
        self.requests.push(request);
        let req = self.requests.len() - 1;
        let root = self.background_root(req);
        let child = self.build(plan, Some(root), req, &mut |_| false);
        self.nodes[root].kind = Kind::Rekey {
            child,
            key: Vec::new(),
        };
        // The root only keeps the tree whole.
        self.nodes[root].done = true;
        let from = out.len();
        self.start_node(root, out);
        for a in &mut out[from..] {
            if let Action::Send { node } = *a {
                *a = Action::SendCopy { node };
            }
        }
    }
}

/// The CAS token of a `gets` hit (`VALUE <key> <flags> <bytes> <cas>`).
fn value_cas(reply: &[u8]) -> Option<u64> {
    let line = reply.split(|&b| b == b'\r').next()?;
    let mut tokens = line.split(|&b| b == b' ');
    if tokens.next()? != b"VALUE" {
        return None;
    }
    std::str::from_utf8(tokens.nth(3)?).ok()?.parse().ok()
}

/// `reply` (a `gets` hit) with its CAS token replaced by `cas`.
fn with_cas(reply: Reply, cas: u64) -> Reply {
    let Some(end) = memchr::memchr(b'\r', &reply.bytes) else {
        return reply;
    };
    let line = &reply.bytes[..end];
    let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    if tokens.len() != 5 {
        return reply;
    }
    let mut bytes = tokens[..4].join(&b' ');
    bytes.extend_from_slice(format!(" {cas}").as_bytes());
    bytes.extend_from_slice(&reply.bytes[end..]);
    Reply { bytes, ..reply }
}

#[cfg(test)]
#[path = "exec_size_split_tests.rs"]
mod tests;
