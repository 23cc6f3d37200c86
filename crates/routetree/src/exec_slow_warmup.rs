//! PoolRoute `slow_warmup`'s execution: per server (of each route, per worker) the hits and
//! misses its replies had, whether it is warming up, and the coin that decides which gets
//! it receives meanwhile.

use std::collections::HashMap;

use super::{Action, Exec, Kind};
use crate::model::SlowWarmUpSettings;
use crate::reply::{McResult, Reply};
use crate::{Plan, RouteId};

pub(super) struct SlowWarmUp {
    target: usize,
    failover: usize,
    server: (RouteId, usize),
    settings: SlowWarmUpSettings,
    get_like: bool,
    /// Whether the request went to the target, whose reply counts.
    counted: bool,
}

#[derive(Debug, Default)]
struct Stats {
    hits: u64,
    misses: u64,
    enabled: bool,
}

impl Stats {
    /// mcrouter's hit rate: 1 until `min_requests` replies were counted.
    fn hit_rate(&self, min_requests: u64) -> f64 {
        let total = self.hits + self.misses;
        if total < min_requests {
            return 1.0;
        }
        self.hits as f64 / total as f64
    }

    /// Warming up starts below the enable threshold and lasts up to the disable threshold.
    fn warming_up(&mut self, s: &SlowWarmUpSettings) -> bool {
        let rate = self.hit_rate(s.min_requests);
        let threshold = if self.enabled {
            s.disable_threshold
        } else {
            s.enable_threshold
        };
        self.enabled = rate < threshold;
        self.enabled
    }
}

/// Every warming server's counts, and a generator for the coin (seeded, so a worker's
/// choices are reproducible; no clock or OS randomness in here).
#[derive(Debug)]
pub(super) struct WarmUpState {
    stats: HashMap<(RouteId, usize), Stats>,
    rng: u64,
}

impl Default for WarmUpState {
    fn default() -> Self {
        WarmUpState {
            stats: HashMap::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl WarmUpState {
    pub(super) fn clear(&mut self) {
        self.stats.clear();
    }

    /// Whether a get-like request goes to the server (else to the failover target): yes
    /// unless it is warming up, then with chance `start + hit rate * step`.
    fn sends_to_target(&mut self, server: (RouteId, usize), s: &SlowWarmUpSettings) -> bool {
        let stats = self.stats.entry(server).or_default();
        if !stats.warming_up(s) {
            return true;
        }
        let fraction = s.start + stats.hit_rate(s.min_requests) * s.step;
        self.uniform() <= fraction
    }

    fn record(&mut self, server: (RouteId, usize), result: McResult) {
        let stats = self.stats.entry(server).or_default();
        match result {
            McResult::Found => stats.hits += 1,
            McResult::NotFound => stats.misses += 1,
            _ => {}
        }
    }

    /// xorshift64*: a uniform number in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Exec {
    pub(super) fn build_slow_warmup(
        &mut self,
        id: usize,
        plan: &Plan,
        req: usize,
        sample: &mut dyn FnMut(f64) -> bool,
    ) -> Kind {
        let Plan::SlowWarmUp {
            target,
            failover,
            server,
            settings,
            get_like,
        } = plan
        else {
            unreachable!("called for SlowWarmUp plans")
        };
        Kind::SlowWarmUp(SlowWarmUp {
            target: self.build(target, Some(id), req, sample),
            failover: self.build(failover, Some(id), req, sample),
            server: *server,
            settings: *settings,
            get_like: *get_like,
            counted: true,
        })
    }

    pub(super) fn start_slow_warmup(&mut self, id: usize, out: &mut Vec<Action>) {
        let Kind::SlowWarmUp(sw) = &mut self.nodes[id].kind else {
            return;
        };
        sw.counted = !sw.get_like || self.limits.warmup.sends_to_target(sw.server, &sw.settings);
        let child = if sw.counted { sw.target } else { sw.failover };
        self.start_node(child, out);
    }

    pub(super) fn slow_warmup_child_done(
        &mut self,
        id: usize,
        reply: Reply,
        out: &mut Vec<Action>,
    ) {
        if let Kind::SlowWarmUp(sw) = &self.nodes[id].kind {
            if sw.counted {
                self.limits.warmup.record(sw.server, reply.result);
            }
        }
        self.complete(id, reply, out);
    }
}

#[cfg(test)]
#[path = "exec_slow_warmup_tests.rs"]
mod tests;
