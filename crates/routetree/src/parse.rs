//! mcrouter JSON config -> [`Config`], with every refusal located in the file.
//!
//! Route handles are read the way mcrouter's factory reads them: an array is a list whose
//! inner lists are flattened; an object with a string `name` is a named handle (built once,
//! then shared); an object with `type` is a handle; a string is a named handle, `Type|arg`
//! (`PoolRoute|A`, `Pool|A`, `ErrorRoute|msg`) or a bare type (`NullRoute`); `""` is an
//! empty list. `Pool|A` is the list of A's servers.

use std::collections::HashMap;

use ring::PoolHash;
use serde_json::{Map, Value};

use crate::error::{ConfigError, Path, Seg};
use crate::model::*;
use crate::source::Source;

type Result<T> = std::result::Result<T, ConfigError>;
type Object = Map<String, Value>;

/// Parses and validates `text`, reporting errors against `file`.
pub fn parse_config(file: &str, text: &str) -> Result<Config> {
    let source = Source::new(file, text)?;
    let json = source.parse()?;
    let mut b = Builder {
        src: &source,
        pools_json: None,
        pools: Vec::new(),
        pool_ids: HashMap::new(),
        routes: Vec::new(),
        named: HashMap::new(),
        building: Vec::new(),
        path: Vec::new(),
        warnings: Vec::new(),
    };
    let entry = b.config(&json)?;
    Ok(Config {
        pools: b.pools,
        routes: b.routes,
        entry,
        warnings: b.warnings,
    })
}

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

/// Hash functions mcrouter has that memfleet does not implement.
const UNSUPPORTED_HASHES: &[&str] = &[
    "ConstShard",
    "Latest",
    "Random",
    "Rendezvous",
    "WeightedRendezvous",
    "WeightedCh3Rv",
];

/// Route handle types mcrouter has that memfleet does not implement yet.
const UNSUPPORTED_TYPES: &[&str] = &[
    "AsynclogRoute",
    "BigValueRoute",
    "HostIdRoute",
    "L1L2CacheRoute",
    "LatencyInjectionRoute",
    "LatestRoute",
    "LoggingRoute",
    "MigrateRoute",
    "OriginalClientHashRoute",
    "OutstandingLimitRoute",
    "RandomRoute",
    "RateLimitRoute",
    "SaltedFailoverRoute",
    "ShadowRoute",
    "SlowWarmUpRoute",
    "SRRoute",
];

enum Named<'a> {
    Pending(&'a Value, Vec<Seg>),
    Building,
    Done(Vec<Target>),
}

/// What follows the type of a handle: nothing (`"NullRoute"`), the text after `|`, or the
/// handle's object.
#[derive(Clone, Copy)]
enum Args<'a> {
    None,
    Str(&'a str),
    Object(&'a Object),
}

struct Builder<'a> {
    src: &'a Source,
    pools_json: Option<&'a Object>,
    pools: Vec<Pool>,
    pool_ids: HashMap<String, PoolId>,
    routes: Vec<Route>,
    named: HashMap<String, Named<'a>>,
    /// Named handles being built, outermost first (to name a cycle).
    building: Vec<String>,
    path: Vec<Seg>,
    warnings: Vec<String>,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Builder<'a> {
    fn fail<T>(&self, message: impl Into<String>) -> Result<T> {
        let path = Path(self.path.clone());
        let (line, column) = self.src.locate(&path).unwrap_or((0, 0));
        Err(ConfigError {
            file: self.src.name.clone(),
            line,
            column,
            path,
            message: message.into(),
        })
    }

    fn warn(&mut self, message: impl Into<String>) {
        let path = Path(self.path.clone());
        let at = match self.src.locate(&path) {
            Some((line, _)) => format!("{}:{line}", self.src.name),
            None => self.src.name.clone(),
        };
        self.warnings
            .push(format!("{at}: at {path}: {}", message.into()));
    }

    /// Runs `f` with `seg` appended to the current path.
    fn at<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.path.push(seg);
        let result = f(self);
        self.path.pop();
        result
    }

    fn key<T>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.at(Seg::Key(key.to_owned()), f)
    }

    fn config(&mut self, json: &'a Value) -> Result<Entry> {
        let Value::Object(top) = json else {
            return self.fail(format!("the config must be an object, not {}", kind(json)));
        };
        self.refuse_jsonm(json)?;
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
    fn as_route(&mut self, target: Target) -> RouteId {
        match target {
            Target::Route(id) => id,
            Target::Server { .. } => {
                self.routes.push(Route::Hash {
                    children: vec![target],
                    hash: PoolHash::Ch3,
                    salt: String::new(),
                });
                self.routes.len() - 1
            }
        }
    }

    fn routes(&mut self, routes: &'a Value) -> Result<Entry> {
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
    fn alias(&mut self, v: &Value) -> Result<String> {
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

    fn named_handles(&mut self, v: &'a Value) -> Result<()> {
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

    /// Refuses JSONM (mcrouter's macro language): memfleet reads expanded configs only.
    fn refuse_jsonm(&mut self, json: &Value) -> Result<()> {
        if let Value::Object(top) = json {
            for key in ["macros", "consts"] {
                if top.contains_key(key) {
                    return self.key(key, |b| {
                        b.fail(format!(
                            "JSONM '{key}' are not supported; give memfleet the expanded config"
                        ))
                    });
                }
            }
        }
        self.refuse_macro_use(json)
    }

    fn refuse_macro_use(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::String(s) => match jsonm_use(s) {
                Some(what) => self.fail(format!(
                    "JSONM {what} is not supported; give memfleet the expanded config"
                )),
                None => Ok(()),
            },
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.at(Seg::Index(i), |b| b.refuse_macro_use(item))?;
                }
                Ok(())
            }
            Value::Object(map) => {
                for (k, item) in map {
                    if let Some(what) = jsonm_use(k) {
                        return self.key(k, |b| {
                            b.fail(format!("JSONM {what} in a key is not supported"))
                        });
                    }
                    self.key(k, |b| b.refuse_macro_use(item))?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Exactly one handle (a list of one).
    fn one(&mut self, v: &'a Value) -> Result<Target> {
        let list = self.list(v)?;
        match list.as_slice() {
            [one] => Ok(*one),
            _ => self.fail(format!("expected one route handle, got {}", list.len())),
        }
    }

    fn list(&mut self, v: &'a Value) -> Result<Vec<Target>> {
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
                _ => {
                    let ty = self.type_of(map)?;
                    self.typed(ty, Args::Object(map))
                }
            },
            Value::String(s) => self.string_handle(s),
            other => self.fail(format!(
                "a route handle must be an object, array or string, not {}",
                kind(other)
            )),
        }
    }

    fn type_of(&mut self, map: &'a Object) -> Result<&'a str> {
        match map.get("type") {
            Some(Value::String(ty)) => Ok(ty),
            Some(_) => self.key("type", |b| b.fail("type must be a string")),
            None => self.fail("route handle object has no 'type'"),
        }
    }

    fn string_handle(&mut self, s: &'a str) -> Result<Vec<Target>> {
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

    fn cycle<T>(&self, name: &str) -> Result<T> {
        let start = self.building.iter().position(|n| n == name).unwrap_or(0);
        let mut chain: Vec<&str> = self.building[start..].iter().map(String::as_str).collect();
        chain.push(name);
        self.fail(format!("route cycle: {}", chain.join(" -> ")))
    }

    /// A reference to a named handle by its name.
    fn resolve_named(&mut self, name: &str) -> Result<Vec<Target>> {
        let state = self.named.insert(name.to_owned(), Named::Building);
        match state {
            Some(Named::Done(targets)) => {
                self.named
                    .insert(name.to_owned(), Named::Done(targets.clone()));
                Ok(targets)
            }
            Some(Named::Building) => self.cycle(name),
            Some(Named::Pending(def, path)) => {
                let here = std::mem::replace(&mut self.path, path);
                self.building.push(name.to_owned());
                let built = match def {
                    Value::Object(map) => self
                        .type_of(map)
                        .and_then(|ty| self.typed(ty, Args::Object(map))),
                    other => self.list(other),
                };
                self.building.pop();
                self.path = here;
                let targets = built?;
                self.named
                    .insert(name.to_owned(), Named::Done(targets.clone()));
                Ok(targets)
            }
            None => {
                self.named.remove(name);
                self.fail(format!("no route handle named '{name}'"))
            }
        }
    }

    /// An object with a `name`: defined here unless already known by that name.
    fn named_inline(&mut self, name: &str, map: &'a Object) -> Result<Vec<Target>> {
        if self.named.contains_key(name) {
            return self.resolve_named(name);
        }
        self.named.insert(name.to_owned(), Named::Building);
        self.building.push(name.to_owned());
        let built = self
            .type_of(map)
            .and_then(|ty| self.typed(ty, Args::Object(map)));
        self.building.pop();
        let targets = built?;
        self.named
            .insert(name.to_owned(), Named::Done(targets.clone()));
        Ok(targets)
    }

    fn add(&mut self, route: Route) -> Vec<Target> {
        self.routes.push(route);
        vec![Target::Route(self.routes.len() - 1)]
    }

    /// Children given after `|` or as an object's `children`.
    fn children(&mut self, ty: &str, args: Args<'a>) -> Result<Vec<Target>> {
        match args {
            Args::None => self.fail(format!("{ty} needs children")),
            Args::Str(s) => self.string_handle(s),
            Args::Object(map) => match map.get("children") {
                Some(children) => self.key("children", |b| b.list(children)),
                None => self.fail(format!("{ty} has no 'children'")),
            },
        }
    }

    fn object(&mut self, ty: &str, args: Args<'a>) -> Result<&'a Object> {
        match args {
            Args::Object(map) => Ok(map),
            _ => self.fail(format!("{ty} must be an object")),
        }
    }

    /// A required sub-handle of an object.
    fn field_one(&mut self, ty: &str, map: &'a Object, key: &str) -> Result<Target> {
        match map.get(key) {
            Some(v) => self.key(key, |b| b.one(v)),
            None => self.fail(format!("{ty} has no '{key}'")),
        }
    }

    fn typed(&mut self, ty: &'a str, args: Args<'a>) -> Result<Vec<Target>> {
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
            _ if UNSUPPORTED_TYPES.contains(&ty) => self.fail(format!(
                "route handle type '{ty}' is not supported by memfleet yet"
            )),
            _ if matches!(args, Args::None) => self.fail(format!(
                "'{ty}' is neither a route handle type nor a named handle"
            )),
            _ => self.fail(format!("unknown route handle type '{ty}'")),
        }
    }

    fn all(&mut self, ty: &str, mode: AllMode, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.children(ty, args)?;
        Ok(self.add(Route::All { mode, children }))
    }

    fn bool_field(&mut self, map: &Object, key: &str, default: bool) -> Result<bool> {
        match map.get(key) {
            None => Ok(default),
            Some(Value::Bool(v)) => Ok(*v),
            Some(other) => {
                let msg = format!("{key} must be true or false, not {}", kind(other));
                self.key(key, |b| b.fail(msg))
            }
        }
    }

    fn int_field(
        &mut self,
        map: &Object,
        key: &str,
        default: i64,
        min: i64,
        max: i64,
    ) -> Result<i64> {
        match map.get(key) {
            None => Ok(default),
            Some(Value::Number(n)) if n.as_i64().is_some_and(|v| (min..=max).contains(&v)) => {
                Ok(n.as_i64().unwrap_or(default))
            }
            Some(_) => self.key(key, |b| {
                b.fail(format!("{key} must be an integer in {min}..={max}"))
            }),
        }
    }

    fn number(&mut self, v: &Value, what: &str) -> Result<f64> {
        match v.as_f64() {
            Some(x) => Ok(x),
            None => self.fail(format!("{what} must be a number, not {}", kind(v))),
        }
    }

    fn failover_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
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

    fn failover_with_exptime(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
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

    fn failover_settings(
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

    fn failover_errors(&mut self, v: &Value) -> Result<FailoverErrors> {
        match v {
            Value::Array(_) => {
                let list = self.error_names(v)?;
                Ok(FailoverErrors {
                    gets: list.clone(),
                    updates: list.clone(),
                    deletes: list,
                })
            }
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

    fn error_names(&mut self, v: &Value) -> Result<Vec<String>> {
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

    fn failover_limit(&mut self, v: &Value) -> Result<FailoverLimit> {
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

    fn prefix_selector(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
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

    fn operation_selector(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
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

    fn hash_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let children = self.children("HashRoute", args)?;
        let (hash, salt) = match args {
            Args::Object(map) => {
                let salt = self.salt(map)?;
                let func = match map.get("hash_func") {
                    None => "Ch3",
                    Some(Value::String(f)) => f.as_str(),
                    Some(_) => {
                        return self.key("hash_func", |b| b.fail("hash_func must be a string"))
                    }
                };
                let hash = self.hash_function(func, map.get("weights"), None, children.len())?;
                (hash, salt)
            }
            _ => (PoolHash::Ch3, String::new()),
        };
        self.check_hash(&hash, children.len())?;
        Ok(self.add(Route::Hash {
            children,
            hash,
            salt,
        }))
    }

    fn salt(&mut self, map: &Object) -> Result<String> {
        match map.get("salt") {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => self.key("salt", |b| b.fail("salt must be a string")),
        }
    }

    /// An empty pool or child list is allowed: requests through it get an error reply.
    fn check_hash(&mut self, hash: &PoolHash, servers: usize) -> Result<()> {
        if servers == 0 {
            return Ok(());
        }
        match hash.check(servers) {
            Ok(()) => Ok(()),
            Err(e) => self.fail(e.to_string()),
        }
    }

    /// The hash function called `func`, with WeightedCh3 weights from `weights` or else
    /// from the pool, padded with 0.5 or cut to `n` as mcrouter does.
    fn hash_function(
        &mut self,
        func: &str,
        weights: Option<&Value>,
        pool_weights: Option<&[f64]>,
        n: usize,
    ) -> Result<PoolHash> {
        match func {
            "Ch3" => Ok(PoolHash::Ch3),
            "Crc32" => Ok(PoolHash::Crc32),
            "WeightedCh3" => {
                let mut list = match (weights, pool_weights) {
                    (Some(v), _) => self.key("weights", |b| b.weights(v, n))?,
                    (None, Some(w)) => w.to_vec(),
                    (None, None) => return self.fail("WeightedCh3 needs 'weights'"),
                };
                if list.len() < n {
                    self.warn(format!(
                        "{} weights for {n} servers: the missing ones are 0.5 (as mcrouter)",
                        list.len()
                    ));
                }
                list.resize(n, 0.5);
                Ok(PoolHash::WeightedCh3(list))
            }
            f if UNSUPPORTED_HASHES.contains(&f) => self.fail(format!(
                "hash function '{f}' is not supported (Ch3, Crc32, WeightedCh3 are)"
            )),
            f => self.fail(format!(
                "unknown hash function '{f}' (Ch3, Crc32, WeightedCh3)"
            )),
        }
    }

    /// The first `n` weights (mcrouter reads no further).
    fn weights(&mut self, v: &Value, n: usize) -> Result<Vec<f64>> {
        let Value::Array(items) = v else {
            return self.fail("weights must be an array of numbers in [0, 1]");
        };
        let mut out = Vec::with_capacity(items.len().min(n));
        for (i, item) in items.iter().take(n).enumerate() {
            let w = self.at(Seg::Index(i), |b| {
                let w = b.number(item, "a weight")?;
                if !(0.0..=1.0).contains(&w) {
                    return b.fail(format!("weight {w} is outside [0, 1]"));
                }
                Ok(w)
            })?;
            out.push(w);
        }
        Ok(out)
    }

    fn pool_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let (pool_json, map): (&'a Value, Option<&'a Object>) = match args {
            Args::None => return self.fail("PoolRoute needs a pool"),
            Args::Str(name) => {
                let pool = self.pool_by_name(name)?;
                return self.finish_pool_route(pool, None);
            }
            Args::Object(map) => match map.get("pool") {
                Some(p) => (p, Some(map)),
                None => return self.fail("PoolRoute has no 'pool'"),
            },
        };
        let pool = self.key("pool", |b| b.pool(pool_json))?;
        self.finish_pool_route(pool, map)
    }

    fn finish_pool_route(&mut self, pool: PoolId, map: Option<&'a Object>) -> Result<Vec<Target>> {
        let n = self.pools[pool].servers.len();
        let pool_weights = self.pools[pool].weights.clone();
        let pool_name = self.pools[pool].name.clone();
        let mut salt = String::new();
        let mut hash = match &pool_weights {
            Some(w) => PoolHash::WeightedCh3(w.clone()),
            None => PoolHash::Ch3,
        };
        let mut shadows = Vec::new();
        let mut asynclog = Some(pool_name);
        if let Some(map) = map {
            match map.get("hash") {
                None => {}
                Some(Value::String(func)) => {
                    hash = self.key("hash", |b| {
                        b.hash_function(func, None, pool_weights.as_deref(), n)
                    })?;
                }
                Some(Value::Object(h)) => {
                    hash = self.key("hash", |b| {
                        let func = match h.get("hash_func") {
                            None => hash.name(),
                            Some(Value::String(f)) => f.as_str(),
                            Some(_) => return b.fail("hash_func must be a string"),
                        };
                        salt = b.salt(h)?;
                        b.hash_function(func, h.get("weights"), pool_weights.as_deref(), n)
                    })?;
                }
                Some(other) => {
                    let msg = format!("hash must be a string or an object, not {}", kind(other));
                    return self.key("hash", |b| b.fail(msg));
                }
            }
            if !self.bool_field(map, "asynclog", true)? {
                asynclog = None;
            } else if let Some(name) = map.get("asynclog_name").or(map.get("name")) {
                asynclog = name.as_str().map(str::to_owned).or(asynclog);
            }
            if let Some(v) = map.get("shadows") {
                shadows = self.key("shadows", |b| b.shadows(v))?;
            }
        }
        self.check_hash(&hash, n)?;
        Ok(self.add(Route::Pool {
            pool,
            hash,
            salt,
            shadows,
            asynclog,
        }))
    }

    fn shadows(&mut self, v: &'a Value) -> Result<Vec<Shadow>> {
        let Value::Array(items) = v else {
            return self.fail("shadows must be an array");
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let shadow = self.at(Seg::Index(i), |b| {
                let Value::Object(map) = item else {
                    return b.fail("a shadow must be an object with a 'target'");
                };
                let target = b.field_one("shadow", map, "target")?;
                let index_range = match map.get("index_range") {
                    None => {
                        b.warn("a shadow without index_range copies nothing (as in mcrouter)");
                        (0, 0)
                    }
                    Some(r) => b.key("index_range", |b| {
                        let pair = b.pair(r)?;
                        let ok = |x: f64| x >= 0.0 && x.fract() == 0.0;
                        if !(ok(pair.0) && ok(pair.1) && pair.0 <= pair.1) {
                            return b
                                .fail("index_range must be [start, end] with 0 <= start <= end");
                        }
                        Ok((pair.0 as usize, pair.1 as usize))
                    })?,
                };
                let key_fraction_range = match map.get("key_fraction_range") {
                    None => (0.0, 1.0),
                    Some(r) => b.key("key_fraction_range", |b| {
                        let pair = b.pair(r)?;
                        if !(0.0 <= pair.0 && pair.0 <= pair.1 && pair.1 <= 1.0) {
                            return b
                                .fail("key_fraction_range must be [a, b] with 0 <= a <= b <= 1");
                        }
                        Ok(pair)
                    })?,
                };
                let requests_fraction = match map.get("requests_fraction") {
                    None => 1.0,
                    Some(r) => b.key("requests_fraction", |b| {
                        let f = b.number(r, "requests_fraction")?;
                        if !(0.0..=1.0).contains(&f) {
                            return b.fail("requests_fraction must be in [0, 1]");
                        }
                        Ok(f)
                    })?,
                };
                Ok(Shadow {
                    target,
                    index_range,
                    key_fraction_range,
                    requests_fraction,
                })
            })?;
            out.push(shadow);
        }
        Ok(out)
    }

    fn pair(&mut self, v: &Value) -> Result<(f64, f64)> {
        match v {
            Value::Array(items) if items.len() == 2 => {
                let a = self.number(&items[0], "a range bound")?;
                let b = self.number(&items[1], "a range bound")?;
                Ok((a, b))
            }
            _ => self.fail("expected an array of two numbers"),
        }
    }

    /// `"Pool|A"` or `{"type": "Pool", ...}`: the pool's servers as a list of targets.
    fn pool_servers(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
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
    fn pool(&mut self, v: &'a Value) -> Result<PoolId> {
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
    fn inline_pool(&mut self, map: &Object) -> Result<PoolId> {
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
    fn inherited(&mut self, map: &Object, visiting: &mut Vec<String>) -> Result<Object> {
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

    fn pool_by_name(&mut self, name: &str) -> Result<PoolId> {
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

    fn define_pool(&mut self, name: &str, map: &Object) -> Result<PoolId> {
        if let Some(protocol) = map.get("protocol") {
            if protocol.as_str() != Some("ascii") {
                let msg = format!("protocol {protocol} is not spoken by memfleet (ascii only)");
                return self.key("protocol", |b| b.fail(msg));
            }
        }
        let Some(servers) = map.get("servers") else {
            return self.fail(format!("pool '{name}' has no 'servers'"));
        };
        let servers = self.key("servers", |b| {
            let Value::Array(items) = servers else {
                return b.fail("servers must be an array of \"host:port\" strings");
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(b.at(Seg::Index(i), |b| match item {
                    Value::String(s) => match parse_server(s) {
                        Ok(server) => Ok(server),
                        Err(msg) => b.fail(msg),
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
        self.pools.push(Pool {
            name: name.to_owned(),
            servers,
            weights,
            keep_routing_prefix,
        });
        let id = self.pools.len() - 1;
        self.pool_ids.insert(name.to_owned(), id);
        Ok(id)
    }
}

fn default_errors() -> FailoverErrors {
    let list: Vec<String> = DEFAULT_FAILOVER_ERRORS
        .iter()
        .map(|s| s.to_string())
        .collect();
    FailoverErrors {
        gets: list.clone(),
        updates: list.clone(),
        deletes: list,
    }
}

/// Describes a JSONM construct in `s`, if any: a macro call `@name(...)` or a `%var%`.
fn jsonm_use(s: &str) -> Option<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if let Some(rest) = s.strip_prefix('@') {
        let len = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if len > 0 && rest[len..].starts_with('(') {
            return Some(format!("macro call '@{}(...)'", &rest[..len]));
        }
    }
    let mut from = 0;
    while let Some(open) = s[from..].find('%').map(|i| from + i) {
        let rest = &s[open + 1..];
        let len = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if len > 0 && rest[len..].starts_with('%') {
            return Some(format!("variable '%{}%'", &rest[..len]));
        }
        from = open + 1;
    }
    None
}

/// `host:port[:protocol[:security]]`, IPv6 hosts in brackets.
pub fn parse_server(s: &str) -> std::result::Result<Server, String> {
    let bad = |why: &str| format!("server '{s}': {why}");
    let (host, rest) = if let Some(inner) = s.strip_prefix('[') {
        let Some((host, rest)) = inner.split_once(']') else {
            return Err(bad("missing ']' after the IPv6 address"));
        };
        let Some(rest) = rest.strip_prefix(':') else {
            return Err(bad("expected ':port' after ']'"));
        };
        (host, rest)
    } else {
        match s.split_once(':') {
            Some((host, rest)) => (host, rest),
            None => return Err(bad("expected host:port")),
        }
    };
    if host.is_empty() || host.contains(['[', ']', ' ']) {
        return Err(bad("bad host"));
    }
    let mut parts = rest.split(':');
    let port = parts.next().unwrap_or("");
    let port: u16 = match port.parse() {
        Ok(p) => p,
        _ => {
            return Err(bad(
                "the port must be a number up to 65535 (IPv6 needs [brackets])",
            ))
        }
    };
    let protocol = parts.next().map(str::to_owned);
    let security = parts.next().map(str::to_owned);
    if parts.next().is_some() {
        return Err(bad("too many ':' fields"));
    }
    if let Some(p) = &protocol {
        if !["ascii", "caret", "umbrella", "thrift"].contains(&p.as_str()) {
            return Err(bad("protocol must be ascii, caret, umbrella or thrift"));
        }
    }
    Ok(Server {
        host: host.to_owned(),
        port,
        protocol,
        security,
    })
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
