//! StagingRoute's execution: warm answers the client; staging gets its copy afterwards,
//! as a background job the client never waits for. MigrateRoute's lease invalidation of
//! the old pool runs the same way (the new pool answers, the old one gets the invalidation).

use super::{Action, Exec, Kind};
pub(super) use crate::plan::StagingOp;
use crate::reply::{is_hit, McResult, Reply};
use crate::request::ReqSpec;
use crate::Plan;

pub(super) struct Staging {
    pub(super) warm: usize,
    warm_plan: Plan,
    staging_plan: Plan,
    op: StagingOp,
}

impl Exec {
    pub(super) fn build_staging(
        &mut self,
        id: usize,
        warm: &Plan,
        staging: &Plan,
        op: StagingOp,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        Kind::Staging(Staging {
            warm: self.build(warm, Some(id), req, sample),
            warm_plan: warm.clone(),
            staging_plan: staging.clone(),
            op,
        })
    }

    pub(super) fn staging_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let Kind::Staging(st) = &self.nodes[id].kind else {
            return;
        };
        let req = self.nodes[id].req;
        // The request staging gets, and the plan that reaches it.
        let copy = match st.op {
            StagingOp::Fill if is_hit(&reply) => {
                // Read the whole item (flags, remaining TTL) from warm, then add it.
                let key = self.requests[req].key().to_vec();
                Some((ReqSpec::FillRead { key }, st.warm_plan.clone(), true))
            }
            StagingOp::SetIfStored if reply.result == McResult::Ok => {
                as_set(&self.requests[req]).map(|r| (r, st.staging_plan.clone(), false))
            }
            StagingOp::CopyUnlessError if !reply.result.is_error() => {
                Some((self.requests[req].clone(), st.staging_plan.clone(), false))
            }
            StagingOp::InvalidateLease if reply.result != McResult::Ok => {
                lease_invalidation(&self.requests[req]).map(|r| (r, st.staging_plan.clone(), false))
            }
            _ => None,
        };
        let staging_plan = st.staging_plan.clone();
        self.complete(id, reply, out);
        let Some((request, plan, fill)) = copy else {
            return;
        };
        self.requests.push(request);
        let copy_req = self.requests.len() - 1;
        let root = self.background_root(copy_req);
        let from = out.len();
        if fill {
            let read = self.build(&plan, Some(root), copy_req, &mut |_| false);
            self.nodes[root].kind = Kind::Fill {
                read,
                cold_plan: staging_plan,
                exptime: 0,
            };
        } else {
            let child = self.build(&plan, Some(root), copy_req, &mut |_| false);
            self.nodes[root].kind = Kind::Rekey {
                child,
                key: Vec::new(),
            };
            // Nothing waits for the copy's reply: the root only keeps the tree whole.
            self.nodes[root].done = true;
        }
        self.start_node(root, out);
        for a in &mut out[from..] {
            if let Action::Send { node } = *a {
                *a = Action::SendCopy { node };
            }
        }
    }
}

/// mcrouter passes a stored set, lease-set or cas on to staging as a plain set.
fn as_set(req: &ReqSpec) -> Option<ReqSpec> {
    match req {
        ReqSpec::Store {
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
        } => Some(ReqSpec::Store {
            cmd: proto::StoreCmd::Set,
            key: key.clone(),
            flags: *flags,
            exptime: *exptime,
            data: data.clone(),
            cas: 0,
        }),
        // A meta set is passed on as it is (`ms` without a cas is a set already).
        other => Some(other.clone()),
    }
}

/// mcrouter's lease invalidation: the key and token of a lease-set, exptime -1, no value.
fn lease_invalidation(req: &ReqSpec) -> Option<ReqSpec> {
    match req {
        ReqSpec::LeaseSet { key, token, .. } => Some(ReqSpec::LeaseSet {
            key: key.clone(),
            token: *token,
            flags: 0,
            exptime: -1,
            data: Vec::new(),
        }),
        _ => None,
    }
}

#[cfg(test)]
#[path = "exec_staging_tests.rs"]
mod tests;
