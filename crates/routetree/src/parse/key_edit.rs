//! ModifyKeyRoute: its target and how it rewrites keys.

use serde_json::Value;

use super::builder::{Args, Builder, Object, Result};
use super::fields::kind;
use crate::model::*;

/// mcrouter's longest key (routing prefix included).
pub(crate) const MAX_KEY_LENGTH: usize = 250;

/// Why a key (or a piece of one) is not a memcache key, as mcrouter words it.
pub(crate) fn key_problem(key: &[u8]) -> Option<&'static str> {
    if key.is_empty() {
        Some("missing")
    } else if key.len() > MAX_KEY_LENGTH {
        Some("too long")
    } else if key
        .iter()
        .any(|&c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        Some("space or control character")
    } else {
        None
    }
}

impl<'a> Builder<'a> {
    pub(super) fn modify_key_route(&mut self, args: Args<'a>) -> Result<Vec<Target>> {
        let ty = "ModifyKeyRoute";
        let map = self.object(ty, args)?;
        let target = self.field_one(ty, map, "target")?;
        let routing_prefix = match self.string_field(map, "set_routing_prefix")? {
            None => None,
            Some(p) if p.is_empty() => Some(p),
            Some(p) => match normal_routing_prefix(&p) {
                Some(p) => Some(p),
                None => {
                    return self.key("set_routing_prefix", |b| {
                        b.fail(format!(
                            "set_routing_prefix '{p}' is not a routing prefix like \
                             /region/cluster/"
                        ))
                    })
                }
            },
        };
        let key_prefix = self.key_piece(map, "ensure_key_prefix")?;
        let replace_prefix = match map.get("replace_key_prefix") {
            None => None,
            Some(_) => Some(self.key_piece(map, "replace_key_prefix")?),
        };
        let key_suffix = self.key_piece(map, "set_key_suffix")?;
        let modify_inplace = self.bool_field(map, "modify_inplace", false)?;
        if map.contains_key("modify_inplace") && replace_prefix.is_some() {
            return self.key("modify_inplace", |b| {
                b.fail("replace_key_prefix and modify_inplace cannot be used together")
            });
        }
        Ok(self.add(Route::ModifyKey {
            target,
            edit: KeyEdit {
                routing_prefix,
                key_prefix,
                replace_prefix,
                modify_inplace,
                key_suffix,
            },
        }))
    }

    /// A string field that must be usable in a key (or be empty).
    fn key_piece(&mut self, map: &Object, field: &str) -> Result<String> {
        let piece = match map.get(field) {
            None => return Ok(String::new()),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                let msg = format!("{field} must be a string, not {}", kind(other));
                return self.key(field, |b| b.fail(msg));
            }
        };
        match key_problem(piece.as_bytes()) {
            Some(problem) if !piece.is_empty() => self.key(field, |b| {
                b.fail(format!(
                    "{field} '{piece}' is not valid in a key: {problem}"
                ))
            }),
            _ => Ok(piece),
        }
    }
}

/// `p` as `/region/cluster/` (the slashes around it may be left out, as in mcrouter), or
/// `None` when it is not two non-empty parts.
fn normal_routing_prefix(p: &str) -> Option<String> {
    let inner = p.strip_prefix('/').unwrap_or(p);
    let inner = inner.strip_suffix('/').unwrap_or(inner);
    match inner.split('/').collect::<Vec<_>>().as_slice() {
        [region, cluster] if !region.is_empty() && !cluster.is_empty() => {
            Some(format!("/{region}/{cluster}/"))
        }
        _ => None,
    }
}
