//! ModifyKeyRoute's plans: the key a request is rewritten to, as mcrouter rewrites it.

use ring::RoutingKey;

use super::{Eval, Plan};
use crate::model::{KeyEdit, Target};
use crate::parse::key_problem;

/// The key `edit` makes of `rk` (routing prefix included), or `None` when it leaves the
/// key alone. In mcrouter's order: a key starting with `replace_prefix` has it replaced by
/// the key prefix; a key not starting with the key prefix gets it (over its first bytes
/// with `modify_inplace`); a new routing prefix replaces the key's; and the suffix is
/// appended to whatever key comes out.
pub fn edited_key(edit: &KeyEdit, rk: &RoutingKey<'_>) -> Option<Vec<u8>> {
    let prefix = edit
        .routing_prefix
        .as_deref()
        .map_or(rk.prefix, str::as_bytes);
    let key = rk.key;
    let wanted = edit.key_prefix.as_bytes();
    let suffix = edit.key_suffix.as_bytes();
    let join = |parts: &[&[u8]]| parts.concat();
    if let Some(old) = edit
        .replace_prefix
        .as_deref()
        .filter(|old| key.starts_with(old.as_bytes()))
    {
        return Some(join(&[prefix, wanted, &key[old.len()..], suffix]));
    }
    if !key.starts_with(wanted) {
        let rest = if edit.modify_inplace && key.len() >= wanted.len() {
            &key[wanted.len()..]
        } else {
            key
        };
        return Some(join(&[prefix, wanted, rest, suffix]));
    }
    if edit.routing_prefix.is_some() && prefix != rk.prefix {
        return Some(join(&[prefix, key, suffix]));
    }
    if !suffix.is_empty() {
        return Some(join(&[rk.prefix, key, suffix]));
    }
    None
}

impl Eval<'_, '_> {
    /// The target's plan for the edited key; an error reply when that is not a valid key.
    pub(super) fn modify_key(&mut self, target: Target, edit: &KeyEdit) -> Plan {
        let Some(key) = edited_key(edit, &self.rk) else {
            return self.target(target);
        };
        if let Some(problem) = key_problem(&key) {
            return Plan::Error(format!("ModifyKeyRoute: invalid key: {problem}"));
        }
        self.rekeyed(target, key)
    }
}
