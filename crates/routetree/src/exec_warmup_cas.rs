//! WarmUpRoute's `gets`, `gat` and `gats`, as mcrouter does them: the client must get
//! cold's CAS token (and cold's TTL change), so a cold miss that warm can fill is copied
//! to cold with an `add` first, and then the client's request goes to cold once more and
//! that reply answers. Warm only gets a plain read; a warm miss answers with cold's miss.

use super::{Action, Exec, Kind};
use crate::reply::{self, is_hit, Reply};
use crate::request::{GetCmd, ReqSpec};
use crate::Plan;

pub(super) struct WarmUpCas {
    /// The first ask of cold.
    first: usize,
    cold_plan: Plan,
    warm_plan: Plan,
    /// Cold planned for the add.
    fill_plan: Plan,
    /// WarmUpRoute's `exptime` (0: none; the warm item's remaining TTL is used).
    exptime: u32,
    stage: Stage,
}

/// What the node waits for; `Warm` holds cold's miss, which answers if warm misses.
enum Stage {
    Cold,
    /// Warm's read of the item.
    Warm(Reply),
    /// The add of warm's item to cold.
    Add,
    /// The client's request to cold once more: its reply answers.
    Again,
    Over,
}

/// Whether `req` takes WarmUpRoute's re-read of cold.
pub(super) fn rereads_cold(req: &ReqSpec) -> bool {
    matches!(
        req,
        ReqSpec::Get {
            cmd: GetCmd::Gets | GetCmd::Gat(_) | GetCmd::Gats(_),
            ..
        }
    )
}

impl Exec {
    pub(super) fn build_warmup_cas(
        &mut self,
        id: usize,
        plans: [&Plan; 3],
        exptime: u32,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let [cold, warm, fill] = plans;
        Kind::WarmUpCas(WarmUpCas {
            fill_plan: fill.clone(),
            first: self.build(cold, Some(id), req, sample),
            stage: Stage::Cold,
            cold_plan: cold.clone(),
            warm_plan: warm.clone(),
            exptime,
        })
    }

    pub(super) fn start_warmup_cas(&mut self, id: usize, out: &mut Vec<Action>) {
        if let Kind::WarmUpCas(w) = &self.nodes[id].kind {
            let first = w.first;
            self.start_node(first, out);
        }
    }

    pub(super) fn warmup_cas_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let req = self.nodes[id].req;
        let Kind::WarmUpCas(w) = &mut self.nodes[id].kind else {
            return;
        };
        let stage = std::mem::replace(&mut w.stage, Stage::Over);
        let (request, plan) = match stage {
            Stage::Cold if is_hit(&reply) => return self.complete(id, reply, out),
            Stage::Cold => {
                let key = self.requests[req].key().to_vec();
                w.stage = Stage::Warm(reply);
                (ReqSpec::FillRead { key }, w.warm_plan.clone())
            }
            Stage::Warm(miss) => match add_for(&self.requests[req], &reply, w.exptime) {
                Some(add) => {
                    w.stage = Stage::Add;
                    (add, w.fill_plan.clone())
                }
                None => return self.complete(id, miss, out),
            },
            // Whatever the add met, cold is asked again (mcrouter ignores the add's reply).
            Stage::Add => {
                w.stage = Stage::Again;
                (self.requests[req].clone(), w.cold_plan.clone())
            }
            Stage::Again | Stage::Over => return self.complete(id, reply, out),
        };
        // The client's own request keeps its index; the others get one of their own.
        let at = if matches!(w.stage, Stage::Again) {
            req
        } else {
            self.requests.push(request);
            self.requests.len() - 1
        };
        let child = self.build(&plan, Some(id), at, &mut |_| false);
        self.start_node(child, out);
    }
}

/// The `add` that copies warm's item to cold, or `None` when warm missed. A gat's own
/// exptime is the new item's; else the route's `exptime`, else what is left of warm's.
fn add_for(req: &ReqSpec, warm: &Reply, exptime: u32) -> Option<ReqSpec> {
    let (flags, ttl, value) = reply::meta_item(&warm.bytes)?;
    let exptime = match req {
        ReqSpec::Get {
            cmd: GetCmd::Gat(e) | GetCmd::Gats(e),
            ..
        } => *e,
        _ if exptime > 0 => i64::from(exptime),
        _ if ttl > 0 => ttl,
        _ => 0,
    };
    Some(ReqSpec::Store {
        cmd: proto::StoreCmd::Add,
        key: req.key().to_vec(),
        flags,
        exptime,
        data: value.to_vec(),
        cas: 0,
    })
}

#[cfg(test)]
#[path = "exec_warmup_cas_tests.rs"]
mod tests;
