//! L1L2SizeSplitRoute's execution, as mcrouter's: a large set goes to l2 first and only
//! once l2 stored it does l1 get the sentinel (an empty value with flag 0x20), so a reader
//! never finds a sentinel without its value having been stored; a get that finds a
//! sentinel on l1 answers with l2's reply.

use super::keysplit::item;
use super::{Action, Exec, Kind};
use crate::plan::{SizeSplitOp, SizeSplitRule};
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
    step: Step,
    /// gets: the CAS of l1's sentinel, which the reply carries in place of l2's (a `cas`
    /// goes to l1 only, as in mcrouter, so it must hold l1's token).
    l1_cas: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// get: waiting for l1.
    GetL1,
    /// get: l1 had a sentinel; waiting for l2.
    GetL2,
    /// set with `both_full_set`: waiting for l1's whole copy.
    SetBoth,
    /// set: waiting for l2's copy.
    SetL2,
    /// set: l2 stored it; waiting for l1's sentinel.
    SetSentinel,
}

/// A set the route serves, if `req` is one: `(key, flags, exptime, value)`.
fn plain_set(req: &ReqSpec) -> Option<(&[u8], u32, i64, &[u8])> {
    match req {
        ReqSpec::Store {
            cmd: proto::StoreCmd::Set,
            key,
            flags,
            exptime,
            data,
            ..
        } => Some((key, *flags, *exptime, data)),
        _ => None,
    }
}

impl Exec {
    /// A set that stays whole on l1 is just l1's plan: `Some` of it then.
    pub(super) fn size_split_whole<'p>(&self, plan: &'p Plan, req: usize) -> Option<&'p Plan> {
        let Plan::SizeSplit {
            l1,
            rule,
            op: SizeSplitOp::Set,
            ..
        } = plan
        else {
            return None;
        };
        let (key, _, exptime, data) = plain_set(&self.requests[req])?;
        rule.whole_to_l1(key, data.len(), exptime).then_some(&**l1)
    }

    pub(super) fn build_size_split(
        &mut self,
        id: usize,
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let Plan::SizeSplit { l1, l2, rule, op } = plan else {
            unreachable!("called for SizeSplit plans")
        };
        let request = &self.requests[req];
        let (first, step) = match op {
            SizeSplitOp::Get
                if matches!(
                    request,
                    ReqSpec::Get {
                        cmd: GetCmd::Get | GetCmd::Gets,
                        ..
                    }
                ) =>
            {
                (l1, Step::GetL1)
            }
            SizeSplitOp::Set if plain_set(request).is_some() => {
                let SizeSplitRule { both_full_set, .. } = *rule;
                if both_full_set {
                    (l1, Step::SetBoth)
                } else {
                    (l2, Step::SetL2)
                }
            }
            // A meta get or set would see, or leave, a sentinel it does not know.
            _ => {
                let cmd = request.operation();
                return Kind::Error(format!(
                    "L1L2SizeSplitRoute serves the text get, gets and set, not {cmd}"
                ));
            }
        };
        Kind::SizeSplit(SizeSplit {
            first: self.build(first, Some(id), req, sample),
            l1_plan: (**l1).clone(),
            l2_plan: (**l2).clone(),
            step,
            l1_cas: None,
        })
    }

    pub(super) fn size_split_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::SizeSplit(s) = &mut self.nodes[id].kind else {
            return;
        };
        match s.step {
            Step::GetL1 => {
                let sentinel = is_hit(&reply)
                    && item(&reply.bytes).is_some_and(|(f, _)| f & SIZE_SPLIT_FLAG != 0);
                if !sentinel {
                    return self.complete(id, reply, out);
                }
                if item(&reply.bytes).is_some_and(|(_, v)| !v.is_empty()) {
                    // mcrouter's lease-set leaves the l2 key's suffix in the sentinel; that
                    // key hashes elsewhere, which a plan made before the reply cannot follow.
                    let e = Reply::local_error("L1L2SizeSplitRoute: lease-set sentinel");
                    return self.complete(id, e, out);
                }
                s.step = Step::GetL2;
                s.l1_cas = value_cas(&reply.bytes);
                let plan = s.l2_plan.clone();
                let l2 = self.build(&plan, Some(id), req, &mut |_| false);
                self.start_node(l2, out);
            }
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
                let Some((key, flags, exptime, _)) = plain_set(&self.requests[req]) else {
                    return;
                };
                self.requests.push(ReqSpec::Store {
                    cmd: proto::StoreCmd::Set,
                    key: key.to_vec(),
                    flags: flags | SIZE_SPLIT_FLAG,
                    exptime,
                    data: Vec::new(),
                    cas: 0,
                });
                let sentinel = self.requests.len() - 1;
                let l1 = self.build(&plan, Some(id), sentinel, &mut |_| false);
                self.start_node(l1, out);
            }
            Step::GetL2 => {
                let reply = match s.l1_cas {
                    Some(cas) if is_hit(&reply) => with_cas(reply, cas),
                    _ => reply,
                };
                self.complete(id, reply, out)
            }
            Step::SetL2 | Step::SetSentinel => self.complete(id, reply, out),
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
