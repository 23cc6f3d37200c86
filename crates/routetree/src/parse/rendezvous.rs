//! The hash functions that need more than weights (Rendezvous and WeightedRendezvous need a
//! tag per server; WeightedCh3Rv names a runtime variable), ConstShard, pool `tags`, and
//! FailoverRoute's RendezvousPolicy.

use ring::{PoolHash, Rendezvous};
use serde_json::Value;

use super::builder::{Builder, Object, Result};
use super::fields::kind;
use crate::error::Seg;
use crate::model::*;

impl<'a> Builder<'a> {
    /// ConstShard, Rendezvous, WeightedRendezvous or WeightedCh3Rv over `n` children,
    /// configured by `spec` (a HashRoute, or a pool's `hash` merged over its `tags`).
    pub(super) fn more_hash_function(
        &mut self,
        func: &str,
        spec: Option<&Object>,
        pool_weights: Option<&[f64]>,
        n: usize,
    ) -> Result<PoolHash> {
        // mcrouter builds no hash function for fewer than two children.
        if n < 2 && func != "ConstShard" {
            return Ok(PoolHash::Ch3);
        }
        let get = |key: &str| spec.and_then(|s| s.get(key));
        match func {
            "ConstShard" => Ok(PoolHash::ConstShard),
            "WeightedCh3Rv" => match get("weights_rv") {
                Some(Value::String(name)) => {
                    let weights = self.key("weights_rv", |b| b.runtime_weights(name, n))?;
                    Ok(PoolHash::WeightedCh3Rv(weights))
                }
                Some(other) => {
                    let msg = format!("weights_rv must be a string, not {}", kind(other));
                    self.key("weights_rv", |b| b.fail(msg))
                }
                None => self.fail("WeightedCh3Rv needs 'weights_rv'"),
            },
            "Rendezvous" => {
                let tags = self.tags_of(get("tags"), n)?;
                Ok(PoolHash::Rendezvous(Rendezvous::new(&tags)))
            }
            _ => {
                let tags = self.tags_of(get("tags"), n)?;
                let weights = match (get("weights"), pool_weights) {
                    (Some(v), _) => self.key("weights", |b| b.rendezvous_weights(v, n))?,
                    (None, Some(w)) if w.len() == n => w.to_vec(),
                    _ => return self.fail(format!("{func} needs 'weights', one per server")),
                };
                Ok(PoolHash::Rendezvous(Rendezvous::weighted(&tags, weights)))
            }
        }
    }

    /// `tags`: one string per server, exactly `n`.
    fn tags_of(&mut self, v: Option<&Value>, n: usize) -> Result<Vec<String>> {
        let Some(v) = v else {
            return self.fail("Rendezvous hashing needs 'tags', one string per server");
        };
        self.key("tags", |b| {
            let tags = b.tag_list(v)?;
            if tags.len() != n {
                return b.fail(format!("{} tags for {n} servers", tags.len()));
            }
            Ok(tags)
        })
    }

    fn tag_list(&mut self, v: &Value) -> Result<Vec<String>> {
        let Value::Array(items) = v else {
            return self.fail(format!("tags must be an array of strings, not {}", kind(v)));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.clone()),
                other => {
                    let msg = format!("a tag must be a string, not {}", kind(other));
                    return self.at(Seg::Index(i), |b| b.fail(msg));
                }
            }
        }
        Ok(out)
    }

    /// WeightedRendezvous weights: exactly `n` numbers, taken as given (mcrouter checks no range).
    fn rendezvous_weights(&mut self, v: &Value, n: usize) -> Result<Vec<f64>> {
        let Value::Array(items) = v else {
            return self.fail(format!(
                "weights must be an array of numbers, not {}",
                kind(v)
            ));
        };
        if items.len() != n {
            return self.fail(format!("{} weights for {n} servers", items.len()));
        }
        let mut out = Vec::with_capacity(n);
        for (i, item) in items.iter().enumerate() {
            out.push(self.at(Seg::Index(i), |b| b.number(item, "a weight"))?);
        }
        Ok(out)
    }

    /// A pool's own `tags`, which its PoolRoutes' rendezvous hashing uses unless their `hash`
    /// gives others.
    pub(super) fn pool_tags(&mut self, pool: &Object) -> Result<Option<Vec<String>>> {
        match pool.get("tags") {
            None => Ok(None),
            Some(v) => Ok(Some(self.key("tags", |b| b.tag_list(v))?)),
        }
    }

    /// RendezvousPolicy: tags come from the route (else the policy), one per child after the
    /// first; the route's `"hash": "WeightedRendezvous"` weighs them with the policy's `weights`.
    pub(super) fn rendezvous_policy(
        &mut self,
        policy: &Object,
        route: &Object,
        children: usize,
    ) -> Result<FailoverPolicy> {
        let hosts = children.saturating_sub(1);
        let (tags, from_route) =
            match (route.get("tags"), policy.get("tags")) {
                (Some(t), _) => (t, true),
                (None, Some(t)) => (t, false),
                (None, None) => return self.fail(
                    "RendezvousPolicy needs 'tags' (here or on the route), one per child after \
                     the first",
                ),
            };
        let tags = if from_route {
            self.tag_list(tags)
        } else {
            self.key("tags", |b| b.tag_list(tags))
        }?;
        if children == 0 || tags.len() != hosts {
            return self.fail(format!(
                "RendezvousPolicy: {} tags for {hosts} children after the first",
                tags.len()
            ));
        }
        let weighted =
            matches!(route.get("hash"), Some(Value::String(h)) if h == "WeightedRendezvous");
        let hash = if weighted {
            let weights = match policy.get("weights") {
                Some(v) => self.key("weights", |b| b.rendezvous_weights(v, hosts))?,
                None => return self.fail("WeightedRendezvous RendezvousPolicy needs 'weights'"),
            };
            Rendezvous::weighted(&tags, weights)
        } else {
            Rendezvous::new(&tags)
        };
        Ok(FailoverPolicy::Rendezvous { hash })
    }
}

#[cfg(test)]
mod tests {
    use ring::{PoolHash, Rendezvous, RoutingKey};

    use crate::model::*;
    use crate::parse_config;
    use crate::plan::Plan;

    const TAGS: &str = r#"["t0", "t1", "t2", "t3", "t4"]"#;

    fn config(route: &str) -> Result<Config, String> {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"], "tags": {TAGS}}},
                           "U": {{"servers": ["h:1", "h:2", "h:3"]}}}},
                "route": {route}}}"#
        );
        parse_config("t.json", &text).map_err(|e| e.to_string())
    }

    fn hashed(key: &str) -> &[u8] {
        RoutingKey::parse(key.as_bytes()).hashed
    }

    fn send_index(c: &Config, key: &str) -> usize {
        match c.plan("get", key.as_bytes(), "/r/c/") {
            Plan::Send(s) => s.index,
            other => panic!("{other:?}"),
        }
    }

    fn tags() -> Vec<String> {
        (0..5).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn pool_and_hash_route_rendezvous() {
        // The pool's tags serve a PoolRoute naming Rendezvous by string or object.
        let plain = Rendezvous::new(&tags());
        for route in [
            r#"{"type": "PoolRoute", "pool": "A", "hash": "Rendezvous"}"#,
            r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "Rendezvous"}}"#,
        ] {
            let c = config(route).unwrap();
            for i in 0..300 {
                let key = format!("/r/c/k{i}|#|x");
                assert_eq!(send_index(&c, &key), plain.index(hashed(&key)), "{key}");
            }
        }
        // The PoolRoute's own tags and weights win over the pool's.
        let c = config(
            r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedRendezvous",
                "tags": ["a", "b", "c", "d", "e"], "weights": [1, 0, 0.5, 2, 1]}}"#,
        )
        .unwrap();
        let weighted =
            Rendezvous::weighted(&["a", "b", "c", "d", "e"], vec![1.0, 0.0, 0.5, 2.0, 1.0]);
        for i in 0..300 {
            let key = format!("w{i}");
            assert_eq!(send_index(&c, &key), weighted.index(key.as_bytes()));
            assert_ne!(send_index(&c, &key), 1);
        }
        let c = config(
            r#"{"type": "HashRoute", "children": "Pool|U", "hash_func": "Rendezvous",
                "tags": ["x", "y", "z"], "salt": "s"}"#,
        )
        .unwrap();
        let r = Rendezvous::new(&["x", "y", "z"]);
        for i in 0..100 {
            let key = format!("h{i}");
            assert_eq!(send_index(&c, &key), r.index(format!("{key}s").as_bytes()));
        }
    }

    #[test]
    fn const_shard_and_weighted_ch3_rv() {
        let c = config(r#"{"type": "PoolRoute", "pool": "A", "hash": "ConstShard"}"#).unwrap();
        assert_eq!(send_index(&c, "user:3:name"), 3);
        assert_eq!(send_index(&c, "/r/c/user:0:x"), 0);
        let far = "user:5:name";
        assert_eq!(send_index(&c, far), PoolHash::Ch3.index(far.as_bytes(), 5));
        let c = config(
            r#"{"type": "PoolRoute", "pool": "U", "hash": {"hash_func": "WeightedCh3Rv", "weights_rv": "w"}}"#,
        )
        .unwrap();
        assert!(
            c.warnings.iter().any(|w| w.contains("0.5")),
            "{:?}",
            c.warnings
        );
        let same = PoolHash::WeightedCh3(vec![0.5; 3]);
        for i in 0..100 {
            let key = format!("rv{i}");
            assert_eq!(send_index(&c, &key), same.index(key.as_bytes(), 3));
        }
    }

    #[test]
    fn rendezvous_configs_are_checked() {
        for (route, want) in [
            (
                r#"{"type": "PoolRoute", "pool": "U", "hash": "Rendezvous"}"#,
                "needs 'tags'",
            ),
            (
                r#"{"type": "HashRoute", "children": "Pool|U", "hash_func": "Rendezvous", "tags": ["a"]}"#,
                "1 tags for 3 servers",
            ),
            (
                r#"{"type": "HashRoute", "children": "Pool|U", "hash_func": "WeightedRendezvous", "tags": ["a", "b", "c"]}"#,
                "needs 'weights'",
            ),
            (
                r#"{"type": "HashRoute", "children": "Pool|U", "hash_func": "WeightedRendezvous", "tags": ["a", "b", "c"], "weights": [1, 1]}"#,
                "2 weights for 3 servers",
            ),
            (
                r#"{"type": "HashRoute", "children": "Pool|U", "hash_func": "WeightedCh3Rv"}"#,
                "needs 'weights_rv'",
            ),
            (
                r#"{"type": "FailoverRoute", "children": ["PoolRoute|U", "Pool|U"],
                    "failover_policy": {"type": "RendezvousPolicy", "tags": ["a", "b"]}}"#,
                "2 tags for 3 children after the first",
            ),
        ] {
            let e = config(route).unwrap_err();
            assert!(e.contains(want), "{route}: {e}");
        }
    }

    fn failover_order(c: &Config, key: &str) -> Vec<usize> {
        match c.plan("get", key.as_bytes(), "/r/c/") {
            Plan::Failover {
                order,
                max_error_tries,
                plans,
                ..
            } => {
                assert_eq!((plans.len(), max_error_tries), (6, usize::MAX));
                order
            }
            other => panic!("{other:?}"),
        }
    }

    /// The first child, then every host in rendezvous order except the one the first child
    /// (here a Ch3 pool over the same servers) picked.
    #[test]
    fn rendezvous_policy_orders_failover_by_rendezvous() {
        let c = config(&format!(
            r#"{{"type": "FailoverRoute", "children": ["PoolRoute|A", "Pool|A"],
                "failover_policy": {{"type": "RendezvousPolicy", "tags": {TAGS}}}}}"#
        ))
        .unwrap();
        let r = Rendezvous::new(&tags());
        for i in 0..300 {
            let key = format!("/r/c/f{i}|#|tail");
            let order = failover_order(&c, &key);
            let primary = PoolHash::Ch3.index(hashed(&key), 5);
            let mut want = vec![0];
            want.extend(
                r.order(hashed(&key))
                    .into_iter()
                    .filter(|&s| s != primary)
                    .map(|s| s + 1),
            );
            assert_eq!(order, want, "{key}");
            assert_eq!(order.len(), 5);
            assert!(!order.contains(&(primary + 1)));
        }
        // The route's tags win; its "hash": "WeightedRendezvous" weighs them by the policy's weights.
        let c = config(
            r#"{"type": "FailoverRoute", "children": ["PoolRoute|A", "Pool|A"],
                "tags": ["a", "b", "c", "d", "e"], "hash": "WeightedRendezvous",
                "failover_policy": {"type": "RendezvousPolicy", "tags": ["x"],
                                    "weights": [1, 1, 0, 1, 1]}}"#,
        )
        .unwrap();
        let Route::Failover { policy, .. } = &c.routes[match c.entry {
            Entry::Default(id) => id,
            Entry::Aliases(ref t) => t[0].1,
        }] else {
            panic!()
        };
        let FailoverPolicy::Rendezvous { hash } = policy else {
            panic!("{policy:?}")
        };
        assert_eq!(
            hash,
            &Rendezvous::weighted(&["a", "b", "c", "d", "e"], vec![1.0, 1.0, 0.0, 1.0, 1.0])
        );
        for i in 0..100 {
            // A zero weight scores 0, so that host is always tried last (or is the primary).
            let order = failover_order(&c, &format!("z{i}"));
            assert!(order.last() == Some(&3) || !order.contains(&3), "{order:?}");
        }
    }
}
