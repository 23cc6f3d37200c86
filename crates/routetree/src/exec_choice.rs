//! RandomRoute's pick and LatencyInjectionRoute's waits. A wait is an [`Action::Wait`]: the
//! worker calls [`Exec::on_timer`] once the time has passed, so nothing here blocks.

use super::{Action, Exec, FailoverState, Kind};
use crate::reply::Reply;
use crate::Plan;

/// Timer of a delay node: the wait before the child or after its reply.
pub const TIMER_STEP: u8 = 0;
/// Timer of a delay node: the least time from its start to its reply.
pub const TIMER_TOTAL: u8 = 1;

/// Where a LatencyInjectionRoute is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Before,
    Running,
    After,
    Ready,
}

pub(super) struct Delay {
    child: usize,
    before_ms: u64,
    after_ms: u64,
    total_ms: u64,
    phase: Phase,
    /// The total time has passed (or there is none).
    total_passed: bool,
    reply: Option<Reply>,
}

impl Exec {
    /// RandomRoute: one plan, uniform over `plans` with fair coins of 1/n, 1/(n-1), ..., 1.
    pub(super) fn build_random(
        &mut self,
        plans: &[Plan],
        parent: Option<usize>,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> usize {
        let n = plans.len();
        match n {
            0 => self.build(&Plan::Null, parent, req, sample),
            _ => {
                let chosen = (0..n).find(|&i| sample(1.0 / (n - i) as f64)).unwrap_or(0);
                self.build(&plans[chosen], parent, req, sample)
            }
        }
    }

    pub(super) fn build_delay(
        &mut self,
        id: usize,
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let Plan::Delay {
            plan,
            before_ms,
            after_ms,
            total_ms,
        } = plan
        else {
            unreachable!("called for Plan::Delay")
        };
        Kind::Delay(Delay {
            child: self.build(plan, Some(id), req, sample),
            before_ms: *before_ms,
            after_ms: *after_ms,
            total_ms: *total_ms,
            phase: Phase::Before,
            total_passed: *total_ms == 0,
            reply: None,
        })
    }

    pub(super) fn start_delay(&mut self, id: usize, out: &mut Vec<Action>) {
        let Kind::Delay(d) = &mut self.nodes[id].kind else {
            return;
        };
        let (child, before_ms, total_ms) = (d.child, d.before_ms, d.total_ms);
        if total_ms > 0 {
            self.wait(id, TIMER_TOTAL, total_ms, out);
        }
        if before_ms > 0 {
            self.wait(id, TIMER_STEP, before_ms, out);
        } else {
            self.set_phase(id, Phase::Running);
            self.start_node(child, out);
        }
    }

    fn wait(&mut self, node: usize, timer: u8, ms: u64, out: &mut Vec<Action>) {
        self.outstanding += 1;
        out.push(Action::Wait { node, timer, ms });
    }

    fn set_phase(&mut self, id: usize, phase: Phase) {
        if let Kind::Delay(d) = &mut self.nodes[id].kind {
            d.phase = phase;
        }
    }

    /// The child of a delay node replied.
    pub(super) fn delay_child_done(&mut self, id: usize, reply: Reply, out: &mut Vec<Action>) {
        let Kind::Delay(d) = &mut self.nodes[id].kind else {
            return;
        };
        d.reply = Some(reply);
        if d.after_ms > 0 {
            d.phase = Phase::After;
            let ms = d.after_ms;
            self.wait(id, TIMER_STEP, ms, out);
        } else {
            d.phase = Phase::Ready;
            self.finish_delay(id, out);
        }
    }

    /// A timer that an [`Action::Wait`] asked for has run out.
    pub fn on_timer(
        &mut self,
        node: usize,
        timer: u8,
        limits: &mut FailoverState,
        out: &mut Vec<Action>,
    ) {
        std::mem::swap(&mut self.limits, limits);
        self.outstanding = self.outstanding.saturating_sub(1);
        if let Kind::Delay(d) = &mut self.nodes[node].kind {
            match (timer, d.phase) {
                (TIMER_TOTAL, _) => {
                    d.total_passed = true;
                    self.finish_delay(node, out);
                }
                (_, Phase::Before) => {
                    d.phase = Phase::Running;
                    let child = d.child;
                    self.start_node(child, out);
                }
                (_, Phase::After) => {
                    d.phase = Phase::Ready;
                    self.finish_delay(node, out);
                }
                _ => {}
            }
        }
        std::mem::swap(&mut self.limits, limits);
    }

    fn finish_delay(&mut self, id: usize, out: &mut Vec<Action>) {
        let Kind::Delay(d) = &mut self.nodes[id].kind else {
            return;
        };
        if d.phase == Phase::Ready && d.total_passed {
            if let Some(reply) = d.reply.take() {
                self.complete(id, reply, out);
            }
        }
    }
}
