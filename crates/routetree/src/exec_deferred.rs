//! Plans the executor asks for once their key is known ([`Action::Plan`]): the router plans
//! them with the request's config and hands them back through [`Exec::on_plan`].

use super::{Action, Exec, FailoverState, Kind};
use crate::Config;

impl Exec {
    /// Makes the plan of [`Action::Plan`]'s `node` with `config` (the one the request was
    /// planned with) at `now` (unix seconds), and starts it.
    pub fn on_plan(
        &mut self,
        node: usize,
        config: &Config,
        now: i64,
        limits: &mut FailoverState,
        out: &mut Vec<Action>,
    ) {
        let Kind::Deferred { plan, child: None } = &self.nodes[node].kind else {
            return;
        };
        let plan = config.plan_deferred(plan, now);
        std::mem::swap(&mut self.limits, limits);
        self.outstanding = self.outstanding.saturating_sub(1);
        let req = self.nodes[node].req;
        // Shadows below are not sampled: they get no copy.
        let child = self.build(&plan, Some(node), req, &mut |_| false);
        if let Kind::Deferred { child: c, .. } = &mut self.nodes[node].kind {
            *c = Some(child);
        }
        let from = out.len();
        self.start_node(child, out);
        if self.answered_before(node) {
            for a in &mut out[from..] {
                if let Action::Send { node } = *a {
                    *a = Action::SendCopy { node };
                }
            }
        }
        std::mem::swap(&mut self.limits, limits);
    }

    /// Whether `node` works in the background (under a root that answers no client part).
    fn answered_before(&self, mut node: usize) -> bool {
        while let Some(parent) = self.nodes[node].parent {
            node = parent;
        }
        self.nodes[node].part.is_none()
    }
}
