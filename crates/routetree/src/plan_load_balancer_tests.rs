//! LoadBalancerRoute (and `hash_func: "LoadBalancer"`) with memcached behind it: every
//! child weighs 1.0, so placement is WeightedCh3 with equal weights, re-hashed on errors.

use ring::{mcrouter::weighted_ch3, RoutingKey};

use super::*;
use crate::parse_config;
use crate::reply::McResult;
use crate::test_support::to;

const DEFAULT: &str = "/r/c1/";

fn text(route: &str) -> String {
    format!(
        r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]}},
                       "B": {{"servers": ["h:6", "h:7"]}},
                       "C": {{"servers": ["h:8"]}}}},
            "route": {route}}}"#
    )
}

fn config(route: &str) -> Config {
    parse_config("t.json", &text(route)).unwrap_or_else(|e| panic!("{e}"))
}

/// A send to server `index` of the pool called `name` (pools are numbered as first used).
fn to_pool(c: &Config, name: &str, index: usize) -> Plan {
    let pool = c.pools.iter().position(|p| p.name == name).expect("pool");
    to(pool, index)
}

fn refused(route: &str) -> String {
    parse_config("t.json", &text(route))
        .expect_err("refused")
        .to_string()
}

/// WeightedCh3 with `n` weights of 1.0 over the routing key followed by `salt`.
fn equal_ch3(key: &str, salt: &str, n: usize) -> usize {
    let mut bytes = RoutingKey::parse(key.as_bytes()).hashed.to_vec();
    bytes.extend_from_slice(salt.as_bytes());
    weighted_ch3(&bytes, &vec![1.0; n])
}

fn keys() -> impl Iterator<Item = String> {
    (0..2000).map(|i| format!("key:{i}"))
}

#[test]
fn weighted_hashing_places_keys_by_equal_weight_ch3_with_the_salt() {
    let routes = [
        r#"{"type": "LoadBalancerRoute", "children": "Pool|A", "salt": "s1"}"#,
        r#"{"type": "LoadBalancerRoute", "children": "Pool|A", "salt": "s1",
            "algorithm": "weighted-hashing", "load_ttl_ms": 50,
            "enable_thrift_server_load": true}"#,
        r#"{"type": "HashRoute", "children": "Pool|A", "hash_func": "LoadBalancer",
            "salt": "s1"}"#,
        r#"{"type": "PoolRoute", "pool": "A",
            "hash": {"hash_func": "LoadBalancer", "salt": "s1"}}"#,
    ];
    for route in routes {
        let c = config(route);
        let mut used = std::collections::HashSet::new();
        for key in keys() {
            let want = equal_ch3(&key, "s1", 5);
            used.insert(want);
            assert_eq!(
                c.plan("get", key.as_bytes(), DEFAULT),
                to(0, want),
                "{route}"
            );
        }
        assert_eq!(used.len(), 5, "every child gets keys");
    }
    // The salt matters, and no salt hashes the bare routing key.
    let c = config(r#"{"type": "LoadBalancerRoute", "children": "Pool|A"}"#);
    let moved = keys()
        .filter(|k| equal_ch3(k, "s1", 5) != equal_ch3(k, "", 5))
        .count();
    assert!(moved > 1000, "{moved}");
    for key in keys() {
        let want = to(0, equal_ch3(&key, "", 5));
        assert_eq!(c.plan("get", key.as_bytes(), DEFAULT), want);
    }
    // The routing prefix and what follows |#| are not hashed.
    assert_eq!(
        c.plan("get", b"/r/c1/key:7|#|x", DEFAULT),
        to(0, equal_ch3("key:7", "", 5))
    );
}

/// mcrouter's retries by hand for `key` over 5 children, failover_count 3, salt "s":
/// pick over all; the pick swaps places with the last and is dropped; pick again salted
/// "s2" over 4, then "s1" over 3, mapping back to the children's positions each time.
fn by_hand(key: &str) -> Vec<usize> {
    let mut left = vec![0, 1, 2, 3, 4];
    let first = equal_ch3(key, "s", 5);
    let mut order = vec![left[first]];
    left.swap(first, 4);
    left.pop();
    let second = equal_ch3(key, "s2", 4);
    order.push(left[second]);
    left.swap(second, 3);
    left.pop();
    order.push(left[equal_ch3(key, "s1", 3)]);
    order
}

#[test]
fn weighted_hashing_fails_over_by_mcrouters_rehash_order() {
    let c = config(
        r#"{"type": "LoadBalancerRoute", "children": "Pool|A", "salt": "s",
            "failover_count": 3}"#,
    );
    for key in keys().take(300) {
        let Plan::Failover {
            plans,
            order,
            max_error_tries,
            limit,
            ..
        } = c.plan("get", key.as_bytes(), DEFAULT)
        else {
            panic!("not a failover")
        };
        let want: Vec<Plan> = by_hand(&key).into_iter().map(|i| to(0, i)).collect();
        assert_eq!(plans, want, "{key}");
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!((max_error_tries, limit), (usize::MAX, None));
    }
    // One key worked through: WeightedCh3 over 5 picks 1 for "key:8s", so 4 takes its
    // place; over [0, 4, 2, 3] "key:8s2" picks position 1 (child 4), so 3 takes its place;
    // over [0, 3, 2] "key:8s1" picks position 2 (child 2).
    assert_eq!(equal_ch3("key:8", "s", 5), 1);
    assert_eq!(equal_ch3("key:8", "s2", 4), 1);
    assert_eq!(equal_ch3("key:8", "s1", 3), 2);
    let Plan::Failover { plans, .. } = c.plan("get", b"key:8", DEFAULT) else {
        panic!()
    };
    assert_eq!(plans, vec![to(0, 1), to(0, 4), to(0, 2)]);
    // A count past the children is every child; 0 or 1 is no failover.
    let all = config(r#"{"type": "LoadBalancerRoute", "children": "Pool|B", "failover_count": 9}"#);
    let Plan::Failover { plans, .. } = all.plan("get", b"k", DEFAULT) else {
        panic!()
    };
    assert_eq!(plans.len(), 2);
    // mcrouter keeps the count unsigned: -1 wraps to every child.
    let wrapped =
        config(r#"{"type": "LoadBalancerRoute", "children": "Pool|B", "failover_count": -1}"#);
    assert_eq!(
        wrapped.plan("get", b"k", DEFAULT),
        all.plan("get", b"k", DEFAULT)
    );
    for count in ["0", "1"] {
        let one = config(&format!(
            r#"{{"type": "LoadBalancerRoute", "children": "Pool|A", "failover_count": {count}}}"#
        ));
        assert_eq!(one.plan("get", b"k", DEFAULT), to(0, equal_ch3("k", "", 5)));
    }
}

#[test]
fn weighted_hashing_fails_over_on_every_error_and_only_errors() {
    let c = config(r#"{"type": "LoadBalancerRoute", "children": "Pool|A", "failover_count": 2}"#);
    for op in ["get", "set", "delete", "incr"] {
        let Plan::Failover { errors, .. } = c.plan(op, b"k", DEFAULT) else {
            panic!()
        };
        for result in [
            McResult::Timeout,
            McResult::ConnectTimeout,
            McResult::ConnectError,
            McResult::Tko,
            McResult::RemoteError,
            McResult::LocalError,
            McResult::ClientError,
        ] {
            assert!(result.is_error());
            assert!(errors.iter().any(|e| e == result.name()), "{op} {result:?}");
        }
        for result in [
            McResult::Found,
            McResult::Ok,
            McResult::Exists,
            McResult::NotFound,
            McResult::NotStored,
        ] {
            assert!(
                !errors.iter().any(|e| e == result.name()),
                "{op} {result:?}"
            );
        }
    }
}

#[test]
fn two_random_choices_is_a_uniform_pick_or_the_second_of_two() {
    let c = config(
        r#"{"type": "LoadBalancerRoute", "children": "Pool|A",
            "algorithm": "two-random-choices", "failover_count": 3}"#,
    );
    let want = Plan::Random {
        plans: (0..5).map(|i| to(0, i)).collect(),
    };
    assert_eq!(c.plan("get", b"k", DEFAULT), want);
    assert_eq!(
        c.plan("set", b"other", DEFAULT),
        want,
        "the key does not matter"
    );
    // Two children: mcrouter's pair is (0, 1) without a draw, and equal loads pick 1.
    let two = config(
        r#"{"type": "PoolRoute", "pool": "B",
            "hash": {"hash_func": "LoadBalancer", "algorithm": "two-random-choices"}}"#,
    );
    for key in keys().take(50) {
        assert_eq!(
            two.plan("get", key.as_bytes(), DEFAULT),
            to_pool(&two, "B", 1)
        );
    }
}

#[test]
fn no_child_is_null_and_one_child_is_that_child() {
    let none = config(r#"{"type": "LoadBalancerRoute", "children": []}"#);
    assert_eq!(none.plan("get", b"k", DEFAULT), Plan::Null);
    let one = config(r#"{"type": "LoadBalancerRoute", "children": ["PoolRoute|C"]}"#);
    assert_eq!(one.plan("get", b"k", DEFAULT), to_pool(&one, "C", 0));
    assert!(!one
        .routes
        .iter()
        .any(|r| matches!(r, Route::LoadBalancer(_))));
    // As in mcrouter the settings are not read then.
    config(r#"{"type": "LoadBalancerRoute", "children": "Pool|C", "algorithm": "nope"}"#);
    let pool = config(r#"{"type": "PoolRoute", "pool": "C", "hash": "LoadBalancer"}"#);
    assert_eq!(pool.plan("get", b"k", DEFAULT), to_pool(&pool, "C", 0));
    // An empty HashRoute stays mcrouter's error.
    let empty = config(r#"{"type": "HashRoute", "children": [], "hash_func": "LoadBalancer"}"#);
    assert_eq!(
        empty.plan("get", b"k", DEFAULT),
        Plan::Error("HashRoute with empty children".into())
    );
}

#[test]
fn bad_settings_are_refused_as_mcrouter_words_them() {
    let lb = |fields: &str| {
        refused(&format!(
            r#"{{"type": "LoadBalancerRoute", "children": "Pool|A", {fields}}}"#
        ))
    };
    let e = lb(r#""algorithm": "least-loaded""#);
    assert!(e.contains("Unknown algorithm: least-loaded"), "{e}");
    let e = lb(r#""algorithm": 2"#);
    assert!(e.contains("algorithm is not a string"), "{e}");
    let e = lb(r#""salt": 1"#);
    assert!(e.contains("salt is not a string"), "{e}");
    let e = lb(r#""load_ttl_ms": "100""#);
    assert!(e.contains("load_ttl_ms is not an integer"), "{e}");
    let e = lb(r#""load_ttl_ms": 1.5"#);
    assert!(e.contains("load_ttl_ms is not an integer"), "{e}");
    let e = lb(r#""failover_count": 2.0"#);
    assert!(e.contains("failover_count is not an integer"), "{e}");
    let e = lb(r#""enable_thrift_server_load": 1"#);
    assert!(e.contains("enable_thrift_server_load is not a bool"), "{e}");
    let e = refused(r#"{"type": "LoadBalancerRoute"}"#);
    assert!(e.contains("'children' property is missing"), "{e}");
    let e = refused(r#""LoadBalancerRoute|Pool|A""#);
    assert!(e.contains("LoadBalancerRoute is not an object"), "{e}");
    let e = refused(
        r#"{"type": "PoolRoute", "pool": "A",
            "hash": {"hash_func": "LoadBalancer", "algorithm": "x"}}"#,
    );
    assert!(e.contains("Unknown algorithm: x"), "{e}");
    let e = refused(
        r#"{"type": "HashRoute", "children": "Pool|A", "hash_func": "LoadBalancer",
            "failover_count": "2"}"#,
    );
    assert!(e.contains("failover_count is not an integer"), "{e}");
}
