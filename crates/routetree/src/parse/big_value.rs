//! BigValueRoute: `{"type": "BigValueRoute", "target": ..., "split_threshold": N,
//! "batch_size": N, "hide_reply_flag": bool}`, and where in a tree memfleet accepts one.

use super::builder::{Args, Builder, Result};
use crate::model::*;

const TY: &str = "BigValueRoute";

impl<'a> Builder<'a> {
    pub(super) fn big_value_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let map = self.object(TY, args)?;
        let target = self.field_one(TY, map, "target")?;
        // Both required, as in mcrouter; i64::MAX is its upper bound too.
        let int = |b: &mut Self, key: &str| -> Result<usize> {
            if !map.contains_key(key) {
                return b.fail(format!("{TY} has no '{key}'"));
            }
            Ok(b.int_field(map, key, 0, 0, i64::MAX)? as usize)
        };
        let threshold = int(self, "split_threshold")?;
        let batch = int(self, "batch_size")?;
        let hide_reply_flag = self.bool_field(map, "hide_reply_flag", false)?;
        let made = self.add(Route::BigValue {
            target,
            settings: BigValueSettings {
                threshold,
                batch,
                hide_reply_flag,
            },
        });
        if let [Target::Route(id)] = made.as_slice() {
            self.big_values.push((*id, self.path.clone()));
        }
        Ok(made)
    }

    /// Refuses a BigValueRoute that something other than prefix selection leads to: the
    /// router splits a value by sending its chunks back through the route tree from the
    /// top, so they reach the handle's target only when every handle above picks its
    /// child by the key's prefix, which a chunk key (`<key>:<i>:<suffix>`) shares.
    pub(super) fn check_big_values(&self, config: &Config) -> Result<()> {
        if self.big_values.is_empty() {
            return Ok(());
        }
        let Err((id, message)) = crate::big_value::check_placement(config) else {
            return Ok(());
        };
        let path = self
            .big_values
            .iter()
            .find(|(b, _)| *b == id)
            .map(|(_, p)| p.clone())
            .unwrap_or_default();
        self.fail_at(path, message)
    }
}
