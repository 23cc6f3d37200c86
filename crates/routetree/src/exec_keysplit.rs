//! Executing KeySplitRoute's replicas and L1L2CacheRoute, as mcrouter does.
//!
//! KeySplitRoute: mcrouter pins each router host to one replica (its host id modulo the
//! replica count), so a fleet of routers spreads a hot key. Here too, except that with
//! `all_sync` (every set writes every replica) each get picks a replica at random, so that
//! one router spreads it too.
//!
//! L1L2CacheRoute: an l1 miss (or error) asks l2; an l2 hit is added to l1 in the
//! background with `upgradingL1Exptime`, an l2 miss (with negative caching on) adds a
//! negative entry: the value `ncache` with flag 0x10000 and `ncacheExptime`. A negative
//! entry read from l1 answers as a miss, and every `ncacheUpdatePeriod`-th one (counted per
//! route and worker) refreshes l1 from l2 in the background with a `set`.

use super::{Action, Exec, Kind};
use crate::reply::{default_reply, is_hit, McResult, Reply};
use crate::request::ReqSpec;
use crate::{AllMode, Plan, RouteId};

/// mcrouter's MC_MSG_FLAG_NEGATIVE_CACHE: the item is a negative entry.
pub const NEGATIVE_CACHE_FLAG: u32 = 0x10000;
/// The value of a negative entry.
pub const NEGATIVE_CACHE_VALUE: &[u8] = b"ncache";

pub(super) struct L1L2 {
    pub(super) l1: usize,
    l2: usize,
    asked_l2: bool,
    l1_plan: Plan,
    l2_plan: Plan,
    upgrading_l1_exptime: u32,
    ncache_exptime: u32,
    ncache_update_period: usize,
    route: RouteId,
}

pub(super) struct Refresh {
    pub(super) read: usize,
    l1_plan: Plan,
    upgrading_l1_exptime: u32,
    ncache_exptime: u32,
}

/// Flags and value of a get hit (`VALUE <key> <flags> <bytes> [<cas>]`, or a meta `VA`
/// with an `f` flag); `None` for anything else.
pub fn item(reply: &[u8]) -> Option<(u32, &[u8])> {
    let nl = memchr::memchr(b'\n', reply)?;
    let line = reply[..nl].strip_suffix(b"\r")?;
    let mut tokens = line.split(|&b| b == b' ');
    let num = |t: Option<&[u8]>| -> Option<u64> { std::str::from_utf8(t?).ok()?.parse().ok() };
    let (flags, len) = match tokens.next()? {
        b"VALUE" => {
            tokens.next()?;
            let flags = num(tokens.next())?;
            (flags, num(tokens.next())?)
        }
        b"VA" => {
            let len = num(tokens.next())?;
            let flags = tokens.find_map(|t| t.strip_prefix(b"f"))?;
            (num(Some(flags))?, len)
        }
        _ => return None,
    };
    let value = reply.get(nl + 1..nl + 1 + usize::try_from(len).ok()?)?;
    Some((u32::try_from(flags).ok()?, value))
}

impl Exec {
    /// KeySplitRoute's plan: replica `pick`, or one picked at random; with `fanout` it
    /// answers and the others run in the background.
    pub(super) fn build_key_split(
        &mut self,
        replicas: &[Plan],
        fanout: bool,
        pick: Option<usize>,
        parent: Option<usize>,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> usize {
        let n = replicas.len();
        // Uniform over n with fair coins of 1/n, 1/(n-1), ..., 1.
        let chosen = pick
            .filter(|&i| i < n)
            .unwrap_or_else(|| (0..n).find(|&i| sample(1.0 / (n - i) as f64)).unwrap_or(0));
        if !fanout {
            return self.build(&replicas[chosen], parent, req, sample);
        }
        let mut plans = vec![replicas[chosen].clone()];
        plans.extend((0..n).filter(|&i| i != chosen).map(|i| replicas[i].clone()));
        let all = Plan::All {
            mode: AllMode::Initial,
            plans,
        };
        self.build(&all, parent, req, sample)
    }

    pub(super) fn build_rekey(
        &mut self,
        id: usize,
        key: &[u8],
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let copy = with_key(&self.requests[req], key);
        self.requests.push(copy);
        let child_req = self.requests.len() - 1;
        let child = self.build(plan, Some(id), child_req, sample);
        Kind::Rekey {
            child,
            key: key.to_vec(),
        }
    }

    pub(super) fn build_l1l2(
        &mut self,
        id: usize,
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let Plan::L1L2 {
            l1,
            l2,
            upgrading_l1_exptime,
            ncache_exptime,
            ncache_update_period,
            route,
        } = plan
        else {
            unreachable!("called for L1L2 plans")
        };
        Kind::L1L2(L1L2 {
            l1: self.build(l1, Some(id), req, sample),
            l2: self.build(l2, Some(id), req, sample),
            asked_l2: false,
            l1_plan: (**l1).clone(),
            l2_plan: (**l2).clone(),
            upgrading_l1_exptime: *upgrading_l1_exptime,
            ncache_exptime: *ncache_exptime,
            ncache_update_period: *ncache_update_period,
            route: *route,
        })
    }

    /// A child of an L1L2 or refresh node answered.
    pub(super) fn l1l2_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        match &mut self.nodes[id].kind {
            Kind::L1L2(l) if !l.asked_l2 => {
                if !is_hit(&reply) {
                    l.asked_l2 = true;
                    let l2 = l.l2;
                    return self.start_node(l2, out);
                }
                if item(&reply.bytes).is_none_or(|(f, _)| f & NEGATIVE_CACHE_FLAG == 0) {
                    return self.complete(id, reply, out);
                }
                let (route, period) = (l.route, l.ncache_update_period);
                let refresh = (l.l2_plan.clone(), l.l1_plan.clone());
                let exptimes = (l.upgrading_l1_exptime, l.ncache_exptime);
                if period > 0 {
                    let left = self.limits.ncache_countdown.entry(route).or_insert(period);
                    if *left <= 1 {
                        *left = period;
                        self.start_refresh(req, refresh, exptimes, out);
                    } else {
                        *left -= 1;
                    }
                }
                let miss = default_reply(self.requests[req].reply_op());
                self.complete(id, miss, out)
            }
            Kind::L1L2(l) => {
                let fill = if is_hit(&reply) {
                    item(&reply.bytes).map(|(f, v)| (f, v.to_vec(), l.upgrading_l1_exptime))
                } else if reply.result == McResult::NotFound && l.ncache_update_period > 0 {
                    Some(negative(l.ncache_exptime))
                } else {
                    None
                };
                if let Some((flags, data, exptime)) = fill {
                    let l1_plan = l.l1_plan.clone();
                    let add = store(
                        proto::StoreCmd::Add,
                        &self.requests[req],
                        flags,
                        data,
                        exptime,
                    );
                    self.background(&l1_plan, add, out);
                }
                self.complete(id, reply, out)
            }
            Kind::L1Refresh(r) => {
                let (flags, data, exptime) = match item(&reply.bytes) {
                    Some((f, v)) if is_hit(&reply) => (f, v.to_vec(), r.upgrading_l1_exptime),
                    // A miss or an error: keep the negative entry a while longer.
                    _ => negative(r.ncache_exptime),
                };
                let l1_plan = r.l1_plan.clone();
                self.nodes[id].done = true;
                let set = store(
                    proto::StoreCmd::Set,
                    &self.requests[req],
                    flags,
                    data,
                    exptime,
                );
                self.background(&l1_plan, set, out);
            }
            _ => {}
        }
    }

    /// Reads l2 again for a negative entry, then sets l1 (see [`Kind::L1Refresh`]).
    fn start_refresh(
        &mut self,
        req: usize,
        (l2_plan, l1_plan): (Plan, Plan),
        (upgrading_l1_exptime, ncache_exptime): (u32, u32),
        out: &mut Vec<Action>,
    ) {
        let refresh = self.background_root(req);
        let read = self.build(&l2_plan, Some(refresh), req, &mut |_| false);
        self.nodes[refresh].kind = Kind::L1Refresh(Refresh {
            read,
            l1_plan,
            upgrading_l1_exptime,
            ncache_exptime,
        });
        self.start_node(refresh, out);
    }

    /// Sends `request` along `plan` with nobody waiting for the reply.
    pub(super) fn background(&mut self, plan: &Plan, request: ReqSpec, out: &mut Vec<Action>) {
        self.requests.push(request);
        let req = self.requests.len() - 1;
        let node = self.build(plan, None, req, &mut |_| false);
        self.start_node(node, out);
    }
}

fn negative(ncache_exptime: u32) -> (u32, Vec<u8>, u32) {
    (
        NEGATIVE_CACHE_FLAG,
        NEGATIVE_CACHE_VALUE.to_vec(),
        ncache_exptime,
    )
}

fn store(cmd: proto::StoreCmd, of: &ReqSpec, flags: u32, data: Vec<u8>, exptime: u32) -> ReqSpec {
    ReqSpec::Store {
        cmd,
        key: of.key().to_vec(),
        flags,
        exptime: i64::from(exptime),
        data,
        cas: 0,
    }
}

/// `req` for another key (a base64 meta key and flush_all stay as they are).
fn with_key(req: &ReqSpec, new: &[u8]) -> ReqSpec {
    let mut copy = req.clone();
    match &mut copy {
        ReqSpec::Get { key, .. }
        | ReqSpec::Store { key, .. }
        | ReqSpec::Delete { key }
        | ReqSpec::Arith { key, .. }
        | ReqSpec::Touch { key, .. }
        | ReqSpec::Meta {
            key, binary: false, ..
        }
        | ReqSpec::LeaseGet { key }
        | ReqSpec::LeaseSet { key, .. }
        | ReqSpec::FillRead { key } => *key = new.to_vec(),
        ReqSpec::Meta { binary: true, .. } | ReqSpec::FlushAll { .. } => {}
    }
    copy
}

#[cfg(test)]
#[path = "exec_keysplit_tests.rs"]
mod tests;
