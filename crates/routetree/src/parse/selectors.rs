//! Routes that pick a child by the request: PrefixSelectorRoute (key prefix) and
//! OperationSelectorRoute (request type).

use serde_json::Value;

use super::builder::{Args, Builder, Result};
use crate::model::*;

/// Names mcrouter gives request types in `operation_policies`.
pub const OPERATIONS: &[&str] = &[
    "get",
    "gets",
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "incr",
    "decr",
    "touch",
    "gat",
    "gats",
    "metaget",
    "lease-get",
    "lease-set",
    "flushall",
    "flushre",
    "version",
    "stats",
];

impl<'a> Builder<'a> {
    pub(super) fn prefix_selector(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "PrefixSelectorRoute";
        let map = self.object(ty, args)?;
        let mut policies = Vec::new();
        if let Some(v) = map.get("policies") {
            self.key("policies", |b| {
                let Value::Object(p) = v else {
                    return b.fail("policies must be an object of key prefix -> route");
                };
                for (prefix, route) in p {
                    let target = b.key(prefix, |b| b.one(route))?;
                    policies.push((prefix.clone(), target));
                }
                Ok(())
            })?;
        }
        let wildcard = match map.get("wildcard") {
            Some(v) => Some(self.key("wildcard", |b| b.one(v))?),
            None => None,
        };
        if policies.is_empty() && wildcard.is_none() {
            return self.fail("PrefixSelectorRoute needs 'policies' or 'wildcard'");
        }
        policies.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(self.add(Route::PrefixSelector { policies, wildcard }))
    }

    pub(super) fn operation_selector(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let map = match args {
            // Not an object: the argument is the route for every operation.
            Args::Str(s) => return self.string_handle(s),
            Args::None => return self.fail("OperationSelectorRoute needs policies"),
            Args::Object(map) => map,
        };
        let default = match map.get("default_policy") {
            Some(v) => Some(self.key("default_policy", |b| b.one(v))?),
            None => None,
        };
        let mut policies = Vec::new();
        if let Some(v) = map.get("operation_policies") {
            self.key("operation_policies", |b| {
                let Value::Object(p) = v else {
                    return b.fail("operation_policies must be an object of operation -> route");
                };
                for (op, route) in p {
                    b.key(op, |b| {
                        if !OPERATIONS.contains(&op.as_str()) {
                            return b.fail(format!(
                                "unknown operation '{op}' (one of: {})",
                                OPERATIONS.join(", ")
                            ));
                        }
                        let target = b.one(route)?;
                        policies.push((op.clone(), target));
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
        } else if default.is_none() {
            return self
                .fail("OperationSelectorRoute needs 'default_policy' or 'operation_policies'");
        }
        policies.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(self.add(Route::OperationSelector { policies, default }))
    }
}
