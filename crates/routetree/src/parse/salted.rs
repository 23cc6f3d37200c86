//! SaltedFailoverRoute: mcrouter's shorthand for a FailoverRoute whose first child is a
//! PoolRoute over `pool` and whose other children are the pool's servers, so that
//! `failover_policy` (typically DeterministicOrderPolicy) picks where a failed request goes.
//! mcrouter builds it by rewriting the handle's JSON before reading it; so does memfleet, so
//! the FailoverRoute and PoolRoute readers do the rest exactly as for a hand-written config.

use serde_json::{Map, Value};

/// The type the rewrite looks for.
pub(super) const TYPE: &str = "SaltedFailoverRoute";

/// Rewrites every SaltedFailoverRoute object in `v` (at any depth) into its FailoverRoute.
/// One whose `pool` is missing or is neither a name nor an object is left as it is, for the
/// reader to refuse with its location.
pub(super) fn expand(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(expand),
        Value::Object(map) => {
            map.values_mut().for_each(expand);
            if map.get("type").and_then(Value::as_str) == Some(TYPE) {
                if let Some(rewritten) = failover_of(map) {
                    *map = rewritten;
                }
            }
        }
        _ => {}
    }
}

/// The FailoverRoute mcrouter makes of `salted`: children `[PoolRoute, the pool's servers]`,
/// the PoolRoute taking the handle's `pool`, `hash`, `shadows` and `shadow_policy`; every
/// other setting (`failover_policy`, `failover_errors`, `name`, ...) stays on the FailoverRoute,
/// whose policy also reads the same `hash`.
fn failover_of(salted: &Map<String, Value>) -> Option<Map<String, Value>> {
    let pool = salted.get("pool")?;
    let servers = match pool {
        Value::String(name) => Value::String(format!("Pool|{name}")),
        Value::Object(_) => pool.clone(),
        _ => return None,
    };
    let mut normal = Map::new();
    normal.insert("type".into(), "PoolRoute".into());
    normal.insert("pool".into(), pool.clone());
    for key in ["shadows", "shadow_policy", "hash"] {
        if let Some(v) = salted.get(key) {
            normal.insert(key.into(), v.clone());
        }
    }
    let mut failover = salted.clone();
    failover.insert("type".into(), "FailoverRoute".into());
    failover.insert(
        "children".into(),
        Value::Array(vec![Value::Object(normal), servers]),
    );
    Some(failover)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_named_pool_becomes_its_pool_route_then_its_servers() {
        let mut v = json!({"route": {
            "type": "SaltedFailoverRoute",
            "pool": "A",
            "hash": {"hash_func": "WeightedCh3", "weights": [1, 0.5]},
            "shadows": [],
            "asynclog": false,
            "failover_policy": {"type": "DeterministicOrderPolicy", "max_tries": 2,
                                "max_error_tries": 1}
        }});
        expand(&mut v);
        assert_eq!(
            v["route"],
            json!({
                "type": "FailoverRoute",
                "pool": "A",
                "hash": {"hash_func": "WeightedCh3", "weights": [1, 0.5]},
                "shadows": [],
                "asynclog": false,
                "failover_policy": {"type": "DeterministicOrderPolicy", "max_tries": 2,
                                    "max_error_tries": 1},
                "children": [
                    {"type": "PoolRoute", "pool": "A", "shadows": [],
                     "hash": {"hash_func": "WeightedCh3", "weights": [1, 0.5]}},
                    "Pool|A"
                ]
            })
        );
    }

    #[test]
    fn an_inline_pool_is_both_children_and_nested_ones_are_rewritten_too() {
        let pool = json!({"name": "B", "servers": ["h:1", "h:2"]});
        let mut v = json!([{"type": "PrefixSelectorRoute", "wildcard": {
            "type": "SaltedFailoverRoute", "pool": pool.clone()}}]);
        expand(&mut v);
        let children = &v[0]["wildcard"]["children"];
        assert_eq!(
            children[0],
            json!({"type": "PoolRoute", "pool": pool.clone()})
        );
        assert_eq!(children[1], pool);
    }

    #[test]
    fn without_a_usable_pool_it_is_left_for_the_reader_to_refuse() {
        for salted in [json!({"type": TYPE}), json!({"type": TYPE, "pool": 3})] {
            let mut v = salted.clone();
            expand(&mut v);
            assert_eq!(v, salted);
        }
    }
}
