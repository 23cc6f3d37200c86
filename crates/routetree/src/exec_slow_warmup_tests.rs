//! slow_warmup against scripted servers: pool 0 is the warming server, pool 1 the failover.

use super::super::FailoverState;
use super::*;
use crate::request::ReqSpec;
use crate::test_support::{get, r, to};

fn plan(server: (RouteId, usize), get_like: bool) -> Plan {
    Plan::SlowWarmUp {
        target: Box::new(to(0, 0)),
        failover: Box::new(to(1, 0)),
        server,
        settings: SlowWarmUpSettings {
            enable_threshold: 0.7,
            disable_threshold: 0.9,
            start: 0.1,
            step: 1.0,
            min_requests: 10,
        },
        get_like,
    }
}

/// Runs one request; returns the pool it went to.
fn one(limits: &mut FailoverState, req: ReqSpec, plan: Plan, target_hits: bool) -> usize {
    let mut exec = Exec::new(vec![req], vec![plan], &mut |_| true);
    let mut actions = Vec::new();
    exec.start(limits, &mut actions);
    let [Action::Send { node }] = actions[..] else {
        panic!("{actions:?}")
    };
    let pool = exec.send(node).pool;
    let reply = match (pool, target_hits) {
        (0, false) => r(b"END\r\n"),
        _ => r(b"VALUE k 0 1\r\nv\r\nEND\r\n"),
    };
    actions.clear();
    exec.on_reply(node, reply, limits, &mut actions);
    assert!(exec.finished());
    pool
}

#[test]
fn a_cold_server_gets_a_share_of_gets_that_grows_with_its_hit_rate() {
    let mut limits = FailoverState::default();
    let server = (7, 2);
    let to_target = |limits: &mut FailoverState, n: usize, hits: bool| {
        (0..n)
            .filter(|_| one(limits, get("k"), plan(server, true), hits) == 0)
            .count()
    };
    // Until min_requests replies were counted, the hit rate counts as 1: all to target.
    assert_eq!(to_target(&mut limits, 10, false), 10);
    // Ten misses: hit rate 0, warming up, start (10%) of the gets reach the target.
    let share = to_target(&mut limits, 1000, false);
    assert!((50..200).contains(&share), "{share}");
    // Updates always go to the target (and do not count).
    let delete = ReqSpec::Delete { key: b"k".to_vec() };
    assert!((0..20).all(|_| one(&mut limits, delete.clone(), plan(server, false), false) == 0));
    // Another server of the pool has its own counts: not warming up yet.
    assert_eq!(to_target(&mut FailoverState::default(), 5, false), 5);
    assert_eq!(
        (0..5)
            .filter(|_| one(&mut limits, get("k"), plan((7, 3), true), false) == 0)
            .count(),
        5
    );
    // Once the target hits, its share grows until the disable threshold ends warming up.
    to_target(&mut limits, 20_000, true);
    assert_eq!(to_target(&mut limits, 100, true), 100);
}

#[test]
fn slow_warmup_is_read_from_a_pool_route_and_checked() {
    let text = |sw: &str| {
        format!(
            r#"{{"pools": {{"A": {{"servers": ["h:1", "h:2"]}}, "F": {{"servers": ["h:3"]}}}},
                "route": {{"type": "PoolRoute", "pool": "A", "slow_warmup": {sw}}}}}"#
        )
    };
    let c = crate::parse_config(
        "t.json",
        &text(r#"{"failoverTarget": "Pool|F", "settings": {"enable_threshold": 0.5, "disable_threshold": 0.6, "min_requests": 3}}"#),
    )
    .unwrap();
    let Plan::SlowWarmUp {
        server,
        settings,
        get_like,
        failover,
        ..
    } = c.plan("get", b"k", "/a/b/")
    else {
        panic!("not a slow warm-up plan")
    };
    let index = ring::PoolHash::Ch3.index(b"k", 2);
    assert_eq!(server.1, index, "counted per server");
    assert_eq!(
        (settings.min_requests, settings.start, get_like),
        (3, 0.1, true)
    );
    assert_eq!(*failover, to(1, 0));
    let refused = |sw: &str| {
        crate::parse_config("t.json", &text(sw))
            .unwrap_err()
            .to_string()
    };
    let e = refused(r#"{"settings": {}}"#);
    assert!(e.contains("slow_warmup has no 'failoverTarget'"), "{e}");
    let e = refused(r#"{"failoverTarget": "Pool|F", "settings": {"enable_threshold": 0.5}}"#);
    assert!(e.contains("no 'disable_threshold'"), "{e}");
    let e = refused(
        r#"{"failoverTarget": "Pool|F", "settings": {"enable_threshold": 0.9, "disable_threshold": 0.5}}"#,
    );
    assert!(e.contains("enable_threshold must be below"), "{e}");
    let e = refused(
        r#"{"failoverTarget": "Pool|F", "settings": {"enable_threshold": 0.1, "disable_threshold": 0.5, "step": 100}}"#,
    );
    assert!(e.contains("step must be a number in (0, 100)"), "{e}");
}
