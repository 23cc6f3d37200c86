//! MigrateRoute (moving a key space from one route to another at a set time) and
//! StagingRoute (a warm route that answers, and a staging route kept in step behind it).

use serde_json::Value;

use super::builder::{Args, Builder, Result};
use super::fields::kind;
use crate::model::*;

impl<'a> Builder<'a> {
    /// `{"type": "MigrateRoute", "from": R, "to": R, "start_time": unix secs, "interval":
    /// secs (default 3600)}`, checked as mcrouter checks it.
    pub(super) fn migrate_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "MigrateRoute";
        let map = self.object(ty, args)?;
        let start_time = match map.get("start_time") {
            Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or(0),
            Some(other) => {
                let msg = format!(
                    "start_time must be an integer (unix seconds), not {}",
                    kind(other)
                );
                return self.key("start_time", |b| b.fail(msg));
            }
            None => return self.fail("MigrateRoute has no 'start_time'"),
        };
        let from = self.field_one(ty, map, "from")?;
        let to = self.field_one(ty, map, "to")?;
        // mcrouter takes the key's hash modulo the interval: 0 would divide by zero.
        let interval = self.int_field(map, "interval", 3600, 1, i64::from(u32::MAX))?;
        Ok(self.add(Route::Migrate {
            from,
            to,
            start_time,
            interval,
        }))
    }

    /// `{"type": "StagingRoute", "warm": R, "staging": R}`.
    pub(super) fn staging_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "StagingRoute";
        let map = self.object(ty, args)?;
        let warm = self.field_one(ty, map, "warm")?;
        let staging = self.field_one(ty, map, "staging")?;
        Ok(self.add(Route::Staging { warm, staging }))
    }
}
