//! FailoverRoute and FailoverWithExptimeRoute: their children, which errors fail over, and
//! the failover rate limit.

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

/// Error results `failover_errors` may name (mcrouter's error results without `mc_res_`).
pub const ERROR_RESULTS: &[&str] = &[
    "ooo",
    "timeout",
    "connect_timeout",
    "connect_error",
    "busy",
    "try_again",
    "shutdown",
    "tko",
    "bad_command",
    "bad_key",
    "bad_flags",
    "bad_exptime",
    "bad_lease_id",
    "bad_cas_id",
    "bad_value",
    "aborted",
    "client_error",
    "local_error",
    "remote_error",
    "deadline_exceeded",
    "permission_denied",
    "hot_key",
    "overloaded",
];

/// The errors FailoverRoute fails over on when `failover_errors` does not say.
pub const DEFAULT_FAILOVER_ERRORS: &[&str] = &[
    "busy",
    "shutdown",
    "tko",
    "try_again",
    "local_error",
    "connect_error",
    "connect_timeout",
    "timeout",
    "remote_error",
    "deadline_exceeded",
];

impl<'a> Builder<'a> {
    pub(super) fn failover_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.children("FailoverRoute", args)?;
        let (errors, limit) = match args {
            Args::Object(map) => self.failover_settings(map)?,
            _ => (default_errors(), None),
        };
        Ok(self.add(Route::Failover {
            children,
            errors,
            limit,
        }))
    }

    pub(super) fn failover_with_exptime(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "FailoverWithExptimeRoute";
        let map = self.object(ty, args)?;
        let normal = self.field_one(ty, map, "normal")?;
        let failover = match map.get("failover") {
            Some(v) => self.key("failover", |b| b.list(v))?,
            None => Vec::new(),
        };
        let exptime = self.int_field(
            map,
            "failover_exptime",
            60,
            i64::from(i32::MIN),
            i64::from(i32::MAX),
        )?;
        let (errors, limit) = self.failover_settings(map)?;
        let mut children = vec![normal];
        for target in failover {
            if exptime > 0 {
                // mcrouter caps the exptime of what failover children store.
                let capped = self.add(Route::ModifyExptime {
                    target,
                    exptime,
                    action: ExptimeAction::Min,
                });
                children.extend(capped);
            } else {
                children.push(target);
            }
        }
        Ok(self.add(Route::Failover {
            children,
            errors,
            limit,
        }))
    }

    pub(super) fn failover_settings(
        &mut self,
        map: &'a Object,
    ) -> Result<(FailoverErrors, Option<FailoverLimit>)> {
        let errors = match map.get("failover_errors") {
            None => default_errors(),
            Some(v) => self.key("failover_errors", |b| b.failover_errors(v))?,
        };
        let limit = match map.get("failover_limit") {
            None => None,
            Some(v) => Some(self.key("failover_limit", |b| b.failover_limit(v))?),
        };
        if map.contains_key("failover_policy") {
            self.key("failover_policy", |b| {
                b.warn("failover_policy is ignored: children are tried in order");
                Ok(())
            })?;
        }
        Ok((errors, limit))
    }

    pub(super) fn failover_errors(&mut self, v: &Value) -> Result<FailoverErrors> {
        match v {
            Value::Array(_) => Ok(same_for_every_request(self.error_names(v)?)),
            Value::Object(map) => {
                let mut errors = default_errors();
                for (key, slot) in [
                    ("gets", &mut errors.gets),
                    ("updates", &mut errors.updates),
                    ("deletes", &mut errors.deletes),
                ] {
                    if let Some(list) = map.get(key) {
                        *slot = self.key(key, |b| b.error_names(list))?;
                    }
                }
                Ok(errors)
            }
            other => self.fail(format!(
                "failover_errors must be an array or an object of gets/updates/deletes, not {}",
                kind(other)
            )),
        }
    }

    pub(super) fn error_names(&mut self, v: &Value) -> Result<Vec<String>> {
        let Value::Array(items) = v else {
            return self.fail("expected an array of error names");
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let name = self.at(Seg::Index(i), |b| match item {
                Value::String(s) if ERROR_RESULTS.contains(&s.as_str()) => Ok(s.clone()),
                Value::String(s) => b.fail(format!(
                    "'{s}' is not an error result (one of: {})",
                    ERROR_RESULTS.join(", ")
                )),
                other => b.fail(format!("error names are strings, not {}", kind(other))),
            })?;
            out.push(name);
        }
        Ok(out)
    }

    pub(super) fn failover_limit(&mut self, v: &Value) -> Result<FailoverLimit> {
        let Value::Object(map) = v else {
            return self.fail("failover_limit must be an object with 'rate' (and 'burst')");
        };
        let rate = match map.get("rate") {
            Some(r) => self.key("rate", |b| b.number(r, "rate"))?,
            None => return self.fail("failover_limit has no 'rate'"),
        };
        let burst = match map.get("burst") {
            Some(r) => self.key("burst", |b| b.number(r, "burst"))?,
            None => 1000.0,
        };
        Ok(FailoverLimit {
            rate: rate.clamp(0.0, 1.0),
            burst: burst.max(1.0),
        })
    }
}

fn default_errors() -> FailoverErrors {
    same_for_every_request(
        DEFAULT_FAILOVER_ERRORS
            .iter()
            .map(|s| s.to_string())
            .collect(),
    )
}

/// The same error list for gets, updates and deletes.
fn same_for_every_request(list: Vec<String>) -> FailoverErrors {
    FailoverErrors {
        gets: list.clone(),
        updates: list.clone(),
        deletes: list,
    }
}
