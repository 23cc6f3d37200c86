//! Big values through the route tree: which BigValueRoute a request meets, and the plan of
//! one of its chunks. mcrouter's BigValueRoute is reached by the client's request (the
//! handles above it choose by that request's key and operation) and sends each chunk to its
//! target, where the chunk's own key and operation route it. The router splits a value
//! itself and sends each chunk as a request of its own, planned here the same way: along the
//! base key down to the BigValueRoute, then by the chunk below it.

use ring::RoutingKey;

use super::{Eval, MAX_PLAN_NODES};
use crate::model::*;
use crate::plan::Plan;

/// The base key of a chunk key `<base>:<index>:<suffix>` (both decimal), if `key` is one.
pub fn chunk_base(key: &[u8]) -> Option<&[u8]> {
    let digits = |t: &[u8]| !t.is_empty() && t.iter().all(u8::is_ascii_digit);
    let (rest, suffix) = key.split_at(key.iter().rposition(|&b| b == b':')?);
    let (base, index) = rest.split_at(rest.iter().rposition(|&b| b == b':')?);
    (digits(&index[1..]) && digits(&suffix[1..]) && !base.is_empty()).then_some(base)
}

impl Config {
    /// Whether any route handle is a BigValueRoute (else [`Config::big_value_for`] is always
    /// `None`). Checked once per config: the router asks per request only when true.
    pub fn has_big_value(&self) -> bool {
        self.routes
            .iter()
            .any(|r| matches!(r, Route::BigValue { .. }))
    }

    /// The settings of the BigValueRoute an `op` request for `key` (with any routing prefix;
    /// keys without one use `default_prefix`) meets, if any. A routing prefix that selects
    /// several routes (`/*/*/`) goes by the first, the one whose reply the client gets.
    pub fn big_value_for(
        &self,
        op: &str,
        key: &[u8],
        default_prefix: &str,
    ) -> Option<BigValueSettings> {
        let rk = RoutingKey::parse(key);
        let id = *self.entry_routes(rk.prefix, default_prefix).ok()?.first()?;
        let eval = Eval::new(self, op, rk, 0);
        let mut at = Target::Route(id);
        // Bounded: each step goes down, and placement allows no cycle through these.
        for _ in 0..=self.routes.len() {
            let Target::Route(id) = at else {
                return None;
            };
            at = match &self.routes[id] {
                Route::BigValue { settings, .. } => return Some(*settings),
                Route::PrefixSelector { policies, wildcard } => policies
                    .iter()
                    .rev()
                    .find(|(prefix, _)| rk.key.starts_with(prefix.as_bytes()))
                    .map(|(_, t)| *t)
                    .or(*wildcard)?,
                Route::OperationSelector { policies, default } => policies
                    .iter()
                    .find(|(name, _)| name == op)
                    .map(|(_, t)| *t)
                    .or(*default)?,
                Route::Hash {
                    children,
                    hash,
                    salt,
                    by_bucket,
                } if !children.is_empty() => {
                    let index = eval.pick(hash, salt, children.len(), by_bucket.then_some(None))?;
                    children[index]
                }
                Route::ModifyExptime { target, .. } => *target,
                Route::LatencyInjection { child, .. } => *child,
                _ => return None,
            };
        }
        None
    }

    /// The settings for a `get` of `key` (see [`Config::big_value_for`]).
    pub fn big_value(&self, key: &[u8], default_prefix: &str) -> Option<BigValueSettings> {
        self.big_value_for("get", key, default_prefix)
    }

    /// The plan of a chunk request (`op`, `key` a chunk key) of a big value the client's
    /// `base_op` request split: the route tree along the base key and `base_op` down to the
    /// BigValueRoute, then the chunk's own operation and key. Only the first route of a
    /// routing prefix that selects several carries chunks. A key that is no chunk key, or
    /// whose base meets no BigValueRoute, is planned as any.
    pub fn plan_chunk_at(
        &self,
        base_op: &str,
        op: &str,
        key: &[u8],
        default_prefix: &str,
        now: i64,
    ) -> Plan {
        let Some(base) = chunk_base(key) else {
            return self.plan_at(op, key, default_prefix, now);
        };
        let base_rk = RoutingKey::parse(base);
        let Some(first) = self
            .entry_routes(base_rk.prefix, default_prefix)
            .ok()
            .and_then(|r| r.first().copied())
        else {
            return self.plan_at(op, key, default_prefix, now);
        };
        let mut eval = Eval {
            chunk: Some((op, RoutingKey::parse(key))),
            ..Eval::new(self, base_op, base_rk, now)
        };
        let plan = eval.route(first);
        if eval.chunk.is_some() {
            return self.plan_at(op, key, default_prefix, now);
        }
        if eval.nodes > MAX_PLAN_NODES {
            return Plan::Error("route tree too large for one request".into());
        }
        plan
    }
}
