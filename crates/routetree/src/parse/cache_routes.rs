//! KeySplitRoute and L1L2CacheRoute, read with the fields and checks of mcrouter's factories.

use serde_json::Value;

use super::builder::{Args, Builder, Result};
use crate::model::*;

/// mcrouter's bounds on KeySplitRoute's `replicas`.
pub const KEY_SPLIT_REPLICAS: (i64, i64) = (2, 1000);

impl<'a> Builder<'a> {
    pub(super) fn key_split_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "KeySplitRoute";
        let map = self.object(ty, args)?;
        let destination = self.field_one(ty, map, "destination")?;
        // mcrouter requires both, with no default.
        for key in ["replicas", "all_sync"] {
            if !map.contains_key(key) {
                return self.fail(format!("{ty} has no '{key}'"));
            }
        }
        let (min, max) = KEY_SPLIT_REPLICAS;
        let replicas = self.int_field(map, "replicas", min, min, max)? as usize;
        let all_sync = self.bool_field(map, "all_sync", false)?;
        let first_hit = self.bool_field(map, "first_hit", false)?;
        Ok(self.add(Route::KeySplit {
            destination,
            replicas,
            all_sync,
            first_hit,
        }))
    }

    pub(super) fn l1l2_cache_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "L1L2CacheRoute";
        let map = self.object(ty, args)?;
        let l1 = self.field_one(ty, map, "l1")?;
        let l2 = self.field_one(ty, map, "l2")?;
        if !matches!(map.get("upgradingL1Exptime"), Some(Value::Number(_))) {
            if map.contains_key("upgradingL1Exptime") {
                return self.key("upgradingL1Exptime", |b| {
                    b.fail("upgradingL1Exptime must be an integer")
                });
            }
            return self.fail(format!("{ty} has no 'upgradingL1Exptime'"));
        }
        let u32_max = i64::from(u32::MAX);
        let upgrading_l1_exptime = self.int_field(map, "upgradingL1Exptime", 0, 0, u32_max)? as u32;
        let ncache_exptime = self.int_field(map, "ncacheExptime", 0, 0, u32_max)? as u32;
        let ncache_update_period =
            self.int_field(map, "ncacheUpdatePeriod", 0, 0, u32_max)? as usize;
        Ok(self.add(Route::L1L2Cache {
            l1,
            l2,
            upgrading_l1_exptime,
            ncache_exptime,
            ncache_update_period,
        }))
    }
}
