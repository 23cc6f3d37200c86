//! L1L2SizeSplitRoute's per-operation plan, and the plans the executor asks for once a key
//! is known (lease-set's l2 key, or the one a sentinel names).

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use ring::RoutingKey;

use super::{Eval, Plan, MAX_PLAN_NODES};
use crate::model::{Config, ExptimeAction};
use crate::Target;

/// What an L1L2SizeSplitRoute does with a request that is not simply `l1`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSplitOp {
    /// get and gets: `l1`, and on a sentinel hit `l2`.
    Get,
    /// set: by the value's size, whole to `l1`, or to `l2` plus a sentinel on `l1`.
    Set,
    /// lease-get: as gets, a lease miss on a sentinel answering as a lease miss.
    LeaseGet,
    /// lease-set: by size, whole to `l1`, or to `l2` under `<key>|==|<suffix>` plus a
    /// sentinel on `l1` whose value is the suffix.
    LeaseSet {
        /// Drawn when the request is planned, as mcrouter draws it per request.
        suffix: u32,
    },
}

/// When a set is split, as mcrouter decides it, and how gets clean up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeSplitRule {
    /// Values this long or longer are split (0: never).
    pub threshold: usize,
    /// Sets with an exptime below this are not split (0: no such rule).
    pub ttl_threshold: i64,
    /// Large values go whole to `l1`, and to `l2` in the background.
    pub both_full_set: bool,
    /// A large lease-set `l2` did not store goes whole to `l1` with at most this exptime.
    pub failure_ttl: i64,
    /// How often gets and lease-get ask `l1` again after removing a sentinel whose value
    /// `l2` no longer has.
    pub retries: u32,
}

/// The route's levels, for plans of keys only the executor learns.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeSplitLevels {
    /// Small values and sentinels.
    pub l1: Target,
    /// Large values.
    pub l2: Target,
    /// Exptime rewrites of the ModifyExptimeRoutes above the route.
    pub exptime: Vec<(ExptimeAction, i64)>,
}

/// A plan to make once the key is known: `target` for `op` on `key`.
#[derive(Clone, Debug, PartialEq)]
pub struct Deferred {
    /// Where in the tree.
    pub target: Target,
    /// The key sent (with the client's routing prefix); replies carry the client's again.
    pub key: Vec<u8>,
    /// The operation as route handles see it.
    pub op: &'static str,
    /// Exptime rewrites of the ModifyExptimeRoutes above `target`.
    pub exptime: Vec<(ExptimeAction, i64)>,
}

/// Between the key and lease-set's suffix in l2 keys, as in mcrouter.
pub const L2_KEY_SEPARATOR: &[u8] = b"|==|";

/// mcrouter's room for the `|==|<u64>` it appends to lease-set keys: longer keys are never
/// split, whatever the operation.
const KEY_ROOM: usize = 255 - 4 - 20;

/// The l2 key of a lease-set's value: `<key>|==|<suffix>`.
pub fn l2_key(key: &[u8], suffix: &[u8]) -> Vec<u8> {
    [key, L2_KEY_SEPARATOR, suffix].concat()
}

impl SizeSplitRule {
    /// Whether a set of `len` bytes with `exptime` under `key` stays whole on `l1`.
    pub fn whole_to_l1(&self, key: &[u8], len: usize, exptime: i64) -> bool {
        self.threshold == 0
            || len < self.threshold
            || (self.ttl_threshold != 0 && exptime < self.ttl_threshold)
            || key.len() > KEY_ROOM
    }
}

thread_local! {
    static SUFFIXES: Cell<u64> = const { Cell::new(0) };
}

/// A random 32-bit number (mcrouter draws its suffixes from a 32-bit Mersenne twister).
fn random_suffix() -> u32 {
    SUFFIXES.with(|state| {
        let mut x = state.get();
        if x == 0 {
            x = RandomState::new().hash_one(0u8) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x >> 32) as u32
    })
}

impl Eval<'_, '_> {
    /// mcrouter's L1L2SizeSplitRoute: get, gets, lease-get, set and lease-set are split by
    /// size; every other operation (deletes too) goes to `l1` only.
    pub(super) fn size_split(&mut self, l1: Target, l2: Target, rule: SizeSplitRule) -> Plan {
        let op = match self.op {
            "get" | "gets" => SizeSplitOp::Get,
            "set" => SizeSplitOp::Set,
            "lease-get" => SizeSplitOp::LeaseGet,
            "lease-set" => SizeSplitOp::LeaseSet {
                suffix: random_suffix(),
            },
            _ => return self.target(l1),
        };
        Plan::SizeSplit {
            l1: Box::new(self.target(l1)),
            l2: Box::new(self.target(l2)),
            rule,
            op,
            levels: SizeSplitLevels {
                l1,
                l2,
                exptime: self.exptime.clone(),
            },
        }
    }
}

impl Config {
    /// The plan a [`Plan::Deferred`] stands for, at `now` (unix seconds).
    pub fn plan_deferred(&self, deferred: &Deferred, now: i64) -> Plan {
        let mut eval = Eval {
            exptime: deferred.exptime.clone(),
            ..Eval::new(self, deferred.op, RoutingKey::parse(&deferred.key), now)
        };
        let plan = eval.target(deferred.target);
        if eval.nodes > MAX_PLAN_NODES {
            return Plan::Error("route tree too large for one request".into());
        }
        Plan::Rekey {
            key: deferred.key.clone(),
            plan: Box::new(plan),
        }
    }
}

#[cfg(test)]
#[path = "plan_size_split_tests.rs"]
mod tests;
