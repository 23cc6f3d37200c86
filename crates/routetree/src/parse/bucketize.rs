//! mcrouter's bucketization: a PoolRoute's `bucketize` wraps it in McBucketRoute, which
//! hashes the routing key to one of `total_buckets` buckets; a WeightedCh3 (or WeightedCh3Rv)
//! below then places the bucket id instead of the key, so every key of a bucket shares a
//! server. Other hash functions ignore the bucket, as in mcrouter (it passes the flag to
//! those two only). A HashRoute's `bucketize` and a PoolRoute's `useBucketHashSelector` make
//! the hash go by the bucket of a bucketized PoolRoute above (its shadows, its slow warm-up
//! target), without working one out.

use ring::{PoolHash, FURC_MAX_POOL_SIZE};
use serde_json::Value;

use super::builder::{Builder, Object, Result};
use super::fields::kind;
use crate::model::Bucketize;

/// Whether `hash` over `n` children places a bucket id rather than the key: mcrouter builds
/// its bucket selector for WeightedCh3 and WeightedCh3Rv only, and no hash at all for one child.
pub(super) fn hashes_bucket(wanted: bool, hash: &PoolHash, n: usize) -> bool {
    wanted && n >= 2 && matches!(hash, PoolHash::WeightedCh3(_) | PoolHash::WeightedCh3Rv(_))
}

impl<'a> Builder<'a> {
    /// McBucketRoute's settings when `map` (a PoolRoute) has `"bucketize": true`, read and
    /// checked as mcrouter does.
    pub(super) fn bucketize_settings(&mut self, map: &'a Object) -> Result<Option<Bucketize>> {
        if !self.bool_field(map, "bucketize", false)? {
            return Ok(None);
        }
        let total = match map.get("total_buckets") {
            None => return self.fail("McBucketRoute: no total number of buckets"),
            Some(v) => self.key("total_buckets", |b| match v.as_i64() {
                // mcrouter's Ch3 over the buckets takes at most furc's largest pool.
                Some(n) if n >= 1 && n <= i64::from(FURC_MAX_POOL_SIZE) => Ok(n as u32),
                Some(n) if n >= 1 => b.fail(format!(
                    "total_buckets {n} is out of range for Ch3 (1 to {FURC_MAX_POOL_SIZE})"
                )),
                _ => b.fail(format!(
                    "total_buckets must be an integer from 1 to {FURC_MAX_POOL_SIZE}, not {v}"
                )),
            })?,
        };
        let mut by_prefix = Vec::new();
        // mcrouter reads it only when it is an object.
        if let Some(Value::Object(prefixes)) = map.get("total_buckets_by_prefix") {
            self.key("total_buckets_by_prefix", |b| {
                for (prefix, v) in prefixes {
                    let n = b.key(prefix, |b| match v.as_i64() {
                        Some(n) if n > 0 && n <= i64::from(total) => Ok(n as u32),
                        Some(n) => b.fail(format!(
                            "Bucket count should be in range (0, {total}], got {n}"
                        )),
                        None => b.fail(format!("{v} expected int, found {}", kind(v))),
                    })?;
                    by_prefix.push((prefix.clone(), n));
                }
                Ok(())
            })?;
        }
        by_prefix.sort();
        let keyspace = match map.get("bucketization_keyspace") {
            Some(Value::String(s)) => s.clone(),
            _ => return self.fail("McBucketRoute: must have bucketization_keyspace"),
        };
        // Read and checked by mcrouter, and not used.
        if let Some(v) = map.get("salt").filter(|v| !v.is_string()) {
            let msg = format!("McBucketRoute: salt is not a string ({})", kind(v));
            return self.key("salt", |b| b.fail(msg));
        }
        Ok(Some(Bucketize {
            total_buckets: total,
            keyspace,
            by_prefix,
        }))
    }

    /// Refuses what routes by the client's address: a pool's `additional_fanout` on a
    /// bucketized PoolRoute (mcrouter's `client_fanout`: the bucket id plus the client's IP
    /// address is hashed, which memfleet's per-key plan does not see).
    pub(super) fn refuse_client_fanout(&mut self, pool: &'a Value) -> Result<()> {
        let pool = match pool {
            Value::String(name) => self.pools_json.and_then(|p| p.get(name.as_str())),
            other => Some(other),
        };
        let fanout = pool
            .and_then(|p| p.get("additional_fanout"))
            .and_then(Value::as_i64);
        if fanout.is_some_and(|n| n > 0) {
            return self.fail(
                "the pool's additional_fanout with bucketize (mcrouter's client fanout) is not \
                 supported: it places keys by the client's IP address, which memfleet does not \
                 route by",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Entry, Route, Target};
    use crate::{parse_config, Config, Plan};

    fn entry(c: &Config) -> &Route {
        match c.entry {
            Entry::Default(id) => &c.routes[id],
            _ => panic!("no single route"),
        }
    }

    fn config(route: &str) -> Result<Config, String> {
        let text = format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3"], "weights": [1, 1, 1]}},
                             "B": {{"servers": ["h:4", "h:5"]}}}},
                "route": {route}}}"#
        );
        parse_config("t.json", &text).map_err(|e| e.to_string())
    }

    fn server(c: &Config, op: &str, key: &str) -> (usize, usize) {
        match c.plan(op, key.as_bytes(), "/././") {
            Plan::Send(s) => (s.pool, s.index),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn settings_are_checked_as_mcrouter_does() {
        let pool = |extra: &str| {
            config(&format!(
                r#"{{"type": "PoolRoute", "pool": "A", "bucketize": true {extra}}}"#
            ))
        };
        let e = pool(r#", "bucketization_keyspace": "k""#).unwrap_err();
        assert!(
            e.contains("McBucketRoute: no total number of buckets"),
            "{e}"
        );
        let e = pool(r#", "total_buckets": 10"#).unwrap_err();
        assert!(e.contains("must have bucketization_keyspace"), "{e}");
        let e = pool(r#", "total_buckets": 0, "bucketization_keyspace": "k""#).unwrap_err();
        assert!(e.contains("route.total_buckets"), "{e}");
        let e = pool(r#", "total_buckets": 8388609, "bucketization_keyspace": "k""#).unwrap_err();
        assert!(e.contains("out of range for Ch3"), "{e}");
        let e = pool(
            r#", "total_buckets": 10, "bucketization_keyspace": "k",
               "total_buckets_by_prefix": {"a": 11}"#,
        )
        .unwrap_err();
        assert!(
            e.contains("Bucket count should be in range (0, 10], got 11"),
            "{e}"
        );
        assert!(e.contains("total_buckets_by_prefix.a"), "{e}");
        let e =
            pool(r#", "total_buckets": 10, "bucketization_keyspace": "k", "salt": 1"#).unwrap_err();
        assert!(e.contains("salt is not a string"), "{e}");
        // Not an object: not read, as mcrouter.
        pool(
            r#", "total_buckets": 10, "bucketization_keyspace": "k", "total_buckets_by_prefix": 3"#,
        )
        .unwrap();
    }

    #[test]
    fn client_fanout_is_refused_by_name() {
        let text = r#"{"pools": {"A": {"servers": ["h:1", "h:2"], "weights": [1, 1],
                                       "additional_fanout": 2}},
                       "route": {"type": "PoolRoute", "pool": "A", "bucketize": true,
                                 "total_buckets": 10, "bucketization_keyspace": "k"}}"#;
        let e = parse_config("t.json", text).unwrap_err().to_string();
        assert!(e.contains("additional_fanout with bucketize"), "{e}");
    }

    #[test]
    fn a_bucket_lands_on_one_server() {
        // One bucket: every key on the server WeightedCh3 picks for "0".
        let c = config(
            r#"{"type": "PoolRoute", "pool": "A", "bucketize": true, "total_buckets": 1,
                "bucketization_keyspace": "main"}"#,
        )
        .unwrap();
        let first = server(&c, "get", "k0");
        for i in 0..200 {
            assert_eq!(server(&c, "get", &format!("k{i}")), first);
            assert_eq!(server(&c, "set", &format!("/././k{i}|#|x")), first);
        }
        assert_eq!(
            first.1,
            ring::PoolHash::WeightedCh3(vec![1.0; 3]).index(b"0", 3)
        );
    }

    #[test]
    fn ch3_pools_go_by_the_key_as_in_mcrouter() {
        let plain = config(r#""PoolRoute|B""#).unwrap();
        let c = config(
            r#"{"type": "PoolRoute", "pool": "B", "bucketize": true, "total_buckets": 1,
                "bucketization_keyspace": "main"}"#,
        )
        .unwrap();
        assert!(matches!(entry(&c), Route::Bucketize { .. }));
        for i in 0..100 {
            let k = format!("k{i}");
            assert_eq!(server(&c, "get", &k), server(&plain, "get", &k));
        }
    }

    #[test]
    fn a_hash_route_by_bucket_needs_one_above() {
        let c = config(
            r#"{"type": "HashRoute", "children": "Pool|A", "hash_func": "WeightedCh3",
                "weights": [1, 1, 1], "bucketize": true}"#,
        )
        .unwrap();
        match c.plan("get", b"k", "/././") {
            Plan::Error(m) => assert!(m.contains("McBucketRoute in front"), "{m}"),
            other => panic!("{other:?}"),
        }
        // Under a bucketized PoolRoute (as its shadow) it hashes that pool's bucket.
        let c = config(
            r#"{"type": "PoolRoute", "pool": "A", "bucketize": true, "total_buckets": 1,
                "bucketization_keyspace": "main",
                "shadows": [{"index_range": [0, 3], "key_fraction_range": [0, 1],
                             "target": {"type": "HashRoute", "children": "Pool|A",
                                        "hash_func": "WeightedCh3", "weights": [1, 1, 1],
                                        "bucketize": true}}]}"#,
        )
        .unwrap();
        let want = ring::PoolHash::WeightedCh3(vec![1.0; 3]).index(b"0", 3);
        for i in 0..50 {
            match c.plan("get", format!("k{i}").as_bytes(), "/././") {
                Plan::Shadowed { main, shadows } => {
                    assert!(matches!(*main, Plan::Send(ref s) if s.index == want));
                    assert!(matches!(shadows[0].1, Plan::Send(ref s) if s.index == want));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn shadows_go_by_bucket_range() {
        // 11 buckets, key_fraction_range [0, 0.5]: buckets 0..=5 are copied; without a range
        // none is (mcrouter's empty bucket range).
        let c = config(
            r#"{"type": "PoolRoute", "pool": "A", "bucketize": true, "total_buckets": 11,
                "bucketization_keyspace": "main",
                "shadows": [{"index_range": [0, 3], "key_fraction_range": [0, 0.5],
                             "target": "PoolRoute|B"},
                            {"index_range": [0, 3], "target": "PoolRoute|B"}]}"#,
        )
        .unwrap();
        let Route::Bucketize { settings, .. } = entry(&c) else {
            panic!()
        };
        let (mut copied, mut not) = (0, 0);
        for i in 0..300 {
            let k = format!("key{i}");
            let bucket = settings.bucket(k.as_bytes());
            match c.plan("get", k.as_bytes(), "/././") {
                Plan::Shadowed { shadows, .. } => {
                    assert!(bucket <= 5, "{k}: {bucket}");
                    assert_eq!(shadows.len(), 1);
                    copied += 1;
                }
                Plan::Send(_) => {
                    assert!(bucket > 5, "{k}: {bucket}");
                    not += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(copied > 0 && not > 0);
    }

    #[test]
    fn the_wrapper_is_outermost() {
        let c = config(
            r#"{"type": "PoolRoute", "pool": "A", "bucketize": true, "total_buckets": 5,
                "bucketization_keyspace": "main", "rates": {"gets_rate": 10},
                "shard_splits": {"7": 2}}"#,
        )
        .unwrap();
        let Route::Bucketize { target, .. } = entry(&c) else {
            panic!()
        };
        assert!(
            matches!(target, Target::Route(id) if matches!(c.routes[*id], Route::ShardSplit { .. }))
        );
    }
}

#[cfg(test)]
mod handle_tests {
    use crate::admin_handles::{route_handles, HostNaming};
    use crate::parse_config;

    #[test]
    fn route_handles_names_the_bucket_route() {
        let text = r#"{"pools": {"A": {"servers": ["h:1", "h:2"], "weights": [1, 1]}},
                       "route": {"type": "PoolRoute", "pool": "A", "bucketize": true,
                                 "total_buckets": 1, "bucketization_keyspace": "main",
                                 "total_buckets_by_prefix": {"a": 1}}}"#;
        let c = parse_config("t.json", text).unwrap();
        let out =
            route_handles(&c, "get", b"key", "/././", HostNaming::server_timeout(1000)).unwrap();
        let index = ring::PoolHash::WeightedCh3(vec![1.0; 2]).index(b"0", 2);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[2],
            "  bucketize|total_buckets=1|bucketization_keyspace=main|prefix_map_enabled=true"
        );
        assert_eq!(lines[3], "   asynclog:A");
        assert_eq!(lines[4], "    selection|hash|WeightedCh3");
        assert!(lines[5].contains(&format!("|id={index}|")), "{out}");
        assert_eq!(
            crate::admin_handles::get_bucket(&c, b"/././key|#|x", "/././").unwrap(),
            "key|#|x\t0\tmain\tnull"
        );
        let plain = parse_config("t.json", &text.replace("true,", "false,")).unwrap();
        let e = crate::admin_handles::get_bucket(&plain, b"key", "/././").unwrap_err();
        assert_eq!(e, "get_bucket: couldn't find bucket for key key");
    }
}
