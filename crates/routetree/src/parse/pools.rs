//! Pools: looked up by name in `pools` or defined inline, with `inherit` resolved and
//! servers, weights and protocol checked. `Pool|A` is the list of A's servers.

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use super::server::parse_server;
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    /// `"Pool|A"` or `{"type": "Pool", ...}`: the pool's servers as a list of targets.
    pub(super) fn pool_servers(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let pool = match args {
            Args::None => return self.fail("Pool needs a pool name"),
            Args::Str(name) => self.pool_by_name(name)?,
            // {"type": "Pool", "name": ..., "servers": [...]} is itself an inline pool.
            Args::Object(map) => self.inline_pool(map)?,
        };
        let n = self.pools[pool].servers.len();
        Ok((0..n).map(|index| Target::Server { pool, index }).collect())
    }

    /// A pool given by name (a string) or inline (an object with `name` and `servers`).
    pub(super) fn pool(&mut self, v: &'a Value) -> Result<PoolId> {
        match v {
            Value::String(name) => self.pool_by_name(name),
            Value::Object(map) => self.inline_pool(map),
            other => self.fail(format!(
                "pool must be a name or an object, not {}",
                kind(other)
            )),
        }
    }

    /// A pool defined where it is used; a pool already known by its name wins (as mcrouter).
    pub(super) fn inline_pool(&mut self, map: &Object) -> Result<PoolId> {
        let Some(Value::String(name)) = map.get("name") else {
            return self.fail("an inline pool needs a string 'name'");
        };
        if let Some(&id) = self.pool_ids.get(name.as_str()) {
            return Ok(id);
        }
        if self.pools_json.is_some_and(|p| p.contains_key(name)) {
            return self.pool_by_name(name);
        }
        let mut visiting = vec![name.clone()];
        let merged = self.inherited(map, &mut visiting)?;
        self.define_pool(name, &merged)
    }

    /// `map` with the keys it lacks taken from the pool it `inherit`s (transitively).
    pub(super) fn inherited(&mut self, map: &Object, visiting: &mut Vec<String>) -> Result<Object> {
        let mut merged = map.clone();
        let Some(parent) = merged.remove("inherit") else {
            return Ok(merged);
        };
        let Value::String(parent) = parent else {
            return self.key("inherit", |b| b.fail("inherit must be a pool name"));
        };
        if visiting.contains(&parent) {
            visiting.push(parent);
            let chain = visiting.join(" -> ");
            return self.key("inherit", |b| {
                b.fail(format!("pool inheritance cycle: {chain}"))
            });
        }
        let Some(Value::Object(parent_map)) = self.pools_json.and_then(|p| p.get(&parent)) else {
            let msg = format!("inherited pool '{parent}' is not defined");
            return self.key("inherit", |b| b.fail(msg));
        };
        visiting.push(parent);
        let parent_merged = self.inherited(parent_map, visiting)?;
        for (k, v) in parent_merged {
            merged.entry(k).or_insert(v);
        }
        Ok(merged)
    }

    pub(super) fn pool_by_name(&mut self, name: &str) -> Result<PoolId> {
        if let Some(&id) = self.pool_ids.get(name) {
            return Ok(id);
        }
        let def = self.pools_json.and_then(|pools| pools.get_key_value(name));
        let Some((key, def)) = def else {
            let known: Vec<&str> = self
                .pools_json
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return self.fail(format!(
                "pool '{name}' is not defined (pools: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        let here = std::mem::replace(
            &mut self.path,
            vec![Seg::Key("pools".into()), Seg::Key(key.clone())],
        );
        let result = match def {
            Value::Object(map) => {
                let mut visiting = vec![key.clone()];
                self.inherited(map, &mut visiting)
                    .and_then(|merged| self.define_pool(key, &merged))
            }
            other => self.fail(format!("a pool must be an object, not {}", kind(other))),
        };
        self.path = here;
        result
    }

    pub(super) fn define_pool(&mut self, name: &str, map: &Object) -> Result<PoolId> {
        if let Some(protocol) = map.get("protocol") {
            if protocol.as_str() != Some("ascii") {
                let msg = format!("protocol {protocol} is not spoken by memfleet (ascii only)");
                return self.key("protocol", |b| b.fail(msg));
            }
        }
        let Some(servers) = map.get("servers") else {
            return self.fail(format!("pool '{name}' has no 'servers'"));
        };
        let mut servers = self.key("servers", |b| {
            let Value::Array(items) = servers else {
                return b.fail("servers must be an array of \"host:port\" strings");
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(b.at(Seg::Index(i), |b| match item {
                    Value::String(s) => match parse_server(s) {
                        Ok(server) => Ok(server),
                        Err(bad) => b.fail(bad.to_string()),
                    },
                    Value::Object(_) => b.fail("route handles as servers are not supported yet"),
                    other => b.fail(format!(
                        "a server must be \"host:port\", not {}",
                        kind(other)
                    )),
                })?);
            }
            Ok(out)
        })?;
        for (i, server) in servers.iter().enumerate() {
            if let Some(p) = server.protocol.as_deref().filter(|p| *p != "ascii") {
                let msg = format!("protocol '{p}' is not spoken by memfleet (ascii only)");
                self.key("servers", |b| b.at(Seg::Index(i), |b| b.fail::<()>(msg)))?;
            }
        }
        self.pool_access(map, &mut servers)?;
        // mcrouter uses pool weights only when there is one per server.
        let weights = match map.get("weights") {
            Some(w) => {
                let all = w.as_array().map_or(0, Vec::len);
                let list = self.key("weights", |b| b.weights(w, all))?;
                if list.len() == servers.len() {
                    Some(list)
                } else {
                    self.key("weights", |b| {
                        b.warn("pool weights are ignored: not one per server (as mcrouter)");
                        Ok(())
                    })?;
                    None
                }
            }
            None => None,
        };
        let keep_routing_prefix = self.bool_field(map, "keep_routing_prefix", false)?;
        let tags = self.pool_tags(map)?;
        let error_on_empty = self.bool_field(map, "error_on_empty", true)?;
        let region = self.place_field(map, "region");
        let cluster = self.place_field(map, "cluster");
        // mcrouter's parseTimeout: 1 ms to 1000 s.
        let server_timeout_ms = match map.get("server_timeout") {
            Some(_) => Some(self.int_field(map, "server_timeout", 0, 1, 1_000_000)? as u64),
            None => None,
        };
        self.pools.push(Pool {
            name: name.to_owned(),
            servers,
            weights,
            tags,
            keep_routing_prefix,
            max_outstanding: 0,
            error_on_empty,
            region,
            cluster,
            server_timeout_ms,
        });
        let id = self.pools.len() - 1;
        self.pool_ids.insert(name.to_owned(), id);
        Ok(id)
    }

    /// A pool's `region` or `cluster`: mcrouter logs one that is not a string and goes on
    /// without it, so memfleet warns.
    fn place_field(&mut self, map: &Object, key: &str) -> Option<String> {
        match map.get(key)? {
            Value::String(s) => Some(s.clone()),
            other => {
                let msg = format!("{key} is not a string ({}): not read", kind(other));
                let _ = self.key(key, |b| {
                    b.warn(msg);
                    Ok(())
                });
                None
            }
        }
    }

    /// mcrouter's pool-wide access settings: `security_mech` (else the older `use_ssl`) for
    /// the servers whose entry names none, `port_override` for every server, and the
    /// `*_within_dc` / `*_cross_dc` pairs. An equal pair stands for both halves (a security
    /// pair then overrides the entries too). Otherwise which half a server gets depends on
    /// whether it is in the local data center, which open-source mcrouter answers "no" for
    /// every server (its `isInLocalDatacenter` is a stub): the `_cross_dc` half, when given,
    /// overrides every server and the `_within_dc` half is never used. memfleet does the same
    /// and warns about the unused half.
    fn pool_access(&mut self, map: &Object, servers: &mut [Server]) -> Result<()> {
        let within = self.string_field(map, "security_mech_within_dc")?;
        let cross = self.string_field(map, "security_mech_cross_dc")?;
        let (forced, default) = match (&within, &cross) {
            (Some(w), Some(c)) if w == c => (Some(w.clone()), None),
            _ => {
                let default = match self.string_field(map, "security_mech")? {
                    Some(mech) => Some(mech),
                    None => self
                        .bool_field(map, "use_ssl", false)?
                        .then(|| "ssl".into()),
                };
                if within.is_some() {
                    self.within_dc_unused("security_mech_within_dc");
                }
                (cross, default)
            }
        };
        let within = self.int_field(map, "port_override_within_dc", 0, 1, 65535)?;
        let cross = self.int_field(map, "port_override_cross_dc", 0, 1, 65535)?;
        let port = match (within, cross) {
            (w, c) if w != 0 && w == c => w,
            _ => {
                if within != 0 {
                    self.within_dc_unused("port_override_within_dc");
                }
                let port = self.int_field(map, "port_override", 0, 1, 65535)?;
                if cross != 0 {
                    cross
                } else {
                    port
                }
            }
        };
        for s in servers {
            if forced.is_some() || s.security.is_none() {
                s.security = forced.clone().or_else(|| default.clone());
            }
            if port != 0 {
                s.port = port as u16;
            }
        }
        Ok(())
    }

    fn within_dc_unused(&mut self, key: &str) {
        let msg = format!("{key} is not used: {WITHIN_DC}");
        let _ = self.key(key, |b| {
            b.warn(msg);
            Ok(())
        });
    }
}

const WITHIN_DC: &str = "as in open-source mcrouter, no server counts as in the local data \
     center (its isInLocalDatacenter says no for every host), so the _cross_dc half (or \
     security_mech / port_override) applies to all of them";
