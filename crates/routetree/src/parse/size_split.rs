//! L1L2SizeSplitRoute, read with the fields and checks of mcrouter's factory.

use super::builder::{Args, Builder, Result};
use crate::model::*;

/// mcrouter's bounds on `retries`.
pub const SIZE_SPLIT_RETRIES: (i64, i64) = (1, 10);

impl<'a> Builder<'a> {
    pub(super) fn l1l2_size_split_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "L1L2SizeSplitRoute";
        let map = self.object(ty, args)?;
        let l1 = self.field_one(ty, map, "l1")?;
        let l2 = self.field_one(ty, map, "l2")?;
        if !map.contains_key("threshold") {
            return self.fail(format!("{ty} has no 'threshold'"));
        }
        let threshold = self.int_field(map, "threshold", 0, 0, i64::MAX)? as usize;
        let i32_max = i64::from(i32::MAX);
        let ttl_threshold = self.int_field(map, "ttl_threshold", 0, 0, i32_max)?;
        // mcrouter: nonnegative and not zero.
        let failure_ttl = self.int_field(map, "failure_ttl", 60, 1, i32_max)?;
        let both_full_set = self.bool_field(map, "both_full_set", false)?;
        let (min, max) = SIZE_SPLIT_RETRIES;
        let retries = self.int_field(map, "retries", min, min, max)? as u32;
        Ok(self.add(Route::L1L2SizeSplit {
            l1,
            l2,
            threshold,
            ttl_threshold,
            failure_ttl,
            both_full_set,
            retries,
        }))
    }
}
