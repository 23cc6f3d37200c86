//! RandomRoute, LatestRoute, HostIdRoute, ModifyKeyRoute and LatencyInjectionRoute: what
//! the config becomes and what each does with one request.

use ring::{PoolHash, RoutingKey};

use super::key_edit::edited_key;
use super::*;
use crate::parse::{host_pick, latest_picks};
use crate::parse_config;
use crate::test_support::to;

const DEFAULT: &str = "/r/c1/";

fn text(route: &str) -> String {
    format!(
        r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2", "h:3", "h:4", "h:5"]}},
                       "B": {{"servers": ["h:6", "h:7"], "keep_routing_prefix": true}}}},
            "route": {route}}}"#
    )
}

fn config(route: &str) -> Config {
    parse_config("t.json", &text(route)).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(route: &str) -> String {
    parse_config("t.json", &text(route))
        .expect_err("refused")
        .to_string()
}

fn ch3(key: &str, n: usize) -> usize {
    PoolHash::Ch3.index(RoutingKey::parse(key.as_bytes()).hashed, n)
}

#[test]
fn random_route_offers_every_child_to_the_executor() {
    let c = config(r#"{"type": "RandomRoute", "children": "Pool|A"}"#);
    let want = Plan::Random {
        plans: (0..5).map(|i| to(0, i)).collect(),
    };
    assert_eq!(c.plan("get", b"k", DEFAULT), want);
    assert_eq!(
        c.plan("set", b"other", DEFAULT),
        want,
        "the key does not matter"
    );
    // One child is that child, none the default reply, as in mcrouter.
    let c = config(r#"{"type": "RandomRoute", "children": ["PoolRoute|A"]}"#);
    assert_eq!(c.plan("get", b"k", DEFAULT), to(0, ch3("k", 5)));
    assert_eq!(
        config(r#""RandomRoute""#).plan("get", b"k", DEFAULT),
        Plan::Null
    );
    assert_eq!(
        config(r#""RandomRoute|Pool|A""#).plan("get", b"k", DEFAULT),
        want
    );
}

#[test]
fn latest_picks_are_distinct_stable_and_follow_the_host() {
    let ones = vec![1.0; 10];
    let picks = latest_picks(42, "", &ones, 3);
    assert_eq!(picks.len(), 3);
    let mut sorted = picks.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 3, "{picks:?}");
    assert_eq!(latest_picks(42, "", &ones, 3), picks, "stable");
    assert_eq!(
        latest_picks(42, "", &ones, 99).len(),
        10,
        "at most every child"
    );
    assert_eq!(latest_picks(42, "", &ones, 0), Vec::<usize>::new());
    // Hosts spread over the children, and a salt moves a host's picks.
    let firsts: std::collections::HashSet<usize> =
        (0..100).map(|h| latest_picks(h, "", &ones, 1)[0]).collect();
    assert!(firsts.len() >= 8, "{firsts:?}");
    let salted = (0..100)
        .filter(|&h| latest_picks(h, "s", &ones, 1) != latest_picks(h, "", &ones, 1))
        .count();
    assert!(salted > 50, "{salted}");
    // A zero weight keeps a child out while others are left.
    let mut weights = vec![1.0; 4];
    weights[2] = 0.0;
    for h in 0..200 {
        assert!(!latest_picks(h, "", &weights, 3).contains(&2), "host {h}");
    }
}

#[test]
fn latest_route_fails_over_among_the_hosts_picks() {
    let c = config(
        r#"{"type": "LatestRoute", "children": "Pool|A", "failover_count": 2,
            "failover_errors": ["timeout"]}"#,
    );
    let picks = latest_picks(host_id(), "", &[1.0; 5], 2);
    let Plan::Failover {
        plans,
        order,
        errors,
        ..
    } = c.plan("get", b"k", DEFAULT)
    else {
        panic!("not a failover")
    };
    assert_eq!(plans, picks.iter().map(|&i| to(0, i)).collect::<Vec<_>>());
    assert_eq!(order, vec![0, 1]);
    assert_eq!(errors, vec!["timeout".to_owned()]);
    // The same every key: the choice is the host's, not the key's.
    assert_eq!(c.plan("get", b"k", DEFAULT), c.plan("get", b"zz", DEFAULT));
    // HashRoute's hash_func "Latest" is the same route; by default 5 children.
    let h = config(
        r#"{"type": "HashRoute", "children": "Pool|A", "hash_func": "Latest",
            "failover_count": 2, "failover_errors": ["timeout"]}"#,
    );
    assert_eq!(h.plan("get", b"k", DEFAULT), c.plan("get", b"k", DEFAULT));
    // Without children it is still a HashRoute: an error, as mcrouter's.
    let empty = config(r#"{"type": "HashRoute", "children": [], "hash_func": "Latest"}"#);
    assert_eq!(
        empty.plan("get", b"k", DEFAULT),
        Plan::Error("HashRoute with empty children".into())
    );
    let Plan::Failover { plans, .. } = config(r#""LatestRoute|Pool|A""#).plan("get", b"k", DEFAULT)
    else {
        panic!()
    };
    assert_eq!(plans.len(), 5);
}

#[test]
fn latest_route_refusals_and_warnings_name_the_field() {
    let e = refused(r#"{"type": "LatestRoute", "children": "Pool|A", "failover_count": "2"}"#);
    assert!(e.contains("failover_count must be an integer"), "{e}");
    let e = refused(r#"{"type": "LatestRoute", "children": "Pool|A", "salt": 1}"#);
    assert!(e.contains("salt must be a string"), "{e}");
    let c =
        config(r#"{"type": "LatestRoute", "children": "Pool|A", "thread_local_failover": true}"#);
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("thread_local_failover")),
        "{:?}",
        c.warnings
    );
    let e = refused(r#"{"type": "PoolRoute", "pool": "A", "hash": "Latest"}"#);
    assert!(e.contains("HashRoute's hash_func only"), "{e}");
}

#[test]
fn host_id_route_takes_the_hosts_child() {
    assert_eq!(
        host_pick(7, "", 5),
        2,
        "the host id modulo the children, as mcrouter"
    );
    assert_ne!(
        (0..50).map(|h| host_pick(h, "s", 5)).collect::<Vec<_>>(),
        (0..50).map(|h| host_pick(h, "", 5)).collect::<Vec<_>>()
    );
    let c = config(r#"{"type": "HostIdRoute", "children": "Pool|A"}"#);
    let want = to(0, host_pick(host_id(), "", 5));
    assert_eq!(c.plan("get", b"k", DEFAULT), want);
    assert_eq!(c.plan("get", b"other", DEFAULT), want);
    assert_eq!(
        config(r#""HostIdRoute""#).plan("get", b"k", DEFAULT),
        Plan::Null
    );
}

fn edit(fields: &str) -> KeyEdit {
    let c = config(&format!(
        r#"{{"type": "ModifyKeyRoute", "target": "NullRoute" {fields}}}"#
    ));
    let Some(Route::ModifyKey { edit, .. }) = c.routes.last() else {
        panic!("{:?}", c.routes)
    };
    edit.clone()
}

fn edited(e: &KeyEdit, key: &str) -> Option<String> {
    edited_key(e, &RoutingKey::parse(key.as_bytes())).map(|k| String::from_utf8(k).unwrap())
}

#[test]
fn modify_key_rewrites_as_mcrouter_does() {
    let e = edit(r#", "ensure_key_prefix": "foo:""#);
    assert_eq!(edited(&e, "bar").as_deref(), Some("foo:bar"));
    assert_eq!(edited(&e, "foo:bar"), None, "already there");
    assert_eq!(edited(&e, "/a/b/bar").as_deref(), Some("/a/b/foo:bar"));
    let e = edit(r#", "ensure_key_prefix": "foo:", "modify_inplace": true"#);
    assert_eq!(edited(&e, "abcdef").as_deref(), Some("foo:ef"));
    assert_eq!(
        edited(&e, "ab").as_deref(),
        Some("foo:ab"),
        "shorter than the prefix"
    );
    let e = edit(r#", "ensure_key_prefix": "new:", "replace_key_prefix": "old:""#);
    assert_eq!(edited(&e, "old:k").as_deref(), Some("new:k"));
    assert_eq!(edited(&e, "k").as_deref(), Some("new:k"));
    let e = edit(r#", "set_routing_prefix": "x/y""#);
    assert_eq!(e.routing_prefix.as_deref(), Some("/x/y/"));
    assert_eq!(edited(&e, "k").as_deref(), Some("/x/y/k"));
    assert_eq!(edited(&e, "/a/b/k").as_deref(), Some("/x/y/k"));
    assert_eq!(edited(&e, "/x/y/k"), None);
    let e = edit(r#", "set_routing_prefix": """#);
    assert_eq!(edited(&e, "/a/b/k").as_deref(), Some("k"));
    let e = edit(r#", "set_key_suffix": ":v2""#);
    assert_eq!(edited(&e, "/a/b/k").as_deref(), Some("/a/b/k:v2"));
    let e = edit(r#", "ensure_key_prefix": "p:", "set_key_suffix": ":s""#);
    assert_eq!(edited(&e, "k").as_deref(), Some("p:k:s"));
    assert_eq!(edited(&e, "p:k").as_deref(), Some("p:k:s"));
}

#[test]
fn modify_key_routes_the_new_key_and_refuses_a_too_long_one() {
    let c =
        config(r#"{"type": "ModifyKeyRoute", "target": "PoolRoute|A", "ensure_key_prefix": "p:"}"#);
    assert_eq!(
        c.plan("get", b"k", DEFAULT),
        Plan::Rekey {
            key: b"p:k".to_vec(),
            plan: Box::new(to(0, ch3("p:k", 5))),
        }
    );
    assert_eq!(c.plan("get", b"p:k", DEFAULT), to(0, ch3("p:k", 5)));
    let long = "k".repeat(249);
    assert_eq!(
        c.plan("get", long.as_bytes(), DEFAULT),
        Plan::Error("ModifyKeyRoute: invalid key: too long".into())
    );
}

#[test]
fn modify_key_refusals_name_the_field() {
    let e = refused(r#"{"type": "ModifyKeyRoute", "ensure_key_prefix": "p"}"#);
    assert!(e.contains("no 'target'"), "{e}");
    let e = refused(
        r#"{"type": "ModifyKeyRoute", "target": "NullRoute", "replace_key_prefix": "a",
            "modify_inplace": true}"#,
    );
    assert!(
        e.contains("cannot be used together") && e.contains("modify_inplace"),
        "{e}"
    );
    let e = refused(
        r#"{"type": "ModifyKeyRoute", "target": "NullRoute", "set_routing_prefix": "/a/"}"#,
    );
    assert!(
        e.contains("set_routing_prefix '/a/' is not a routing prefix"),
        "{e}"
    );
    let e =
        refused(r#"{"type": "ModifyKeyRoute", "target": "NullRoute", "ensure_key_prefix": "a b"}"#);
    assert!(
        e.contains("ensure_key_prefix 'a b' is not valid in a key"),
        "{e}"
    );
    let e = refused(r#"{"type": "ModifyKeyRoute", "target": "NullRoute", "set_key_suffix": 3}"#);
    assert!(e.contains("set_key_suffix must be a string"), "{e}");
}

#[test]
fn latency_injection_wraps_its_child() {
    let c = config(
        r#"{"type": "LatencyInjectionRoute", "child": "PoolRoute|A",
            "before_latency_ms": 5, "total_latency_ms": 20}"#,
    );
    assert_eq!(
        c.plan("get", b"k", DEFAULT),
        Plan::Delay {
            plan: Box::new(to(0, ch3("k", 5))),
            before_ms: 5,
            after_ms: 0,
            total_ms: 20,
        }
    );
    // No latency at all: the child itself, as mcrouter does.
    let c = config(
        r#"{"type": "LatencyInjectionRoute", "child": "PoolRoute|A", "after_latency_ms": 0}"#,
    );
    assert_eq!(c.plan("get", b"k", DEFAULT), to(0, ch3("k", 5)));
    let e = refused(r#"{"type": "LatencyInjectionRoute", "child": "NullRoute"}"#);
    assert!(e.contains("needs 'before_latency_ms'"), "{e}");
    let e = refused(
        r#"{"type": "LatencyInjectionRoute", "child": "NullRoute", "after_latency_ms": -1}"#,
    );
    assert!(e.contains("after_latency_ms must be an integer"), "{e}");
    let e = refused(r#"{"type": "LatencyInjectionRoute", "before_latency_ms": 1}"#);
    assert!(e.contains("no 'child'"), "{e}");
    let e = refused(
        r#"{"type": "LatencyInjectionRoute", "child": "NullRoute", "request_payload_latency": true}"#,
    );
    assert!(
        e.contains("request_payload_latency is not supported"),
        "{e}"
    );
}
