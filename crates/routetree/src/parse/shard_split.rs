//! PoolRoute's `shard_splits`: mcrouter's ShardSplitRoute around the pool route.

use serde_json::Value;

use super::builder::{Builder, Object, Result};
use super::fields::kind;
use crate::model::*;

/// mcrouter's most sub-shards: the two-letter suffixes (26 * 26) and the shard itself.
const MAX_SPLITS: i64 = 26 * 26 + 1;

impl<'a> Builder<'a> {
    /// Wraps `pool_route` in a ShardSplit route when the PoolRoute has `shard_splits`.
    pub(super) fn pool_shard_splits(
        &mut self,
        map: Option<&'a Object>,
        pool_route: Vec<Target>,
    ) -> Result<Vec<Target>> {
        let (Some(v), [destination]) = (
            map.and_then(|m| m.get("shard_splits")),
            pool_route.as_slice(),
        ) else {
            return Ok(pool_route);
        };
        let destination = *destination;
        let Value::Object(splits_json) = v else {
            let msg = format!("shard_splits must be an object, not {}", kind(v));
            return self.key("shard_splits", |b| b.fail(msg));
        };
        // `split_shard_fanout` spreads requests that carry a Facebook object id (TAO);
        // memcache requests carry none, so mcrouter ignores it for them as well.
        if let Some(map) = map {
            self.int_field(map, "split_shard_fanout", 0, 0, i64::from(u32::MAX))?;
        }
        let mut splits = Vec::new();
        for (shard, split) in splits_json {
            let split = self.key("shard_splits", |b| b.key(shard, |b| b.shard_split(split)))?;
            if split.old_size > 1 || split.new_size > 1 {
                splits.push((shard.clone(), split));
            }
        }
        splits.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(self.add(Route::ShardSplit {
            destination,
            splits,
        }))
    }

    /// A number of sub-shards, or `{"old_split_size", "new_split_size", "split_start",
    /// "migration_period", "fanout_deletes"}` for a split that grows over time.
    fn shard_split(&mut self, v: &'a Value) -> Result<ShardSplit> {
        match v {
            Value::Number(_) => {
                let n = self.split_size(v, "a shard's split")?;
                Ok(ShardSplit {
                    old_size: n,
                    new_size: n,
                    start: 0,
                    period: 0,
                    fanout_deletes: true,
                })
            }
            Value::Object(map) => {
                let size = |b: &mut Self, key: &str| match map.get(key) {
                    None => Ok(1),
                    Some(v) => b.key(key, |b| b.split_size(v, key)),
                };
                Ok(ShardSplit {
                    old_size: size(self, "old_split_size")?,
                    new_size: size(self, "new_split_size")?,
                    start: self.int_field(map, "split_start", 0, 0, i64::MAX)?,
                    period: self.int_field(map, "migration_period", 0, 0, i64::MAX)?,
                    fanout_deletes: self.bool_field(map, "fanout_deletes", false)?,
                })
            }
            other => self.fail(format!(
                "a shard's split must be an integer or an object, not {}",
                kind(other)
            )),
        }
    }

    /// A split size: an integer above 0; above 677 counts as 677, as in mcrouter.
    fn split_size(&mut self, v: &Value, what: &str) -> Result<usize> {
        match v.as_i64() {
            Some(n) if n > 0 => Ok(n.min(MAX_SPLITS) as usize),
            _ => self.fail(format!("{what} must be an integer above 0")),
        }
    }
}
