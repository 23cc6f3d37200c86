//! MigrateRoute's choice by time and StagingRoute's per-operation plan.

use ring::spooky;

use super::{Eval, OpClass, Plan};
use crate::{AllMode, Target};

/// What StagingRoute's staging side gets once warm answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagingOp {
    /// get / lease-get: on a warm hit, the warm item is added to staging.
    Fill,
    /// set / lease-set / cas: once warm stored it, the value is `set` on staging.
    SetIfStored,
    /// Anything else: the same request, unless warm's reply is an error.
    CopyUnlessError,
    /// gets: nothing (mcrouter only touches the item's LRU position with a metaget).
    Nothing,
    /// MigrateRoute's lease-set just after its key moved: if the new pool did not store it,
    /// the old pool gets the lease-set with exptime -1, so it does not keep the lease token.
    InvalidateLease,
}

/// How long after a key's switch MigrateRoute invalidates failed lease-sets' tokens on the
/// old pool (mcrouter's 10 s).
const LEASE_INVALIDATION_SECS: i64 = 10;

/// The wall clock in unix seconds, which MigrateRoutes go by.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Eval<'_, '_> {
    /// mcrouter's MigrateRoute: deletes go to `from` before the start, to both (worst reply)
    /// for two intervals, then to `to`; everything else moves from `from` to `to` at a time
    /// in the second interval that the routing key's hash picks, so keys move gradually. A
    /// lease-set that the new pool does not store in the first seconds after the switch
    /// invalidates its token on the old pool.
    pub(super) fn migrate(&mut self, from: Target, to: Target, start: i64, interval: i64) -> Plan {
        let now = self.now;
        if self.class == OpClass::Delete {
            if now < start {
                return self.target(from);
            }
            if now < start.saturating_add(interval.saturating_mul(2)) {
                return Plan::All {
                    mode: AllMode::Sync,
                    plans: vec![self.target(from), self.target(to)],
                };
            }
            return self.target(to);
        }
        let switch = self.migration_time(start, interval);
        if now < switch {
            return self.target(from);
        }
        if self.op == "lease-set" && now < switch.saturating_add(LEASE_INVALIDATION_SECS) {
            // The new pool answers; the old one may hold the token its lease-get handed out.
            return Plan::Staging {
                warm: Box::new(self.target(to)),
                staging: Box::new(self.target(from)),
                op: StagingOp::InvalidateLease,
            };
        }
        self.target(to)
    }

    /// When this key's non-delete traffic switches to `to`.
    fn migration_time(&self, start: i64, interval: i64) -> i64 {
        let hash = i64::from(spooky::hash32(self.rk.hashed, 0));
        start
            .saturating_add(interval)
            .saturating_add(hash % interval.max(1))
    }

    /// mcrouter's StagingRoute: deletes go to both sides (worst reply); everything else is
    /// answered by warm, with staging brought along in the background (see [`StagingOp`]).
    pub(super) fn staging(&mut self, warm: Target, staging: Target) -> Plan {
        let op = match self.op {
            _ if self.class == OpClass::Delete => {
                return Plan::All {
                    mode: AllMode::Sync,
                    plans: vec![self.target(warm), self.target(staging)],
                };
            }
            "get" | "lease-get" => StagingOp::Fill,
            "gets" => StagingOp::Nothing,
            "set" | "lease-set" | "cas" => StagingOp::SetIfStored,
            _ => StagingOp::CopyUnlessError,
        };
        let warm = self.target(warm);
        if op == StagingOp::Nothing {
            return warm;
        }
        Plan::Staging {
            warm: Box::new(warm),
            staging: Box::new(self.target(staging)),
            op,
        }
    }
}

#[cfg(test)]
#[path = "plan_migrate_tests.rs"]
mod tests;
