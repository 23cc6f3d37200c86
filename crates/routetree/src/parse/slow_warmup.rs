//! PoolRoute's `slow_warmup`: mcrouter's SlowWarmUpRoute around each of the pool's servers.

use serde_json::Value;

use super::builder::{Builder, Object, Result};
use super::fields::kind;
use crate::model::*;

impl<'a> Builder<'a> {
    /// Wraps `pool_route` in a SlowWarmUp route when the PoolRoute has `slow_warmup`:
    /// `{"failoverTarget": R, "settings": {...}}`.
    pub(super) fn pool_slow_warmup(
        &mut self,
        map: Option<&'a Object>,
        pool_route: Vec<Target>,
    ) -> Result<Vec<Target>> {
        let (Some(v), [target]) = (
            map.and_then(|m| m.get("slow_warmup")),
            pool_route.as_slice(),
        ) else {
            return Ok(pool_route);
        };
        let target = *target;
        self.key("slow_warmup", |b| {
            let Value::Object(sw) = v else {
                return b.fail(format!("slow_warmup must be an object, not {}", kind(v)));
            };
            let failover = b.field_one("slow_warmup", sw, "failoverTarget")?;
            let settings = match sw.get("settings") {
                None => SlowWarmUpSettings::default(),
                Some(Value::Object(s)) => b.key("settings", |b| b.warmup_settings(s))?,
                Some(other) => {
                    let msg = format!("settings must be an object, not {}", kind(other));
                    return b.key("settings", |b| b.fail(msg));
                }
            };
            Ok(b.add(Route::SlowWarmUp {
                target,
                failover,
                settings,
            }))
        })
    }

    fn warmup_settings(&mut self, map: &'a Object) -> Result<SlowWarmUpSettings> {
        let mut s = SlowWarmUpSettings::default();
        let number =
            |b: &mut Self, key: &str, ok: &dyn Fn(f64) -> bool, range: &str| match map.get(key) {
                None => Ok(None),
                Some(v) => b.key(key, |b| {
                    let x = b.number(v, key)?;
                    if !ok(x) {
                        return b.fail(format!("{key} must be a number in {range}"));
                    }
                    Ok(Some(x))
                }),
            };
        for key in ["enable_threshold", "disable_threshold"] {
            if !map.contains_key(key) {
                return self.fail(format!("slow_warmup settings have no '{key}'"));
            }
        }
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        s.enable_threshold = number(self, "enable_threshold", &unit, "[0, 1]")?.unwrap_or(0.0);
        s.disable_threshold = number(self, "disable_threshold", &unit, "[0, 1]")?.unwrap_or(0.0);
        if s.enable_threshold >= s.disable_threshold {
            return self.key("enable_threshold", |b| {
                b.fail("enable_threshold must be below disable_threshold")
            });
        }
        let open = |x: f64| x > 0.0 && x < 1.0;
        if let Some(x) = number(self, "start", &open, "(0, 1)")? {
            s.start = x;
        }
        if let Some(x) = number(self, "step", &|x| x > 0.0 && x < 100.0, "(0, 100)")? {
            s.step = x;
        }
        s.min_requests = self.int_field(map, "min_requests", 100, 1, i64::MAX)? as u64;
        Ok(s)
    }
}
