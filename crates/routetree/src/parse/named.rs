//! Named route handles: defined in `named_handles` or inline with a `name`, built once on
//! first use and shared, with a reference cycle refused by its chain of names.

use serde_json::Value;

use super::builder::Named;
use super::builder::{Builder, Object, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    pub(super) fn named_handles(&mut self, v: &'a Value) -> Result<()> {
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.at(Seg::Index(i), |b| b.list(item).map(drop))?;
                }
                Ok(())
            }
            Value::Object(map) => {
                for (name, def) in map {
                    self.key(name, |b| {
                        if let Value::Object(obj) = def {
                            if let Some(inner) = obj.get("name") {
                                if inner.as_str() != Some(name) {
                                    return b.fail(format!(
                                        "named handle '{name}' has a different 'name' inside"
                                    ));
                                }
                            }
                        }
                        let mut path = b.path.clone();
                        path.shrink_to_fit();
                        b.named.insert(name.clone(), Named::Pending(def, path));
                        Ok(())
                    })?;
                }
                Ok(())
            }
            other => self.fail(format!(
                "named_handles must be an array or object, not {}",
                kind(other)
            )),
        }
    }

    pub(super) fn cycle<T>(&self, name: &str) -> Result<T> {
        let start = self.building.iter().position(|n| n == name).unwrap_or(0);
        let mut chain: Vec<&str> = self.building[start..].iter().map(String::as_str).collect();
        chain.push(name);
        self.fail(format!("route cycle: {}", chain.join(" -> ")))
    }

    /// A reference to a named handle by its name.
    pub(super) fn resolve_named(&mut self, name: &str) -> Result<Vec<Target>> {
        let state = self.named.insert(name.to_owned(), Named::Building);
        match state {
            Some(Named::Done(targets)) => {
                self.named
                    .insert(name.to_owned(), Named::Done(targets.clone()));
                Ok(targets)
            }
            Some(Named::Building) => self.cycle(name),
            Some(Named::Pending(def, path)) => self.build_named(name, |b| {
                let here = std::mem::replace(&mut b.path, path);
                let built = match def {
                    Value::Object(map) => b.object_handle(map),
                    other => b.list(other),
                };
                b.path = here;
                built
            }),
            None => {
                self.named.remove(name);
                self.fail(format!("no route handle named '{name}'"))
            }
        }
    }

    /// An object with a `name`: defined here unless already known by that name.
    pub(super) fn named_inline(&mut self, name: &str, map: &'a Object) -> Result<Vec<Target>> {
        if self.named.contains_key(name) {
            return self.resolve_named(name);
        }
        self.build_named(name, |b| b.object_handle(map))
    }

    /// Builds the handle `name` with `build`, marked as being built meanwhile (so a reference
    /// back to it is a cycle) and kept once built (so later references share it).
    fn build_named(
        &mut self,
        name: &str,
        build: impl FnOnce(&mut Self) -> Result<Vec<Target>>,
    ) -> Result<Vec<Target>> {
        self.named.insert(name.to_owned(), Named::Building);
        self.building.push(name.to_owned());
        let built = build(self);
        self.building.pop();
        let targets = built?;
        self.named
            .insert(name.to_owned(), Named::Done(targets.clone()));
        Ok(targets)
    }
}
