//! JSON values as mcrouter's preprocessor sees them (folly::dynamic): its type names, its
//! equality and order (ints and doubles compare by value), and its casts.

use std::cmp::Ordering;

use serde_json::Value;

/// A number as folly holds it: an int64 or a double.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Double(f64),
}

fn num(v: &Value) -> Option<Num> {
    let Value::Number(n) = v else { return None };
    match n.as_i64() {
        Some(i) => Some(Num::Int(i)),
        None => n.as_f64().map(Num::Double),
    }
}

pub(super) fn as_i64(v: &Value) -> Option<i64> {
    match num(v) {
        Some(Num::Int(i)) => Some(i),
        _ => None,
    }
}

pub(super) fn is_int(v: &Value) -> bool {
    as_i64(v).is_some()
}

pub(super) fn is_double(v: &Value) -> bool {
    matches!(num(v), Some(Num::Double(_)))
}

/// folly's type name, as its error messages give it.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) if is_int(v) => "int64",
        Value::Number(_) => "double",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// folly's type order, used when two values of different types are compared.
fn rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Array(_) => 1,
        Value::Bool(_) => 2,
        Value::Number(_) if is_double(v) => 3,
        Value::Number(_) => 4,
        Value::Object(_) => 5,
        Value::String(_) => 6,
    }
}

fn num_cmp(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.cmp(&y),
        (x, y) => {
            let f = |n| match n {
                Num::Int(i) => i as f64,
                Num::Double(d) => d,
            };
            f(x).partial_cmp(&f(y)).unwrap_or(Ordering::Equal)
        }
    }
}

/// folly's `==`: an int equals a double of the same value.
pub(super) fn equals(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return num_cmp(x, y) == Ordering::Equal;
    }
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equals(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| equals(v, w)))
        }
        _ => a == b,
    }
}

/// folly's `<` as an ordering; objects cannot be ordered.
pub(super) fn compare(a: &Value, b: &Value) -> Result<Ordering, String> {
    if a.is_object() || b.is_object() {
        return Err("Can not compare objects".into());
    }
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return Ok(num_cmp(x, y));
    }
    if rank(a) != rank(b) {
        return Ok(rank(a).cmp(&rank(b)));
    }
    Ok(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                match compare(p, q)? {
                    Ordering::Equal => {}
                    other => return Ok(other),
                }
            }
            x.len().cmp(&y.len())
        }
        _ => Ordering::Equal,
    })
}

/// folly's `asInt()`: exact doubles, booleans and decimal strings convert.
pub(super) fn cast_int(v: &Value) -> Option<i64> {
    match (v, num(v)) {
        (_, Some(Num::Int(i))) => Some(i),
        (_, Some(Num::Double(d))) => {
            let i = d as i64;
            (i as f64 == d && d.is_finite()).then_some(i)
        }
        (Value::Bool(b), _) => Some(i64::from(*b)),
        (Value::String(s), _) => s.trim_start().parse().ok(),
        _ => None,
    }
}

/// folly's `asDouble()`.
pub(super) fn cast_double(v: &Value) -> Option<f64> {
    match (v, num(v)) {
        (_, Some(Num::Int(i))) => Some(i as f64),
        (_, Some(Num::Double(d))) => Some(d),
        (Value::Bool(b), _) => Some(f64::from(u8::from(*b))),
        (Value::String(s), _) => s.trim().parse().ok(),
        _ => None,
    }
}

/// folly's `asString()`: booleans become `1`/`0` (folly converts them as integers).
pub(super) fn cast_string(v: &Value) -> Option<String> {
    match (v, num(v)) {
        (Value::String(s), _) => Some(s.clone()),
        (_, Some(Num::Int(i))) => Some(i.to_string()),
        (_, Some(Num::Double(d))) => Some(d.to_string()),
        (Value::Bool(b), _) => Some(if *b { "1" } else { "0" }.into()),
        _ => None,
    }
}

/// folly's `asBool()`: numbers are true when non-zero; strings as folly's `to<bool>` reads them.
pub(super) fn cast_bool(v: &Value) -> Option<bool> {
    match (v, num(v)) {
        (Value::Bool(b), _) => Some(*b),
        (_, Some(Num::Int(i))) => Some(i != 0),
        (_, Some(Num::Double(d))) => Some(d != 0.0),
        (Value::String(s), _) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "t" | "y" | "yes" | "on" => Some(true),
            "0" | "false" | "f" | "n" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A double as a JSON value (non-finite doubles have no JSON form: null).
pub(super) fn double(d: f64) -> Value {
    serde_json::Number::from_f64(d).map_or(Value::Null, Value::Number)
}

/// Number of values and string bytes in `v`, and its nesting depth; without recursion, so
/// that a value too deep to handle recursively can still be measured and refused.
pub(super) fn measure(v: &Value) -> (usize, usize) {
    let mut size = 0;
    let mut depth = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        size += 1;
        depth = depth.max(d);
        match v {
            Value::String(s) => size += s.len(),
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => {
                for (k, i) in map {
                    size += k.len();
                    stack.push((i, d + 1));
                }
            }
            _ => {}
        }
    }
    (size, depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ints_and_doubles_compare_by_value() {
        assert!(equals(&json!(1), &json!(1.0)));
        assert!(!equals(&json!(1), &json!("1")));
        assert_eq!(compare(&json!(1), &json!(1.5)), Ok(Ordering::Less));
        assert_eq!(compare(&json!("b"), &json!("a")), Ok(Ordering::Greater));
        // Different types order by folly's type order: null < array < bool < number < string.
        assert_eq!(compare(&json!(null), &json!([])), Ok(Ordering::Less));
        assert_eq!(compare(&json!(true), &json!(0)), Ok(Ordering::Less));
        assert_eq!(compare(&json!([9]), &json!(false)), Ok(Ordering::Less));
        assert_eq!(compare(&json!(5), &json!("a")), Ok(Ordering::Less));
        assert!(compare(&json!({}), &json!(1)).is_err());
    }

    #[test]
    fn casts_follow_folly() {
        assert_eq!(cast_int(&json!("-12")), Some(-12));
        assert_eq!(cast_int(&json!(2.0)), Some(2));
        assert_eq!(cast_int(&json!(2.5)), None);
        assert_eq!(cast_int(&json!("1.a")), None);
        assert_eq!(cast_string(&json!(5.5)).as_deref(), Some("5.5"));
        assert_eq!(cast_string(&json!(true)).as_deref(), Some("1"));
        assert_eq!(cast_bool(&json!("off")), Some(false));
        assert_eq!(cast_bool(&json!(3)), Some(true));
        assert_eq!(cast_double(&json!("1.a")), None);
    }

    #[test]
    fn measure_counts_without_recursion() {
        let mut v = json!(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let measured = measure(&v);
        // Dropping this value recursively would overflow the stack.
        std::mem::forget(v);
        assert_eq!(measured, (100_001, 100_001));
    }
}
