//! The top-level object: pools, named handles, and the entry point (one `route`, or `routes`
//! keyed by routing prefix `/region/cluster/`).

use ring::PoolHash;
use serde_json::Value;

use super::builder::{Builder, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn config(&mut self, json: &'a Value) -> Result<Entry> {
        let Value::Object(top) = json else {
            return self.fail(format!("the config must be an object, not {}", kind(json)));
        };
        if let Some(pools) = top.get("pools") {
            match pools {
                Value::Object(map) => self.pools_json = Some(map),
                other => {
                    let msg = format!("pools must be an object, not {}", kind(other));
                    return self.key("pools", |b| b.fail(msg));
                }
            }
        }
        if let Some(named) = top.get("named_handles") {
            self.key("named_handles", |b| b.named_handles(named))?;
        }
        match (top.get("route"), top.get("routes")) {
            (Some(_), Some(_)) => self.fail("both 'route' and 'routes' are given; use one"),
            (None, None) => self.fail("no 'route' or 'routes' in the config"),
            (Some(route), None) => {
                let target = self.key("route", |b| b.one(route))?;
                Ok(Entry::Default(self.as_route(target)))
            }
            (None, Some(routes)) => self.key("routes", |b| b.routes(routes)),
        }
    }

    /// A target as a route id, wrapping a bare server in a one-server pool route.
    pub(super) fn as_route(&mut self, target: Target) -> RouteId {
        match target {
            Target::Route(id) => id,
            Target::Server { .. } => {
                self.routes.push(Route::Hash {
                    children: vec![target],
                    hash: PoolHash::Ch3,
                    salt: String::new(),
                    by_bucket: false,
                });
                self.routes.len() - 1
            }
        }
    }

    pub(super) fn routes(&mut self, routes: &'a Value) -> Result<Entry> {
        let mut table = Vec::new();
        match routes {
            Value::Array(policies) => {
                for (i, policy) in policies.iter().enumerate() {
                    self.at(Seg::Index(i), |b| {
                        let Value::Object(policy) = policy else {
                            return b.fail("each routes entry must be an object");
                        };
                        let Some(route) = policy.get("route") else {
                            return b.fail("routes entry has no 'route'");
                        };
                        let Some(aliases) = policy.get("aliases") else {
                            return b.fail("routes entry has no 'aliases'");
                        };
                        let target = b.key("route", |b| b.one(route))?;
                        let id = b.as_route(target);
                        b.key("aliases", |b| {
                            let Value::Array(aliases) = aliases else {
                                return b.fail("aliases must be an array of routing prefixes");
                            };
                            for (j, alias) in aliases.iter().enumerate() {
                                let alias = b.at(Seg::Index(j), |b| b.alias(alias))?;
                                table.push((alias, id));
                            }
                            Ok(())
                        })
                    })?;
                }
            }
            Value::Object(map) => {
                for (alias, route) in map {
                    self.key(alias, |b| {
                        let prefix = b.alias(&Value::String(alias.clone()))?;
                        let target = b.one(route)?;
                        let id = b.as_route(target);
                        table.push((prefix, id));
                        Ok(())
                    })?;
                }
            }
            other => {
                return self.fail(format!(
                    "routes must be an array or object, not {}",
                    kind(other)
                ))
            }
        }
        if table.is_empty() {
            return self.fail("routes defines no routing prefix");
        }
        Ok(Entry::Aliases(table))
    }

    /// A routing prefix: `/region/cluster/`.
    pub(super) fn alias(&mut self, v: &Value) -> Result<String> {
        let Value::String(s) = v else {
            return self.fail("a routing prefix must be a string");
        };
        let parts: Vec<&str> = s.split('/').collect();
        let well_formed = parts.len() == 4
            && parts[0].is_empty()
            && parts[3].is_empty()
            && !parts[1].is_empty()
            && !parts[2].is_empty();
        if !well_formed {
            return self.fail(format!(
                "routing prefix '{s}' is not of the form /region/cluster/"
            ));
        }
        Ok(s.clone())
    }
}
