//! What each route handle does with one request, as mcrouter documents it.

use ring::{PoolHash, RoutingKey};

use super::*;
use crate::parse_config;
use crate::test_support::to;

const DEFAULT: &str = "/r/c1/";

fn config(route: &str) -> Config {
    let text = format!(
        r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]}},
                       "B": {{"servers": ["h:6", "h:7"], "keep_routing_prefix": true}},
                       "E": {{"servers": []}}}},
            "route": {route}}}"#
    );
    parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn index_in(plan: &Plan) -> usize {
    match plan {
        Plan::Send(s) => s.index,
        other => panic!("not a send: {other:?}"),
    }
}

/// The pool a plan sends to, by name (pool ids follow the order pools are first used).
fn pool_name<'c>(c: &'c Config, plan: &Plan) -> &'c str {
    match plan {
        Plan::Send(s) => &c.pools[s.pool].name,
        other => panic!("not a send: {other:?}"),
    }
}

fn ch3(key: &str, n: usize) -> usize {
    PoolHash::Ch3.index(RoutingKey::parse(key.as_bytes()).hashed, n)
}

#[test]
fn pool_route_hashes_the_routing_key_with_ch3() {
    let c = config(r#"{"type": "PoolRoute", "pool": "A", "asynclog": false}"#);
    for i in 0..200 {
        let key = format!("user:{i}");
        assert_eq!(
            c.plan("get", key.as_bytes(), DEFAULT),
            to(0, ch3(&key, 5)),
            "{key}"
        );
        // The routing prefix and anything after |#| do not move the key.
        let dressed = format!("{DEFAULT}{key}|#|extra{i}");
        assert_eq!(
            index_in(&c.plan("get", dressed.as_bytes(), DEFAULT)),
            ch3(&key, 5)
        );
    }
}

#[test]
fn pool_route_hash_choices() {
    let c = config(r#"{"type": "PoolRoute", "pool": "A", "hash": "Crc32"}"#);
    let want = (ring::crc32_hash(b"k") & 0x7fff_ffff) as usize % 5;
    assert_eq!(index_in(&c.plan("get", b"k", DEFAULT)), want);
    let c = config(
        r#"{"type": "PoolRoute", "pool": "A", "hash": {"hash_func": "WeightedCh3", "weights": [1, 0, 1, 0, 1]}}"#,
    );
    for i in 0..500 {
        let index = index_in(&c.plan("get", format!("k{i}").as_bytes(), DEFAULT));
        assert!(index.is_multiple_of(2), "zero-weight server {index} chosen");
    }
    let c = config(r#"{"type": "PoolRoute", "pool": "A", "hash": {"salt": "s1"}}"#);
    assert_eq!(index_in(&c.plan("get", b"key", DEFAULT)), ch3("keys1", 5));
}

#[test]
fn keep_routing_prefix_and_asynclog() {
    let c = config(r#""PoolRoute|B""#);
    let Plan::Send(s) = c.plan("delete", b"k", DEFAULT) else {
        panic!()
    };
    assert!(s.keep_prefix);
    assert_eq!(s.asynclog.as_deref(), Some("B"));
    let Plan::Send(s) = c.plan("set", b"k", DEFAULT) else {
        panic!()
    };
    assert_eq!(s.asynclog, None, "only deletes are logged");
}

#[test]
fn hash_route_picks_one_child() {
    let c = config(
        r#"{"type": "HashRoute", "children": ["PoolRoute|A", "PoolRoute|B", "NullRoute"], "salt": "x"}"#,
    );
    for i in 0..100 {
        let key = format!("k{i}");
        let plan = c.plan("get", key.as_bytes(), DEFAULT);
        match ch3(&format!("{key}x"), 3) {
            0 => assert_eq!(plan, to(0, ch3(&key, 5))),
            1 => assert_eq!(pool_name(&c, &plan), "B"),
            _ => assert_eq!(plan, Plan::Null),
        }
    }
}

#[test]
fn all_routes_send_to_every_child_with_their_policy() {
    for (ty, mode) in [
        ("AllSyncRoute", AllMode::Sync),
        ("AllAsyncRoute", AllMode::Async),
        ("AllInitialRoute", AllMode::Initial),
        ("AllMajorityRoute", AllMode::Majority),
        ("AllFastestRoute", AllMode::Fastest),
    ] {
        let c = config(&format!(r#""{ty}|Pool|A""#));
        let want = Plan::All {
            mode,
            plans: (0..5).map(|i| to(0, i)).collect(),
        };
        assert_eq!(c.plan("set", b"k", DEFAULT), want, "{ty}");
    }
    assert_eq!(
        config(r#""AllSyncRoute|Pool|E""#).plan("get", b"k", DEFAULT),
        Plan::Null
    );
}

#[test]
fn failover_keeps_order_and_picks_errors_by_operation() {
    let c = config(
        r#"{"type": "FailoverRoute", "children": ["PoolRoute|B", "Pool|A"],
            "failover_errors": {"gets": ["timeout"], "updates": ["tko"], "deletes": ["busy"]}}"#,
    );
    for (op, errors) in [
        ("get", "timeout"),
        ("set", "tko"),
        ("incr", "tko"),
        ("delete", "busy"),
    ] {
        let Plan::Failover {
            plans,
            errors: e,
            limit,
            ..
        } = c.plan(op, b"k", DEFAULT)
        else {
            panic!()
        };
        assert_eq!(e, [errors], "{op}");
        assert_eq!(limit, None);
        assert_eq!(plans.len(), 6);
        assert_eq!(pool_name(&c, &plans[0]), "B");
        let a = c.pools.iter().position(|p| p.name == "A").unwrap();
        assert_eq!(plans[1..], (0..5).map(|i| to(a, i)).collect::<Vec<_>>());
    }
}

#[test]
fn failover_with_exptime_caps_the_failover_copies() {
    let c = config(
        r#"{"type": "FailoverWithExptimeRoute", "normal": "PoolRoute|A", "failover": ["PoolRoute|B"], "failover_exptime": 20}"#,
    );
    let Plan::Failover { plans, .. } = c.plan("set", b"k", DEFAULT) else {
        panic!()
    };
    let (Plan::Send(normal), Plan::Send(failover)) = (&plans[0], &plans[1]) else {
        panic!()
    };
    assert_eq!(normal.exptime_for(0), 0);
    assert_eq!(failover.exptime_for(0), 20);
    assert_eq!(failover.exptime_for(5), 5);
    assert_eq!(failover.exptime_for(500), 20);
}

#[test]
fn miss_failover_only_for_gets() {
    let c = config(
        r#"{"type": "MissFailoverRoute", "children": ["PoolRoute|B", "PoolRoute|A"], "return_best_on_error": true}"#,
    );
    let Plan::MissFailover {
        plans,
        return_best_on_error,
    } = c.plan("get", b"k", DEFAULT)
    else {
        panic!()
    };
    assert!(return_best_on_error);
    assert_eq!(plans.len(), 2);
    assert_eq!(pool_name(&c, &c.plan("set", b"k", DEFAULT)), "B");
}

#[test]
fn warm_up_reads_through_writes_cold_and_deletes_both() {
    let c = config(
        r#"{"type": "WarmUpRoute", "cold": "PoolRoute|A", "warm": "PoolRoute|B", "exptime": 9}"#,
    );
    let Plan::WarmUp {
        cold,
        warm,
        exptime,
        ..
    } = c.plan("get", b"k", DEFAULT)
    else {
        panic!()
    };
    assert_eq!((index_in(&cold), exptime), (ch3("k", 5), 9));
    assert_eq!(pool_name(&c, &warm), "B");
    let Plan::All { mode, plans } = c.plan("delete", b"k", DEFAULT) else {
        panic!("deletes go to both")
    };
    assert_eq!(
        mode,
        AllMode::InitialSync,
        "once both answered, cold's reply"
    );
    let names: Vec<&str> = plans.iter().map(|p| pool_name(&c, p)).collect();
    assert_eq!((names, index_in(&plans[0])), (vec!["A", "B"], ch3("k", 5)));
    for op in ["set", "incr", "touch"] {
        let plan = c.plan(op, b"k", DEFAULT);
        assert_eq!(
            (pool_name(&c, &plan), index_in(&plan)),
            ("A", ch3("k", 5)),
            "{op}"
        );
    }
}

#[test]
fn prefix_selector_takes_the_longest_key_prefix() {
    let c = config(
        r#"{"type": "PrefixSelectorRoute", "policies": {"a": "NullRoute", "ab": "ErrorRoute|ab", "abc:": "ErrorRoute|abc"},
            "wildcard": "ErrorRoute|wild"}"#,
    );
    let p = |key: &str| c.plan("get", key.as_bytes(), DEFAULT);
    assert_eq!(p("abc:1"), Plan::Error("abc".into()));
    assert_eq!(p("abd"), Plan::Error("ab".into()));
    assert_eq!(p("a"), Plan::Null);
    assert_eq!(p("zzz"), Plan::Error("wild".into()));
    // Matching looks at the key after its routing prefix.
    assert_eq!(p("/r/c1/abc:1"), Plan::Error("abc".into()));
    let c = config(r#"{"type": "PrefixSelectorRoute", "policies": {"a": "NullRoute"}}"#);
    assert!(matches!(c.plan("get", b"b", DEFAULT), Plan::Error(_)));
}

#[test]
fn operation_selector() {
    let c = config(
        r#"{"type": "OperationSelectorRoute", "operation_policies": {"get": "PoolRoute|A", "delete": "ErrorRoute|no"},
            "default_policy": "NullRoute"}"#,
    );
    assert_eq!(c.plan("get", b"k", DEFAULT), to(0, ch3("k", 5)));
    assert_eq!(c.plan("delete", b"k", DEFAULT), Plan::Error("no".into()));
    assert_eq!(c.plan("set", b"k", DEFAULT), Plan::Null);
    let c = config(
        r#"{"type": "OperationSelectorRoute", "operation_policies": {"get": "ErrorRoute|g"}}"#,
    );
    assert_eq!(
        c.plan("set", b"k", DEFAULT),
        Plan::Null,
        "no policy: the default reply"
    );
}

#[test]
fn modify_exptime_nests() {
    let c = config(
        r#"{"type": "ModifyExptimeRoute", "exptime": 100, "target":
             {"type": "ModifyExptimeRoute", "exptime": 10, "action": "min", "target": "PoolRoute|A"}}"#,
    );
    let Plan::Send(s) = c.plan("set", b"k", DEFAULT) else {
        panic!()
    };
    assert_eq!(
        s.exptime,
        [(ExptimeAction::Set, 100), (ExptimeAction::Min, 10)]
    );
    assert_eq!(s.exptime_for(0), 10);
}

#[test]
fn null_error_and_empty_pools() {
    assert_eq!(
        config(r#""NullRoute""#).plan("get", b"k", DEFAULT),
        Plan::Null
    );
    assert_eq!(
        config(r#""ErrorRoute|down""#).plan("get", b"k", DEFAULT),
        Plan::Error("down".into())
    );
    assert_eq!(
        config(r#"{"type": "ErrorRoute", "response": "r"}"#).plan("get", b"k", DEFAULT),
        Plan::Error("r".into())
    );
    assert!(
        matches!(config(r#""PoolRoute|E""#).plan("get", b"k", DEFAULT), Plan::Error(m) if m.contains("no servers"))
    );
    assert!(matches!(
        config(r#""HashRoute|Pool|E""#).plan("get", b"k", DEFAULT),
        Plan::Error(_)
    ));
}

#[test]
fn shadows_copy_keys_in_range() {
    let c = config(
        r#"{"type": "PoolRoute", "pool": "A", "shadows": [
             {"target": "PoolRoute|B", "index_range": [0, 2], "requests_fraction": 0.5}]}"#,
    );
    let (mut shadowed, mut plain) = (0, 0);
    for i in 0..200 {
        let key = format!("k{i}");
        match c.plan("get", key.as_bytes(), DEFAULT) {
            Plan::Shadowed { main, shadows } => {
                assert!(index_in(&main) < 2);
                assert_eq!(shadows.len(), 1);
                assert_eq!(shadows[0].0, 0.5);
                shadowed += 1;
            }
            Plan::Send(s) => {
                assert!(s.index >= 2);
                plain += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(shadowed > 0 && plain > 0);
    // An empty key fraction range copies nothing.
    let c = config(
        r#"{"type": "PoolRoute", "pool": "A", "shadows": [
             {"target": "PoolRoute|B", "index_range": [0, 5], "key_fraction_range": [0, 0]}]}"#,
    );
    assert!((0..100).all(|i| matches!(
        c.plan("get", format!("k{i}").as_bytes(), DEFAULT),
        Plan::Send(_)
    )));
}

fn aliased() -> Config {
    let text = r#"{"pools": {"A": {"servers": ["h:1"]}, "B": {"servers": ["h:2"]}, "C": {"servers": ["h:3"]}},
        "routes": [{"aliases": ["/r/c1/"], "route": "PoolRoute|A"},
                   {"aliases": ["/r/c2/", "/r/fallback/"], "route": "PoolRoute|B"},
                   {"aliases": ["/x/c1/"], "route": "PoolRoute|C"}]}"#;
    parse_config("t.json", text).unwrap()
}

fn pool_of(plan: &Plan) -> PoolId {
    match plan {
        Plan::Send(s) => s.pool,
        other => panic!("{other:?}"),
    }
}

#[test]
fn routing_prefixes_select_routes() {
    let c = aliased();
    assert_eq!(pool_of(&c.plan("get", b"k", "/r/c1/")), 0);
    assert_eq!(pool_of(&c.plan("get", b"k", "/r/c2/")), 1);
    assert_eq!(pool_of(&c.plan("get", b"/x/c1/k", "/r/c1/")), 2);
    // An unknown cluster goes to its region's fallback cluster, if any.
    assert_eq!(pool_of(&c.plan("get", b"/r/zz/k", "/r/c1/")), 1);
    assert!(matches!(c.plan("get", b"/q/zz/k", "/r/c1/"), Plan::Error(m) if m.contains("/q/zz/")));
    assert!(matches!(c.plan("get", b"k", "/nope/x/"), Plan::Error(_)));
}

#[test]
fn wildcard_prefixes_fan_out_default_first() {
    let c = aliased();
    let Plan::All { mode, plans } = c.plan("delete", b"/*/*/k", "/r/c2/") else {
        panic!()
    };
    assert_eq!(mode, AllMode::Initial);
    // /r/fallback/ is the same route as /r/c2/, so it is sent to once.
    assert_eq!(plans.iter().map(pool_of).collect::<Vec<_>>(), [1, 0, 2]);
    let Plan::All { plans, .. } = c.plan("get", b"/r/*/k", "/r/c1/") else {
        panic!()
    };
    assert_eq!(plans.iter().map(pool_of).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(pool_of(&c.plan("get", b"/x/*/k", "/r/c1/")), 2);
}

#[test]
fn single_route_serves_the_default_prefix_only() {
    let c = config(r#""PoolRoute|A""#);
    assert!(matches!(c.plan("get", b"k", DEFAULT), Plan::Send(_)));
    assert!(matches!(c.plan("get", b"/r/c1/k", DEFAULT), Plan::Send(_)));
    assert!(matches!(
        c.plan("get", b"/other/c/k", DEFAULT),
        Plan::Error(_)
    ));
}

#[test]
fn failover_tries_children_in_order_by_default() {
    let c = config(r#"{"type": "FailoverRoute", "children": "Pool|A"}"#);
    let Plan::Failover {
        order,
        max_error_tries,
        ..
    } = c.plan("get", b"k", DEFAULT)
    else {
        panic!()
    };
    assert_eq!((order, max_error_tries), (vec![0, 1, 2, 3, 4], usize::MAX));
}

#[test]
fn deterministic_order_policy_hashes_the_failover_order() {
    let route = |ignore: bool| {
        config(&format!(
            r#"{{"type": "FailoverRoute", "children": ["PoolRoute|A", "Pool|A"],
                "failover_policy": {{"type": "DeterministicOrderPolicy", "max_tries": 4,
                                     "max_error_tries": 2, "ignore_normal_reply_index": {ignore}}}}}"#
        ))
    };
    let order_of = |c: &Config, key: &str| match c.plan("get", key.as_bytes(), DEFAULT) {
        Plan::Failover {
            plans,
            order,
            max_error_tries,
            ..
        } => {
            assert_eq!((plans.len(), max_error_tries), (6, 2));
            order
        }
        other => panic!("{other:?}"),
    };
    let c = route(false);
    let mut spread = std::collections::HashSet::new();
    for i in 0..50 {
        let key = format!("key{i}");
        let order = order_of(&c, &key);
        assert_eq!(order, order_of(&c, &key), "the same for every request");
        assert_eq!((order.len(), order[0]), (4, 0));
        let distinct: std::collections::HashSet<_> = order.iter().collect();
        assert_eq!(distinct.len(), 4, "{order:?}");
        // The normal route's server (A[j], child j + 1) is not a failover.
        let normal = ch3(&key, 5) + 1;
        assert!(!order.contains(&normal), "{key}: {order:?} has {normal}");
        // Each pick: Ch3 over the 6 children of the key salted "2", "3", ...
        let mut used = vec![0, normal];
        let mut salt = 1;
        for &pick in &order[1..] {
            let expected = loop {
                salt += 1;
                let i = ch3(&format!("{key}{salt}"), 6);
                if !used.contains(&i) {
                    break i;
                }
            };
            assert_eq!(pick, expected, "{key}: {order:?}");
            used.push(pick);
        }
        spread.insert(order[1]);
    }
    assert!(
        spread.len() >= 3,
        "failovers spread over the children: {spread:?}"
    );
    let c = route(true);
    let with_normal = (0..50).any(|i| {
        let key = format!("key{i}");
        order_of(&c, &key).contains(&(ch3(&key, 5) + 1))
    });
    assert!(with_normal, "ignore_normal_reply_index lets it be picked");
}

#[test]
fn error_on_empty_false_makes_an_empty_pool_or_hash_route_a_null_route() {
    let with = |route: &str| {
        let text = format!(
            r#"{{"pools": {{"N": {{"servers": [], "error_on_empty": false}},
                           "E": {{"servers": [], "error_on_empty": true}}}},
                "route": {route}}}"#
        );
        parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(
        with(r#""PoolRoute|N""#).plan("get", b"k", DEFAULT),
        Plan::Null
    );
    assert!(matches!(
        with(r#""PoolRoute|E""#).plan("get", b"k", DEFAULT),
        Plan::Error(_)
    ));
    let hash = |flag: &str| {
        with(&format!(
            r#"{{"type": "HashRoute", "children": [], "error_on_empty": {flag}}}"#
        ))
        .plan("set", b"k", DEFAULT)
    };
    assert_eq!(hash("false"), Plan::Null);
    assert!(matches!(hash("true"), Plan::Error(_)));
}

#[test]
fn warm_up_plans_its_fill_and_warm_read_as_their_own_operations() {
    // As mcrouter: the fill is an add (a lease-set for a lease-get) routed through cold,
    // and warm gets a plain get for gets, gat, gats and lease-get.
    let c = config(
        r#"{"type": "WarmUpRoute",
            "cold": {"type": "OperationSelectorRoute", "default_policy": "PoolRoute|A",
                     "operation_policies": {"add": "PoolRoute|B", "lease-set": "PoolRoute|E"}},
            "warm": {"type": "OperationSelectorRoute", "default_policy": "PoolRoute|A",
                     "operation_policies": {"get": "PoolRoute|B"}}}"#,
    );
    let parts = |op: &str| match c.plan(op, b"k", DEFAULT) {
        Plan::WarmUp {
            cold, warm, fill, ..
        } => (cold, warm, fill),
        other => panic!("{op}: {other:?}"),
    };
    let (cold, warm, fill) = parts("get");
    assert_eq!(
        (
            pool_name(&c, &cold),
            pool_name(&c, &warm),
            pool_name(&c, &fill)
        ),
        ("A", "B", "B")
    );
    let (cold, warm, fill) = parts("lease-get");
    assert_eq!((pool_name(&c, &cold), pool_name(&c, &warm)), ("A", "B"));
    assert_eq!(*fill, Plan::Error("pool E has no servers".into()));
    let (_, warm, fill) = parts("gats");
    assert_eq!((pool_name(&c, &warm), pool_name(&c, &fill)), ("B", "B"));
    let (_, warm, _) = parts("metaget");
    assert_eq!(pool_name(&c, &warm), "A", "metaget goes to warm as it is");
}
