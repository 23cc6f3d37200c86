//! L1L2SizeSplitRoute's per-operation plan.

use super::{Eval, Plan};
use crate::Target;

/// What an L1L2SizeSplitRoute does with a request that is not simply `l1`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSplitOp {
    /// get and gets: `l1`, and on a sentinel hit `l2`.
    Get,
    /// set: by the value's size, whole to `l1`, or to `l2` plus a sentinel on `l1`.
    Set,
}

/// When a set is split, as mcrouter decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeSplitRule {
    /// Values this long or longer are split (0: never).
    pub threshold: usize,
    /// Sets with an exptime below this are not split (0: no such rule).
    pub ttl_threshold: i64,
    /// Large values go whole to `l1`, and to `l2` in the background.
    pub both_full_set: bool,
}

/// mcrouter's room for the `|==|<u64>` it appends to lease-set keys: longer keys are never
/// split, whatever the operation.
const KEY_ROOM: usize = 255 - 4 - 20;

impl SizeSplitRule {
    /// Whether a set of `len` bytes with `exptime` under `key` stays whole on `l1`.
    pub fn whole_to_l1(&self, key: &[u8], len: usize, exptime: i64) -> bool {
        self.threshold == 0
            || len < self.threshold
            || (self.ttl_threshold != 0 && exptime < self.ttl_threshold)
            || key.len() > KEY_ROOM
    }
}

impl Eval<'_, '_> {
    /// mcrouter's L1L2SizeSplitRoute: get, gets and set are split by size; lease-get and
    /// lease-set are not served; every other operation (deletes too) goes to `l1` only.
    pub(super) fn size_split(&mut self, l1: Target, l2: Target, rule: SizeSplitRule) -> Plan {
        let op = match self.op {
            "get" | "gets" => SizeSplitOp::Get,
            "set" => SizeSplitOp::Set,
            op @ ("lease-get" | "lease-set") => {
                return Plan::Error(format!(
                    "L1L2SizeSplitRoute does not serve {op} (lease-set's suffixed keys are \
                     not supported)"
                ))
            }
            _ => return self.target(l1),
        };
        Plan::SizeSplit {
            l1: Box::new(self.target(l1)),
            l2: Box::new(self.target(l2)),
            rule,
            op,
        }
    }
}

#[cfg(test)]
#[path = "plan_size_split_tests.rs"]
mod tests;
