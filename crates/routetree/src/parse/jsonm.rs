//! Refusal of JSONM (mcrouter's macro language): memfleet reads expanded configs only.

use serde_json::Value;

use super::builder::{Builder, Result};
use crate::error::Seg;

impl<'a> Builder<'a> {
    /// Refuses JSONM (mcrouter's macro language): memfleet reads expanded configs only.
    pub(super) fn refuse_jsonm(&mut self, json: &Value) -> Result<()> {
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

    pub(super) fn refuse_macro_use(&mut self, v: &Value) -> Result<()> {
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
