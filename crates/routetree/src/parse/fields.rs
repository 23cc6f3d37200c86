//! Readers for the scalar fields many handles share (booleans, bounded integers, numbers,
//! ranges, salts), each refusing a wrong type at the field's own position.

use serde_json::Value;

use super::builder::{Builder, Object, Result};

/// What a JSON value is, for a refusal that names it.
pub(super) fn kind(v: &Value) -> &'static str {
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
    pub(super) fn bool_field(&mut self, map: &Object, key: &str, default: bool) -> Result<bool> {
        match map.get(key) {
            None => Ok(default),
            Some(Value::Bool(v)) => Ok(*v),
            Some(other) => {
                let msg = format!("{key} must be true or false, not {}", kind(other));
                self.key(key, |b| b.fail(msg))
            }
        }
    }

    pub(super) fn int_field(
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

    pub(super) fn string_field(&mut self, map: &Object, key: &str) -> Result<Option<String>> {
        match map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => {
                let msg = format!("{key} must be a string, not {}", kind(other));
                self.key(key, |b| b.fail(msg))
            }
        }
    }

    pub(super) fn number(&mut self, v: &Value, what: &str) -> Result<f64> {
        match v.as_f64() {
            Some(x) => Ok(x),
            None => self.fail(format!("{what} must be a number, not {}", kind(v))),
        }
    }

    pub(super) fn pair(&mut self, v: &Value) -> Result<(f64, f64)> {
        match v {
            Value::Array(items) if items.len() == 2 => {
                let a = self.number(&items[0], "a range bound")?;
                let b = self.number(&items[1], "a range bound")?;
                Ok((a, b))
            }
            _ => self.fail("expected an array of two numbers"),
        }
    }

    pub(super) fn salt(&mut self, map: &Object) -> Result<String> {
        Ok(self.string_field(map, "salt")?.unwrap_or_default())
    }
}
