//! The built-in macros and calls of mcrouter's preprocessor, with its names, parameters and
//! error messages. `isLocalIp` asks the host's addresses the caller gave in [`super::Env`].

use super::weighted_hash::twang_mix64;
use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::value::{
    as_i64, cast_bool, cast_double, cast_int, cast_string, compare, double, equals, is_double,
    is_int, measure, type_name,
};
use super::weighted_hash::weighted_hash;
use super::{fail, note, Body, Ctx, Macro, Pre, Source, Within, DEPTH_LIMIT, R};

/// A built-in call of the object form only: it reads its fields itself.
pub(super) type CallFn = fn(&Pre, Map<String, Value>, &Ctx) -> R<Value>;

type Fun = fn(&Pre, &Ctx) -> R<Value>;

/// Name, parameters (`?` marks an optional one), whether arguments are expanded first.
const TABLE: &[(&str, &[&str], bool, Fun)] = &[
    ("import", &["path", "?default"], false, import),
    ("hash", &["value"], true, hash),
    ("weightedHash", &["dictionary", "key"], true, weighted_hash),
    ("int", &["value"], true, int),
    ("double", &["value"], true, double_),
    ("str", &["value"], true, str_),
    ("bool", &["value"], true, bool_),
    ("keys", &["dictionary"], true, keys),
    ("values", &["dictionary"], true, values),
    ("merge", &["params"], true, merge),
    ("select", &["dictionary", "key", "?default"], false, select),
    ("shuffle", &["dictionary", "?seed"], false, shuffle),
    ("slice", &["dictionary", "from", "to"], true, slice),
    ("split", &["dictionary", "delim"], true, split),
    ("range", &["from", "to"], true, range),
    ("contains", &["dictionary", "key"], true, contains),
    ("empty", &["dictionary"], true, empty),
    ("equals", &["A", "B"], true, |_, a| {
        Ok(Value::Bool(equals(&a.take("A"), &a.take("B"))))
    }),
    ("isArray", &["value"], true, |_, a| {
        Ok(a.take("value").is_array().into())
    }),
    ("isBool", &["value"], true, |_, a| {
        Ok(a.take("value").is_boolean().into())
    }),
    ("isInt", &["value"], true, |_, a| {
        Ok(is_int(&a.take("value")).into())
    }),
    ("isDouble", &["value"], true, |_, a| {
        Ok(is_double(&a.take("value")).into())
    }),
    ("isObject", &["value"], true, |_, a| {
        Ok(a.take("value").is_object().into())
    }),
    ("isString", &["value"], true, |_, a| {
        Ok(a.take("value").is_string().into())
    }),
    ("less", &["A", "B"], true, less),
    ("bitwiseAnd", &["A", "B"], true, |_, a| {
        int2(a, "bitwiseAnd", |x, y| Ok(x & y))
    }),
    ("bitwiseOr", &["A", "B"], true, |_, a| {
        int2(a, "bitwiseOr", |x, y| Ok(x | y))
    }),
    ("bitwiseXor", &["A", "B"], true, |_, a| {
        int2(a, "bitwiseXor", |x, y| Ok(x ^ y))
    }),
    ("bitwiseNot", &["A"], true, bitwise_not),
    ("bitwiseLeftShift", &["A", "B"], true, |_, a| {
        int2(a, "bitwiseLeftShift", |x, y| shift(x, y, u64::checked_shl))
    }),
    ("bitwiseRightShift", &["A", "B"], true, |_, a| {
        int2(a, "bitwiseRightShift", |x, y| shift(x, y, u64::checked_shr))
    }),
    ("and", &["A", "B"], false, |p, a| and_or(p, a, "and", true)),
    ("or", &["A", "B"], false, |p, a| and_or(p, a, "or", false)),
    ("not", &["A"], true, not),
    ("size", &["dictionary"], true, size),
    ("add", &["A", "B"], true, |_, a| {
        int2(a, "add", |x, y| Ok(x.wrapping_add(y)))
    }),
    ("sub", &["A", "B"], true, |_, a| {
        int2(a, "sub", |x, y| Ok(x.wrapping_sub(y)))
    }),
    ("mul", &["A", "B"], true, |_, a| {
        int2(a, "mul", |x, y| Ok(x.wrapping_mul(y)))
    }),
    ("div", &["A", "B"], true, |_, a| {
        int2(a, "div", |x, y| match y {
            0 => Err("div: B == 0".into()),
            y => Ok(x.wrapping_div(y)),
        })
    }),
    ("mod", &["A", "B"], true, |_, a| {
        int2(a, "mod", |x, y| match y {
            0 => Err("mod: B == 0".into()),
            y => Ok(x.wrapping_rem(y)),
        })
    }),
    ("fail", &["msg"], true, fail_),
    ("sort", &["dictionary"], true, sort),
    ("set", &["dictionary", "key", "value"], true, set),
    ("if", &["condition", "is_true", "is_false"], false, if_),
    ("define", &["result"], true, |_, a| Ok(a.take("result"))),
    ("defined", &["name"], true, defined),
    ("isLocalIp", &["ip"], true, is_local_ip),
];

/// Defines the built-in macros.
pub(super) fn install(pre: &Pre) {
    for (name, params, auto_expand, f) in TABLE {
        let params: Vec<Value> = params
            .iter()
            .map(|p| match p.strip_prefix('?') {
                Some(p) => serde_json::json!({"name": p, "optional": true}),
                None => Value::String((*p).to_owned()),
            })
            .collect();
        let m = Macro::new(name, &params, *auto_expand, Body::Builtin(*f))
            .expect("built-in macro parameters are well formed");
        pre.add_macro(m);
    }
}

/// The names of the built-in macros and calls (for documentation tests).
#[cfg(test)]
pub(super) fn names() -> Vec<&'static str> {
    let mut names: Vec<&str> = TABLE.iter().map(|t| t.0).collect();
    names.extend(["transform", "process", "foreach", "macroDef", "constDef"]);
    names
}

fn err<T>(message: String) -> R<T> {
    fail(message)
}

fn import(pre: &Pre, a: &Ctx) -> R<Value> {
    let path = match a.expand_raw(pre, "path")? {
        Value::String(s) => s,
        other => {
            return err(format!(
                "import path is {}, string expected",
                type_name(&other)
            ))
        }
    };
    if let Some(cached) = pre.imports.borrow().get(&path) {
        pre.charge_copy(cached)?;
        return Ok(cached.clone());
    }
    let loaded = (|| {
        let text = (pre.import)(&path)?;
        pre.charge(text.len())?;
        let source = Source::new(&path, &text).map_err(|e| super::Fail::from(e.to_string()))?;
        let json = source
            .parse()
            .map_err(|e| super::Fail::from(e.to_string()))?;
        pre.expand(json, &Ctx::root())
    })();
    let value = match loaded {
        Ok(v) => v,
        Err(e) => match a.try_expand_raw(pre, "default")? {
            Some(default) => default,
            None => return Err(e).within(note(format!("Import '{path}'"))),
        },
    };
    pre.imports.borrow_mut().insert(path, value.clone());
    Ok(value)
}

fn hash(_: &Pre, a: &Ctx) -> R<Value> {
    let v = a.take("value");
    let h = match (&v, as_i64(&v)) {
        (_, Some(i)) => twang_mix64(i as u64),
        (Value::String(s), _) => ring::spooky::hash64(s.as_bytes(), 0),
        _ => {
            return err(format!(
                "Hash: can not cast {} to int or string",
                type_name(&v)
            ))
        }
    };
    // mcrouter returns the unsigned hash as a JSON int64.
    Ok(Value::from(h as i64))
}

/// `@shuffle(list)` and `@shuffle(list, seed)`. With a seed, the order is the one mcrouter
/// built with GCC's C++ library gives (tests/vectors/jsonm-shuffle.json); without one, any
/// order, as mcrouter's random engine.
fn shuffle(pre: &Pre, a: &Ctx) -> R<Value> {
    let Value::Array(mut items) = a.expand_raw(pre, "dictionary")? else {
        return err("Shuffle: argument must be an array".into());
    };
    let seed = match a.try_expand_raw(pre, "seed")? {
        None => random_seed(),
        Some(v) => match as_i64(&v) {
            // mcrouter casts the int64 to uint32.
            Some(seed) if is_int(&v) && seed >= 0 => seed as u32,
            _ => return err("Shuffle: seed must be a non-negative integer".into()),
        },
    };
    super::shuffle::libstdcxx_shuffle(&mut items, seed);
    Ok(Value::Array(items))
}

/// A seed that differs from call to call and process to process.
fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u64(now.map_or(0, |d| d.as_nanos() as u64));
    h.finish() as u32
}

/// `@isLocalIp(ip)`: whether `ip` is one of this host's addresses; false for a string that
/// is no IP address, as mcrouter.
fn is_local_ip(p: &Pre, a: &Ctx) -> R<Value> {
    let ip = match a.take("ip") {
        Value::String(s) => s,
        other => {
            return err(format!(
                "isLocalIp: ip is {}, string expected",
                type_name(&other)
            ))
        }
    };
    let bare = ip
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(&ip);
    let Ok(ip) = bare.parse::<std::net::IpAddr>() else {
        return Ok(Value::Bool(false));
    };
    let Some(local) = p.local_ips else {
        return fail("Can not enumerate local ips: not known where this config is read");
    };
    let canon = |a: &std::net::IpAddr| a.to_canonical();
    Ok(Value::Bool(local.iter().any(|l| canon(l) == canon(&ip))))
}

fn cast(a: &Ctx, to: &str, f: impl Fn(&Value) -> Option<Value>) -> R<Value> {
    let v = a.take("value");
    f(&v).map_or_else(
        || err(format!("Can not cast {} to {to}", type_name(&v))),
        Ok,
    )
}

fn int(_: &Pre, a: &Ctx) -> R<Value> {
    cast(a, "int", |v| cast_int(v).map(Value::from))
}

fn double_(_: &Pre, a: &Ctx) -> R<Value> {
    cast(a, "double", |v| cast_double(v).map(double))
}

fn str_(_: &Pre, a: &Ctx) -> R<Value> {
    cast(a, "string", |v| cast_string(v).map(Value::String))
}

fn bool_(_: &Pre, a: &Ctx) -> R<Value> {
    cast(a, "boolean", |v| cast_bool(v).map(Value::Bool))
}

fn keys(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("dictionary") {
        Value::Object(map) => Ok(Value::Array(
            map.into_iter().map(|(k, _)| k.into()).collect(),
        )),
        _ => fail("Keys: dictionary is not object"),
    }
}

fn values(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("dictionary") {
        Value::Object(map) => Ok(Value::Array(map.into_iter().map(|(_, v)| v).collect())),
        _ => fail("Values: dictionary is not object"),
    }
}

fn merge(_: &Pre, a: &Ctx) -> R<Value> {
    let Value::Array(params) = a.take("params") else {
        return fail("Merge: 'params' is not array");
    };
    let mut params = params.into_iter();
    let Some(mut res) = params.next() else {
        return fail("Merge: empty params");
    };
    for (i, p) in params.enumerate().map(|(i, p)| (i + 1, p)) {
        match (&mut res, p) {
            (Value::Array(r), Value::Array(p)) => r.extend(p),
            (Value::Object(r), Value::Object(p)) => r.extend(p),
            (Value::String(r), Value::String(p)) => r.push_str(&p),
            (Value::Array(_), _) => return err(format!("Merge: param {i} is not an array")),
            (Value::Object(_), _) => return err(format!("Merge: param {i} is not an object")),
            (Value::String(_), _) => return err(format!("Merge: param {i} is not a string")),
            _ => return fail("Merge: first param is not array/object/string"),
        }
    }
    if !(res.is_array() || res.is_object() || res.is_string()) {
        return fail("Merge: first param is not array/object/string");
    }
    Ok(res)
}

fn select(p: &Pre, a: &Ctx) -> R<Value> {
    let dict = a.expand_raw(p, "dictionary")?;
    let key = a.expand_raw(p, "key")?;
    match dict {
        Value::Object(mut map) => {
            let Value::String(key) = key else {
                return fail("Select: dictionary is an object, key is not a string");
            };
            if let Some(v) = map.remove(&key) {
                return Ok(v);
            }
            match a.try_expand_raw(p, "default")? {
                Some(d) => Ok(d),
                None => err(format!("Select: '{key}' not found, default not specified")),
            }
        }
        Value::Array(mut items) => {
            let Some(mut id) = as_i64(&key) else {
                return fail("Select: dictionary is an array, key is not an integer");
            };
            if id < 0 {
                id = id.saturating_add(items.len() as i64);
            }
            if id >= 0 && (id as usize) < items.len() {
                return Ok(items.swap_remove(id as usize));
            }
            match a.try_expand_raw(p, "default")? {
                Some(d) => Ok(d),
                None => err(format!(
                    "Select: index {id} is out of range [0, {})",
                    items.len()
                )),
            }
        }
        other => err(format!(
            "Select: dictionary is {}, expected array/object",
            type_name(&other)
        )),
    }
}

fn slice(_: &Pre, a: &Ctx) -> R<Value> {
    let (from, to) = (a.take("from"), a.take("to"));
    let range = |len: usize| -> R<std::ops::Range<usize>> {
        let (Some(from), Some(to)) = (as_i64(&from), as_i64(&to)) else {
            return fail("Slice: from/to is not an int");
        };
        let from = from.max(0) as usize;
        let to = to.saturating_add(1).clamp(0, len as i64) as usize;
        Ok(from.min(to)..to)
    };
    match a.take("dictionary") {
        Value::Object(map) => {
            let (Value::String(from), Value::String(to)) = (&from, &to) else {
                return fail(if from.is_string() {
                    "Slice: to is not a string"
                } else {
                    "Slice: from is not a string"
                });
            };
            Ok(Value::Object(
                map.into_iter()
                    .filter(|(k, _)| from <= k && k <= to)
                    .collect(),
            ))
        }
        Value::Array(items) => {
            let r = range(items.len())?;
            Ok(Value::Array(items[r].to_vec()))
        }
        Value::String(s) => {
            let r = range(s.len())?;
            Ok(Value::String(
                String::from_utf8_lossy(&s.as_bytes()[r]).into_owned(),
            ))
        }
        _ => fail("Slice: dictionary is not array/object/string"),
    }
}

fn split(p: &Pre, a: &Ctx) -> R<Value> {
    let string = |v: Value, what: &str| match v {
        Value::String(s) => Ok(s),
        other => err(format!("{what} is {}, string expected", type_name(&other))),
    };
    let dict = string(a.take("dictionary"), "Split: dictionary")?;
    let delim = string(a.take("delim"), "Split: delim")?;
    // folly::split with an empty delimiter gives the whole string as the one piece.
    if delim.is_empty() {
        return Ok(Value::Array(vec![Value::String(dict)]));
    }
    let parts: Vec<Value> = dict.split(delim.as_str()).map(Value::from).collect();
    p.charge(parts.len())?;
    Ok(Value::Array(parts))
}

fn range(p: &Pre, a: &Ctx) -> R<Value> {
    let Some(from) = as_i64(&a.take("from")) else {
        return fail("Range: from is not an integer");
    };
    let Some(to) = as_i64(&a.take("to")) else {
        return fail("Range: to is not an integer");
    };
    if to >= from {
        let n = (to as i128 - from as i128 + 1).min(usize::MAX as i128) as usize;
        p.charge(n)?;
    }
    Ok(Value::Array((from..=to).map(Value::from).collect()))
}

fn contains(_: &Pre, a: &Ctx) -> R<Value> {
    let (dict, key) = (a.take("dictionary"), a.take("key"));
    match (&dict, &key) {
        (Value::Object(map), Value::String(k)) => Ok(map.contains_key(k).into()),
        (Value::Object(_), _) => fail("Contains: dictionary is an object, key is not a string"),
        (Value::Array(items), _) => Ok(items.iter().any(|i| equals(i, &key)).into()),
        (Value::String(s), Value::String(k)) => Ok(s.contains(k.as_str()).into()),
        (Value::String(_), _) => fail("Contains: dictionary is a string, key is not a string"),
        _ => err(format!(
            "Contains: dictionary is {}, expected object/array/string",
            type_name(&dict)
        )),
    }
}

fn empty(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("dictionary") {
        Value::Object(m) => Ok(m.is_empty().into()),
        Value::Array(v) => Ok(v.is_empty().into()),
        Value::String(s) => Ok(s.is_empty().into()),
        _ => fail("empty: dictionary is not object/array/string"),
    }
}

fn size(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("dictionary") {
        Value::Object(m) => Ok(m.len().into()),
        Value::Array(v) => Ok(v.len().into()),
        Value::String(s) => Ok(s.len().into()),
        _ => fail("size: dictionary is not object/array/string"),
    }
}

fn less(_: &Pre, a: &Ctx) -> R<Value> {
    let ord = compare(&a.take("A"), &a.take("B")).map_err(super::Fail::from)?;
    Ok((ord == Ordering::Less).into())
}

/// Two integer arguments `A` and `B` through `f`.
fn int2(a: &Ctx, name: &str, f: impl Fn(i64, i64) -> Result<i64, String>) -> R<Value> {
    let Some(x) = as_i64(&a.take("A")) else {
        return err(format!("{name}: A is not an integer"));
    };
    let Some(y) = as_i64(&a.take("B")) else {
        return err(format!("{name}: B is not an integer"));
    };
    f(x, y).map(Value::from).or_else(err)
}

/// A shift of `A` as unsigned; C++ leaves shifts of 64 or more undefined, so they are refused.
fn shift(x: i64, y: i64, f: fn(u64, u32) -> Option<u64>) -> Result<i64, String> {
    u32::try_from(y)
        .ok()
        .and_then(|y| f(x as u64, y))
        .map(|v| v as i64)
        .ok_or_else(|| format!("shift by {y} is out of range [0, 64)"))
}

fn bitwise_not(_: &Pre, a: &Ctx) -> R<Value> {
    match as_i64(&a.take("A")) {
        Some(x) => Ok(Value::from(!x)),
        None => fail("bitwiseNot: A is not an integer"),
    }
}

/// `and` (`short` = true: B only when A is true) and `or` (B only when A is false).
fn and_or(p: &Pre, a: &Ctx, name: &str, need: bool) -> R<Value> {
    let x = a.expand_raw(p, "A")?;
    let Value::Bool(x) = x else {
        return err(format!("{name}: A is {}, expected bool", type_name(&x)));
    };
    if x != need {
        return Ok(x.into());
    }
    match a.expand_raw(p, "B")? {
        Value::Bool(y) => Ok(y.into()),
        other => err(format!("{name}: B is {}, expected bool", type_name(&other))),
    }
}

fn not(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("A") {
        Value::Bool(b) => Ok((!b).into()),
        _ => fail("not: A is not bool"),
    }
}

fn fail_(_: &Pre, a: &Ctx) -> R<Value> {
    match a.take("msg") {
        Value::String(s) => fail(s),
        other => fail(serde_json::to_string_pretty(&other).unwrap_or_default()),
    }
}

fn sort(_: &Pre, a: &Ctx) -> R<Value> {
    let Value::Array(mut items) = a.take("dictionary") else {
        return fail("sort: dictionary is not an array");
    };
    // folly cannot order objects; find them before sorting rather than mid-sort.
    for item in &items {
        if let Some(e) = items.iter().find_map(|other| compare(item, other).err()) {
            return err(format!("sort: {e}"));
        }
    }
    items.sort_by(|x, y| compare(x, y).unwrap_or(Ordering::Equal));
    Ok(Value::Array(items))
}

fn set(_: &Pre, a: &Ctx) -> R<Value> {
    let (key, value) = (a.take("key"), a.take("value"));
    match a.take("dictionary") {
        Value::Object(mut map) => {
            let Value::String(key) = key else {
                return fail("Set: key is not a string");
            };
            map.insert(key, value);
            Ok(Value::Object(map))
        }
        Value::Array(mut items) => {
            let Some(id) = as_i64(&key) else {
                return fail("Set: key is not an int");
            };
            if id < 0 || id as usize >= items.len() {
                return err(format!(
                    "Set: key '{id}' is out of range [0..{})",
                    items.len()
                ));
            }
            items[id as usize] = value;
            Ok(Value::Array(items))
        }
        _ => fail("Set: dictionary is not array/object"),
    }
}

fn if_(p: &Pre, a: &Ctx) -> R<Value> {
    let Value::Bool(condition) = a.expand_raw(p, "condition")? else {
        return fail("If: condition is not bool");
    };
    let branch = if condition { "is_true" } else { "is_false" };
    a.expand_raw(p, branch)
        .within(note(format!("If '{branch}'")))
}

fn defined(p: &Pre, a: &Ctx) -> R<Value> {
    let name = match a.take("name") {
        Value::String(s) => s,
        other => {
            return err(format!(
                "Defined: name is {}, string expected",
                type_name(&other)
            ))
        }
    };
    let in_scope = match a.outer {
        Some(outer) => outer.contains(p, &name)?,
        None => false,
    };
    Ok((in_scope || p.consts.borrow().contains_key(&name)).into())
}

/// The name a loop gives its key or item (`keyName`, `itemName`, ...), or its default.
fn loop_name(json: &Map<String, Value>, field: &str, default: &str, call: &str) -> R<String> {
    match json.get(field) {
        None => Ok(default.to_owned()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => err(format!(
            "{call}: {field} is {}, string expected",
            type_name(other)
        )),
    }
}

fn field(json: &mut Map<String, Value>, key: &str, call: &str) -> R<Value> {
    json.remove(key)
        .map_or_else(|| err(format!("{call}: '{key}' not found")), Ok)
}

/// `transform`: rewrites an object's keys and items or an array's items, with `%key%` and
/// `%item%` (or the names given) in scope.
pub(super) fn transform(p: &Pre, mut json: Map<String, Value>, ctx: &Ctx) -> R<Value> {
    let dict = p.expand(field(&mut json, "dictionary", "Transform")?, ctx)?;
    let empty = match &dict {
        Value::Object(m) => m.is_empty(),
        Value::Array(v) => v.is_empty(),
        _ => return fail("Transform: dictionary is not array/object"),
    };
    if empty {
        return Ok(dict);
    }
    let item_name = loop_name(&json, "itemName", "item", "Transform")?;
    let key_name = loop_name(&json, "keyName", "key", "Transform")?;
    let scope = Ctx::extend(ctx, false);
    scope.add(&key_name, super::Var::Ready(Value::Null))?;
    scope.add(&item_name, super::Var::Ready(Value::Null))?;
    let item_transform = json.get("itemTransform");
    match dict {
        Value::Object(map) => {
            let key_transform = json.get("keyTransform");
            let mut out = Map::new();
            for (key, item) in map {
                scope.set(&key_name, Value::String(key.clone()));
                scope.set(&item_name, item.clone());
                let new_key = match key_transform {
                    Some(t) => p.expand(t.clone(), &scope)?,
                    None => Value::String(key),
                };
                if matches!(&new_key, Value::Array(k) if k.is_empty()) {
                    continue;
                }
                if !(new_key.is_array() || new_key.is_string()) {
                    return fail("Transformed key is not array/string");
                }
                let new_item = match item_transform {
                    Some(t) => p.expand(t.clone(), &scope)?,
                    None => item,
                };
                match new_key {
                    Value::String(k) => {
                        out.insert(k, new_item);
                    }
                    Value::Array(keys) => {
                        for k in keys {
                            let Value::String(k) = k else {
                                return fail("Transformed key list item is not a string");
                            };
                            p.charge_copy(&new_item)?;
                            out.insert(k, new_item.clone());
                        }
                    }
                    _ => unreachable!("checked above"),
                }
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => {
            let Some(t) = item_transform else {
                return fail("Transform: itemTransform is required for array");
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                scope.set(&key_name, Value::from(i));
                scope.set(&item_name, item);
                out.push(p.expand(t.clone(), &scope)?);
            }
            Ok(Value::Array(out))
        }
        _ => unreachable!("checked above"),
    }
}

/// `process`: folds `transform` over a dictionary, starting from `initialValue`, with
/// `%key%`, `%item%` and `%value%` (the value so far) in scope.
pub(super) fn process(p: &Pre, mut json: Map<String, Value>, ctx: &Ctx) -> R<Value> {
    let dict = p.expand(field(&mut json, "dictionary", "Process")?, ctx)?;
    let mut value = p.expand(field(&mut json, "initialValue", "Process")?, ctx)?;
    let t = field(&mut json, "transform", "Process")?;
    let entries: Vec<(Value, Value)> = match dict {
        Value::Object(map) => map.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i.into(), v))
            .collect(),
        _ => return fail("Process: dictionary is not array/object"),
    };
    let item_name = loop_name(&json, "itemName", "item", "Process")?;
    let key_name = loop_name(&json, "keyName", "key", "Process")?;
    let value_name = loop_name(&json, "valueName", "value", "Process")?;
    let scope = Ctx::extend(ctx, false);
    for name in [&key_name, &item_name, &value_name] {
        scope.add(name, super::Var::Ready(Value::Null))?;
    }
    for (key, item) in entries {
        scope.set(&key_name, key);
        scope.set(&item_name, item);
        scope.set(&value_name, value);
        value = p.expand(t.clone(), &scope)?;
        // The only place a value can grow deeper than the config's own nesting.
        if measure(&value).1 > DEPTH_LIMIT {
            std::mem::forget(value);
            return err(format!(
                "Process: the value nests deeper than {DEPTH_LIMIT} levels"
            ));
        }
    }
    Ok(value)
}

/// `foreach`: the entries of `from` that satisfy `where`, each expanded by `use` and merged,
/// at most `top` of them.
pub(super) fn foreach(p: &Pre, mut json: Map<String, Value>, ctx: &Ctx) -> R<Value> {
    let from = p.expand(field(&mut json, "from", "Foreach")?, ctx)?;
    let (entries, is_object): (Vec<(Value, Value)>, bool) = match from {
        Value::Object(map) => (map.into_iter().map(|(k, v)| (k.into(), v)).collect(), true),
        Value::Array(items) => (
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i.into(), v))
                .collect(),
            false,
        ),
        _ => return fail("Foreach: from is not object/array"),
    };
    let item_name = loop_name(&json, "item", "item", "Foreach")?;
    let key_name = loop_name(&json, "key", "key", "Foreach")?;
    let mut top = entries.len();
    if let Some(t) = json.remove("top") {
        match as_i64(&p.expand(t, ctx)?) {
            Some(t) if t >= 0 => top = t as usize,
            _ => return fail("Foreach: top should be a non-negative integer"),
        }
    }
    let use_ = json.get("use");
    let where_ = json.get("where");
    let scope = Ctx::extend(ctx, false);
    scope.add(&key_name, super::Var::Ready(Value::Null))?;
    scope.add(&item_name, super::Var::Ready(Value::Null))?;
    let mut result: Option<Value> = None;
    for (key, item) in entries {
        if top == 0 {
            break;
        }
        scope.set(&key_name, key.clone());
        scope.set(&item_name, item.clone());
        if let Some(w) = where_ {
            match p.expand(w.clone(), &scope)? {
                Value::Bool(true) => {}
                Value::Bool(false) => continue,
                _ => return fail("Foreach: expanded 'where' is not boolean"),
            }
        }
        let Some(u) = use_ else {
            match (&mut result, key) {
                (Some(Value::Array(r)), _) => r.push(item),
                (Some(Value::Object(r)), Value::String(k)) => {
                    r.insert(k, item);
                }
                (None, Value::String(k)) if is_object => {
                    result = Some(Value::Object(Map::from_iter([(k, item)])))
                }
                _ => result = Some(Value::Array(vec![item])),
            }
            top -= 1;
            continue;
        };
        let expanded = p.expand(u.clone(), &scope)?;
        match (&mut result, expanded) {
            (None, v @ (Value::Object(_) | Value::Array(_))) => result = Some(v),
            (None, _) => return fail("Foreach: expanded item is not object/array"),
            (Some(Value::Object(r)), Value::Object(v)) => r.extend(v),
            (Some(Value::Object(_)), _) => return fail("Foreach: expanded item is not an object"),
            (Some(Value::Array(r)), Value::Array(v)) => r.extend(v),
            (Some(_), _) => return fail("Foreach: expanded item is not an array"),
        }
        top -= 1;
    }
    match result {
        Some(r) => Ok(r),
        None => match json.remove("noMatchResult") {
            Some(n) => p.expand(n, ctx),
            None if is_object => Ok(Value::Object(Map::new())),
            None => Ok(Value::Array(Vec::new())),
        },
    }
}
