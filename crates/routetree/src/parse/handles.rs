//! Route handles in general: lists, objects, strings, and the dispatch from a handle's type
//! to its reader, plus the small handles that need no module of their own.

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

/// Route handle types refused for good, each with the reason: they only make sense inside
/// Facebook (or a program embedding mcrouter), or mcrouter makes them from an option.
const REFUSED_TYPES: &[(&str, &str)] = &[
    (
        "SRRoute",
        "routes through Facebook's service router, which exists only inside Facebook \
         (open-source mcrouter refuses it too)",
    ),
    (
        "OriginalClientHashRoute",
        "hashes on the original client's address, which only Facebook's internal \
         transport carries from hop to hop",
    ),
    (
        "LoggingRoute",
        "hands each hit to a callback of a program that embeds mcrouter as a library",
    ),
    (
        "AsynclogRoute",
        "is not a config type in mcrouter either: a PoolRoute's \"asynclog\" makes it \
         (memfleet supports that option)",
    ),
    (
        "SlowWarmUpRoute",
        "is not a config type in mcrouter either: a PoolRoute's \"slow_warmup\" makes it \
         (memfleet supports that option)",
    ),
    (
        "OutstandingLimitRoute",
        "is not a config type in mcrouter either: a PoolRoute's \"max_outstanding\" makes it \
         (memfleet supports that option)",
    ),
    (
        "ShardSplitRoute",
        "is not a config type in mcrouter either: a PoolRoute's \"shard_splits\" makes it \
         (memfleet supports that option)",
    ),
];

fn refused_why(ty: &str) -> Option<&'static str> {
    REFUSED_TYPES
        .iter()
        .find(|(t, _)| *t == ty)
        .map(|(_, why)| *why)
}

impl<'a> Builder<'a> {
    /// Exactly one handle (a list of one).
    pub(super) fn one(&mut self, v: &'a Value) -> Result<Target> {
        let list = self.list(v)?;
        match list.as_slice() {
            [one] => Ok(*one),
            _ => self.fail(format!("expected one route handle, got {}", list.len())),
        }
    }

    pub(super) fn list(&mut self, v: &'a Value) -> Result<Vec<Target>> {
        match v {
            Value::Array(items) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    out.extend(self.at(Seg::Index(i), |b| b.list(item))?);
                }
                Ok(out)
            }
            Value::Object(map) => match map.get("name") {
                Some(Value::String(name)) => self.named_inline(name, map),
                _ => self.object_handle(map),
            },
            Value::String(s) => self.string_handle(s),
            other => self.fail(format!(
                "a route handle must be an object, array or string, not {}",
                kind(other)
            )),
        }
    }

    /// A handle given as an object with a `type`.
    pub(super) fn object_handle(&mut self, map: &'a Object) -> Result<Vec<Target>> {
        let ty = self.type_of(map)?;
        self.typed(ty, Args::Object(map))
    }

    pub(super) fn type_of(&mut self, map: &'a Object) -> Result<&'a str> {
        match map.get("type") {
            Some(Value::String(ty)) => Ok(ty),
            Some(_) => self.key("type", |b| b.fail("type must be a string")),
            None => self.fail("route handle object has no 'type'"),
        }
    }

    pub(super) fn string_handle(&mut self, s: &'a str) -> Result<Vec<Target>> {
        if s.is_empty() {
            return Ok(Vec::new());
        }
        if self.named.contains_key(s) {
            return self.resolve_named(s);
        }
        match s.split_once('|') {
            Some((ty, arg)) => self.typed(ty, Args::Str(arg)),
            None => self.typed(s, Args::None),
        }
    }

    /// Children given after `|` or as an object's `children`.
    pub(super) fn children(&mut self, ty: &str, args: Args<'a>) -> Result<Vec<Target>> {
        match args {
            Args::None => self.fail(format!("{ty} needs children")),
            Args::Str(s) => self.string_handle(s),
            Args::Object(map) => match map.get("children") {
                Some(children) => self.key("children", |b| b.list(children)),
                None => self.fail(format!("{ty} has no 'children'")),
            },
        }
    }

    pub(super) fn object(&mut self, ty: &str, args: Args<'a>) -> Result<&'a Object> {
        match args {
            Args::Object(map) => Ok(map),
            _ => self.fail(format!("{ty} must be an object")),
        }
    }

    /// A required sub-handle of an object.
    pub(super) fn field_one(&mut self, ty: &str, map: &'a Object, key: &str) -> Result<Target> {
        match map.get(key) {
            Some(v) => self.key(key, |b| b.one(v)),
            None => self.fail(format!("{ty} has no '{key}'")),
        }
    }

    pub(super) fn typed(&mut self, ty: &'a str, args: Args<'a>) -> Result<Vec<Target>> {
        match ty {
            "Pool" => self.pool_servers(args),
            "PoolRoute" => self.pool_route(args),
            "HashRoute" => self.hash_route(args),
            "AllSyncRoute" => self.all(ty, AllMode::Sync, args),
            "AllAsyncRoute" => self.all(ty, AllMode::Async, args),
            "AllInitialRoute" => self.all(ty, AllMode::Initial, args),
            "AllMajorityRoute" => self.all(ty, AllMode::Majority, args),
            "AllFastestRoute" => self.all(ty, AllMode::Fastest, args),
            "FailoverRoute" => self.failover_route(args),
            "FailoverWithExptimeRoute" => self.failover_with_exptime(args),
            "MissFailoverRoute" => {
                let children = self.children(ty, args)?;
                let return_best_on_error = match args {
                    Args::Object(map) => self.bool_field(map, "return_best_on_error", false)?,
                    _ => false,
                };
                Ok(self.add(Route::MissFailover {
                    children,
                    return_best_on_error,
                }))
            }
            "WarmUpRoute" => {
                let map = self.object(ty, args)?;
                let cold = self.field_one(ty, map, "cold")?;
                let warm = self.field_one(ty, map, "warm")?;
                let exptime = self.int_field(map, "exptime", 0, 0, i64::from(u32::MAX))? as u32;
                Ok(self.add(Route::WarmUp {
                    cold,
                    warm,
                    exptime,
                }))
            }
            "KeySplitRoute" => self.key_split_route(args),
            "BigValueRoute" => self.big_value_route(args),
            "MigrateRoute" => self.migrate_route(args),
            "StagingRoute" => self.staging_route(args),
            "ShadowRoute" => self.shadow_route(args),
            "L1L2CacheRoute" => self.l1l2_cache_route(args),
            "L1L2SizeSplitRoute" => self.l1l2_size_split_route(args),
            "RateLimitRoute" => self.rate_limit_route(args),
            "RandomRoute" => self.random_route(args),
            "HostIdRoute" => self.host_id_route(args),
            "LatestRoute" => self.latest_route(args),
            // Only one without a usable `pool` is left after the rewrite (salted.rs).
            super::salted::TYPE => self
                .fail("SaltedFailoverRoute needs a 'pool': a pool's name or an inline pool object"),
            "LoadBalancerRoute" => self.load_balancer_route(args),
            "ModifyKeyRoute" => self.modify_key_route(args),
            "LatencyInjectionRoute" => self.latency_injection_route(args),
            "PrefixSelectorRoute" => self.prefix_selector(args),
            "OperationSelectorRoute" => self.operation_selector(args),
            "ModifyExptimeRoute" => {
                let map = self.object(ty, args)?;
                let target = self.field_one(ty, map, "target")?;
                if !map.contains_key("exptime") {
                    return self.fail("ModifyExptimeRoute has no 'exptime'");
                }
                let exptime =
                    self.int_field(map, "exptime", 0, i64::from(i32::MIN), i64::from(i32::MAX))?;
                let action = match map.get("action") {
                    None => ExptimeAction::Set,
                    Some(Value::String(a)) if a == "set" => ExptimeAction::Set,
                    Some(Value::String(a)) if a == "min" => ExptimeAction::Min,
                    Some(_) => {
                        return self.key("action", |b| b.fail("action must be 'set' or 'min'"));
                    }
                };
                if action == ExptimeAction::Min && exptime == 0 {
                    return self.key("exptime", |b| {
                        b.fail("action 'min' needs a non-zero exptime")
                    });
                }
                Ok(self.add(Route::ModifyExptime {
                    target,
                    exptime,
                    action,
                }))
            }
            // DevNullRoute differs from NullRoute only in mcrouter's stats.
            "NullRoute" | "DevNullRoute" => Ok(self.add(Route::Null)),
            "ErrorRoute" => {
                let message = match args {
                    Args::None => String::new(),
                    Args::Str(s) => s.to_owned(),
                    Args::Object(map) => match map.get("response") {
                        None => String::new(),
                        Some(Value::String(s)) => s.clone(),
                        Some(_) => {
                            return self.key("response", |b| b.fail("response must be a string"));
                        }
                    },
                };
                Ok(self.add(Route::Error { message }))
            }
            _ if refused_why(ty).is_some() => {
                let why = refused_why(ty).unwrap_or_default();
                self.fail(format!("route handle type '{ty}' {why}"))
            }
            _ if matches!(args, Args::None) => self.fail(format!(
                "'{ty}' is neither a route handle type nor a named handle"
            )),
            _ => self.fail(format!("unknown route handle type '{ty}'")),
        }
    }

    pub(super) fn all(&mut self, ty: &str, mode: AllMode, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.children(ty, args)?;
        Ok(self.add(Route::All { mode, children }))
    }
}
