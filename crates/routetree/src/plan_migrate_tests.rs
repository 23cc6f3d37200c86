//! MigrateRoute by time and StagingRoute by operation, without sockets or a clock.

use ring::spooky;

use super::*;
use crate::test_support::to;
use crate::{parse_config, Config};

const DEFAULT: &str = "/r/c1/";
const START: i64 = 1_000_000;

fn config(route: &str) -> Config {
    let text = format!(
        r#"{{"pools": {{"A": {{"servers": ["h:1"]}}, "B": {{"servers": ["h:2"]}}}},
            "route": {route}}}"#
    );
    parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn migrate(interval: i64) -> Config {
    config(&format!(
        r#"{{"type": "MigrateRoute", "from": "Pool|A", "to": "Pool|B",
             "start_time": {START}, "interval": {interval}}}"#
    ))
}

#[test]
fn migrate_moves_deletes_through_both_and_other_requests_by_key_hash() {
    let c = migrate(100);
    let (a, b) = (to(0, 0), to(1, 0));
    let both = Plan::All {
        mode: AllMode::Sync,
        plans: vec![a.clone(), b.clone()],
    };
    let at = |op, key: &str, now| c.plan_at(op, key.as_bytes(), DEFAULT, now);
    assert_eq!(at("delete", "k", START - 1), a);
    assert_eq!(at("delete", "k", START), both);
    assert_eq!(at("delete", "k", START + 199), both);
    assert_eq!(at("delete", "k", START + 200), b);
    for i in 0..50 {
        let key = format!("user:{i}");
        let switch = START + 100 + i64::from(spooky::hash32(key.as_bytes(), 0)) % 100;
        for op in ["get", "set", "incr"] {
            assert_eq!(at(op, &key, START), a, "{op} {key}");
            assert_eq!(at(op, &key, switch - 1), a, "{op} {key}");
            assert_eq!(at(op, &key, switch), b, "{op} {key}");
        }
        // The routing prefix does not move the switch.
        assert_eq!(at("get", &format!("{DEFAULT}{key}"), switch), b);
    }
}

#[test]
fn a_lease_set_just_after_the_switch_invalidates_the_old_pools_token_on_failure() {
    let c = migrate(100);
    let (a, b) = (to(0, 0), to(1, 0));
    let key = "user:7";
    let switch = START + 100 + i64::from(spooky::hash32(key.as_bytes(), 0)) % 100;
    let at = |op, now| c.plan_at(op, key.as_bytes(), DEFAULT, now);
    let invalidating = Plan::Staging {
        warm: Box::new(b.clone()),
        staging: Box::new(a.clone()),
        op: StagingOp::InvalidateLease,
    };
    assert_eq!(at("lease-set", switch - 1), a);
    assert_eq!(at("lease-set", switch), invalidating);
    assert_eq!(at("lease-set", switch + 9), invalidating);
    assert_eq!(at("lease-set", switch + 10), b);
    // Only lease-sets: a plain set has no token to give back.
    assert_eq!(at("set", switch), b);
}

#[test]
fn migrate_fields_are_checked() {
    let refused = |route: &str| {
        let text = format!(r#"{{"pools": {{"A": {{"servers": ["h:1"]}}}}, "route": {route}}}"#);
        parse_config("t.json", &text).unwrap_err().to_string()
    };
    let e = refused(r#"{"type": "MigrateRoute", "from": "Pool|A", "to": "Pool|A"}"#);
    assert!(e.contains("no 'start_time'"), "{e}");
    let e = refused(
        r#"{"type": "MigrateRoute", "from": "Pool|A", "to": "Pool|A",
            "start_time": "soon"}"#,
    );
    assert!(e.contains("start_time must be an integer"), "{e}");
    let e = refused(r#"{"type": "MigrateRoute", "to": "Pool|A", "start_time": 1}"#);
    assert!(e.contains("MigrateRoute has no 'from'"), "{e}");
    let e = refused(
        r#"{"type": "MigrateRoute", "from": "Pool|A", "to": "Pool|A",
            "start_time": 1, "interval": 0}"#,
    );
    assert!(e.contains("interval must be an integer in 1..="), "{e}");
    // interval defaults to an hour.
    let c = config(
        r#"{"type": "MigrateRoute", "from": "Pool|A", "to": "Pool|B",
            "start_time": 50}"#,
    );
    assert_eq!(c.plan_at("delete", b"k", DEFAULT, 50 + 7199), {
        Plan::All {
            mode: AllMode::Sync,
            plans: vec![to(0, 0), to(1, 0)],
        }
    });
    assert_eq!(c.plan_at("delete", b"k", DEFAULT, 50 + 7200), to(1, 0));
}

#[test]
fn staging_reads_and_writes_warm_and_brings_staging_along() {
    let c = config(r#"{"type": "StagingRoute", "warm": "Pool|A", "staging": "Pool|B"}"#);
    let staged = |op| Plan::Staging {
        warm: Box::new(to(0, 0)),
        staging: Box::new(to(1, 0)),
        op,
    };
    let plan = |op| c.plan(op, b"k", DEFAULT);
    assert_eq!(plan("get"), staged(StagingOp::Fill));
    assert_eq!(plan("lease-get"), staged(StagingOp::Fill));
    assert_eq!(plan("gets"), to(0, 0));
    for op in ["set", "lease-set", "cas"] {
        assert_eq!(plan(op), staged(StagingOp::SetIfStored), "{op}");
    }
    for op in ["add", "replace", "append", "incr", "touch", "gat"] {
        assert_eq!(plan(op), staged(StagingOp::CopyUnlessError), "{op}");
    }
    assert_eq!(
        plan("delete"),
        Plan::All {
            mode: AllMode::Sync,
            plans: vec![to(0, 0), to(1, 0)],
        }
    );
    let e = parse_config(
        "t.json",
        r#"{"pools": {"A": {"servers": ["h:1"]}},
            "route": {"type": "StagingRoute", "warm": "Pool|A"}}"#,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("StagingRoute has no 'staging'"),
        "{e}"
    );
}
