//! FailoverRoute and FailoverWithExptimeRoute: their children, which errors fail over, the
//! failover rate limit and the failover policy.

use ring::PoolHash;
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
        let (errors, limit, policy) = match args {
            Args::Object(map) => self.failover_settings(map, children.len())?,
            _ => (default_errors(), None, FailoverPolicy::InOrder),
        };
        Ok(self.add(Route::Failover {
            children,
            errors,
            limit,
            policy,
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
        let (errors, limit, policy) = self.failover_settings(map, children.len())?;
        Ok(self.add(Route::Failover {
            children,
            errors,
            limit,
            policy,
        }))
    }

    pub(super) fn failover_settings(
        &mut self,
        map: &'a Object,
        children: usize,
    ) -> Result<(FailoverErrors, Option<FailoverLimit>, FailoverPolicy)> {
        let errors = match map.get("failover_errors") {
            None => default_errors(),
            Some(v) => self.key("failover_errors", |b| b.failover_errors(v))?,
        };
        let limit = match map.get("failover_limit") {
            None => None,
            Some(v) => Some(self.key("failover_limit", |b| b.failover_limit(v))?),
        };
        let policy = match map.get("failover_policy") {
            None => FailoverPolicy::InOrder,
            Some(v) => self.key("failover_policy", |b| b.failover_policy(v, map, children))?,
        };
        Ok((errors, limit, policy))
    }

    /// `failover_policy`, whose `hash` may also be the route's own.
    fn failover_policy(
        &mut self,
        v: &'a Value,
        route: &'a Object,
        children: usize,
    ) -> Result<FailoverPolicy> {
        let Value::Object(map) = v else {
            return self.fail(format!(
                "failover_policy must be an object with a 'type', not {}",
                kind(v)
            ));
        };
        let ty = match map.get("type") {
            Some(Value::String(ty)) => ty.as_str(),
            Some(other) => {
                let msg = format!("failover_policy type must be a string, not {}", kind(other));
                return self.key("type", |b| b.fail(msg));
            }
            None => return self.fail("failover_policy has no 'type'"),
        };
        match ty {
            "DeterministicOrderPolicy" | "LeastFailuresPolicy" => {}
            "RendezvousPolicy" => return self.rendezvous_policy(map, route, children),
            // mcrouter falls back to its in-order default, silently and ignoring the rest.
            _ => return Ok(FailoverPolicy::InOrder),
        }
        let n = children.max(1) as i64;
        let required = |b: &mut Self, key: &str| -> Result<i64> {
            match map.get(key) {
                Some(_) => b.int_field(map, key, 1, 1, i64::from(u32::MAX)),
                None => b.fail(format!("{ty} needs '{key}'")),
            }
        };
        let mut max_tries = required(self, "max_tries")?;
        if max_tries > n {
            self.key("max_tries", |b| {
                b.warn(format!(
                    "max_tries {max_tries} is more than the {n} children: {n} (as mcrouter)"
                ));
                Ok(())
            })?;
            max_tries = n;
        }
        if ty == "LeastFailuresPolicy" {
            return Ok(FailoverPolicy::LeastFailures {
                max_tries: max_tries as usize,
            });
        }
        let mut max_error_tries = required(self, "max_error_tries")?;
        if max_error_tries > max_tries {
            self.key("max_error_tries", |b| {
                b.warn(format!(
                    "max_error_tries {max_error_tries} is more than max_tries: {max_tries} \
                     (as mcrouter)"
                ));
                Ok(())
            })?;
            max_error_tries = max_tries;
        }
        let ignore_normal_reply_index = self.bool_field(map, "ignore_normal_reply_index", false)?;
        for unread in ["exclude_errors", "enable_failure_domains"] {
            if map.contains_key(unread) {
                self.key(unread, |b| {
                    b.warn(format!("{unread} is not read yet (ignored)"));
                    Ok(())
                })?;
            }
        }
        let hash = match (map.get("hash"), route.get("hash")) {
            (Some(h), _) => self.key("hash", |b| b.policy_hash(h, children))?,
            // mcrouter also reads the route's own `hash` for the policy.
            (None, Some(h)) => self.policy_hash(h, children)?,
            (None, None) => PoolHash::Ch3,
        };
        Ok(FailoverPolicy::DeterministicOrder {
            max_tries: max_tries as usize,
            max_error_tries: max_error_tries as usize,
            hash,
            ignore_normal_reply_index,
        })
    }

    /// DeterministicOrderPolicy's `hash`: `{"hash_func": "Ch3" | "WeightedCh3", "weights": [...]}`.
    fn policy_hash(&mut self, v: &Value, children: usize) -> Result<PoolHash> {
        let Value::Object(map) = v else {
            return self.fail(format!(
                "hash must be an object with 'hash_func' (and 'weights'), not {}",
                kind(v)
            ));
        };
        let func = match map.get("hash_func") {
            None => "Ch3",
            Some(Value::String(f)) if f == "Ch3" || f == "WeightedCh3" => f.as_str(),
            Some(other) => {
                let msg =
                    format!("DeterministicOrderPolicy hashes with Ch3 or WeightedCh3, not {other}");
                return self.key("hash_func", |b| b.fail(msg));
            }
        };
        let hash = self.hash_function(func, Some(map), None, children)?;
        self.check_hash(&hash, children)?;
        Ok(hash)
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

pub(super) fn default_errors() -> FailoverErrors {
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
