//! LoadBalancerRoute, and the `hash_func: "LoadBalancer"` of HashRoute and PoolRoute, which
//! mcrouter turns into one. As in mcrouter, no child is NullRoute (an empty HashRoute stays
//! an error), one child is that child, and the settings are read only with two or more.

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn load_balancer_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let Args::Object(map) = args else {
            return self.fail("LoadBalancerRoute is not an object");
        };
        let children = match map.get("children") {
            Some(children) => self.key("children", |b| b.list(children))?,
            None => return self.fail("LoadBalancerRoute: 'children' property is missing"),
        };
        match children.len() {
            0 => Ok(self.add(Route::Null)),
            1 => Ok(children),
            _ => self.load_balancer(children, map, None, Vec::new()),
        }
    }

    /// A LoadBalancerRoute over `children` (two or more) with the settings in `map`; a
    /// PoolRoute passes its asynclog name and shadows.
    pub(super) fn load_balancer(
        &mut self,
        children: Vec<Target>,
        map: &Object,
        asynclog: Option<String>,
        shadows: Vec<Shadow>,
    ) -> Result<Vec<Target>> {
        let salt = match map.get("salt") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return self.lb_fail("salt", "salt is not a string"),
        };
        if map.get("load_ttl_ms").is_some_and(|v| !is_int(v)) {
            return self.lb_fail("load_ttl_ms", "load_ttl_ms is not an integer");
        }
        let failover_count = match map.get("failover_count") {
            None => 1,
            // mcrouter keeps it unsigned: a negative count wraps to "every child".
            Some(v) if is_int(v) => match v.as_i64() {
                Some(c) if c >= 0 => c as usize,
                _ => usize::MAX,
            },
            Some(_) => return self.lb_fail("failover_count", "failover_count is not an integer"),
        };
        let algorithm = match map.get("algorithm") {
            None => LoadBalancerAlgorithm::WeightedHashing,
            Some(Value::String(a)) if a == "weighted-hashing" => {
                LoadBalancerAlgorithm::WeightedHashing
            }
            Some(Value::String(a)) if a == "two-random-choices" => {
                LoadBalancerAlgorithm::TwoRandomChoices
            }
            Some(Value::String(a)) => {
                let msg = format!("Unknown algorithm: {a}");
                return self.key("algorithm", |b| b.fail(msg));
            }
            Some(_) => return self.lb_fail("algorithm", "algorithm is not a string"),
        };
        if let Some(v) = map.get("enable_thrift_server_load") {
            if !v.is_boolean() {
                let what = format!("enable_thrift_server_load is not a bool ({})", kind(v));
                return self.lb_fail("enable_thrift_server_load", &what);
            }
        }
        let failover_count = failover_count.clamp(1, children.len());
        Ok(self.add(Route::LoadBalancer(LoadBalancer {
            children,
            salt,
            failover_count,
            algorithm,
            asynclog,
            shadows,
        })))
    }

    fn lb_fail<T>(&mut self, key: &str, what: &str) -> Result<T> {
        let msg = format!("LoadBalancerRoute: {what}");
        self.key(key, |b| b.fail(msg))
    }
}

/// An integer as mcrouter's JSON reader has one (not `2.0`, nor past the 64-bit range).
fn is_int(v: &Value) -> bool {
    v.as_i64().is_some()
}
