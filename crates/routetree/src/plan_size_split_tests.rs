//! L1L2SizeSplitRoute's fields and its plan by operation.

use super::*;
use crate::test_support::to;
use crate::{parse_config, Config};
use crate::{Send, Target};

const DEFAULT: &str = "/r/c1/";
const POOLS: &str = r#""pools": {"A": {"servers": ["h:1"]}, "B": {"servers": ["h:2"]}}"#;

fn config(route: &str) -> Config {
    let text = format!(r#"{{{POOLS}, "route": {route}}}"#);
    parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(fields: &str) -> String {
    let route = format!(r#"{{"type": "L1L2SizeSplitRoute", {fields}}}"#);
    let text = format!(r#"{{{POOLS}, "route": {route}}}"#);
    parse_config("t.json", &text).unwrap_err().to_string()
}

const BASE: &str = r#""type": "L1L2SizeSplitRoute", "l1": "Pool|A", "l2": "Pool|B""#;

#[test]
fn gets_and_sets_split_and_everything_else_goes_to_l1() {
    let c = config(&format!(
        r#"{{{BASE}, "threshold": 8, "ttl_threshold": 30}}"#
    ));
    let split = |op| Plan::SizeSplit {
        l1: Box::new(to(0, 0)),
        l2: Box::new(to(1, 0)),
        rule: SizeSplitRule {
            threshold: 8,
            ttl_threshold: 30,
            both_full_set: false,
            failure_ttl: 60,
            retries: 1,
        },
        op,
        levels: SizeSplitLevels {
            l1: Target::Server { pool: 0, index: 0 },
            l2: Target::Server { pool: 1, index: 0 },
            exptime: Vec::new(),
        },
    };
    assert_eq!(c.plan("get", b"k", DEFAULT), split(SizeSplitOp::Get));
    assert_eq!(c.plan("gets", b"k", DEFAULT), split(SizeSplitOp::Get));
    assert_eq!(c.plan("set", b"k", DEFAULT), split(SizeSplitOp::Set));
    assert_eq!(
        c.plan("lease-get", b"k", DEFAULT),
        split(SizeSplitOp::LeaseGet)
    );
    // Each lease-set draws its own suffix for the l2 key.
    let suffix = |plan: Plan| match plan {
        Plan::SizeSplit {
            op: SizeSplitOp::LeaseSet { suffix },
            ..
        } => suffix,
        p => panic!("{p:?}"),
    };
    let lease_set = c.plan("lease-set", b"k", DEFAULT);
    let drawn = suffix(lease_set.clone());
    assert_eq!(lease_set, split(SizeSplitOp::LeaseSet { suffix: drawn }));
    let drawn: std::collections::HashSet<u32> = (0..100)
        .map(|_| suffix(c.plan("lease-set", b"k", DEFAULT)))
        .collect();
    assert!(drawn.len() > 90, "{drawn:?}");
    // As mcrouter: deletes, cas and the rest reach l1 only.
    for op in [
        "delete", "add", "cas", "append", "incr", "touch", "gat", "metaget",
    ] {
        assert_eq!(c.plan(op, b"k", DEFAULT), to(0, 0), "{op}");
    }
}

#[test]
fn a_set_stays_whole_below_the_threshold_or_ttl_threshold_or_with_a_long_key() {
    let rule = SizeSplitRule {
        threshold: 8,
        ttl_threshold: 30,
        both_full_set: false,
        failure_ttl: 60,
        retries: 1,
    };
    assert!(rule.whole_to_l1(b"k", 7, 100));
    // mcrouter splits a value exactly at the threshold.
    assert!(!rule.whole_to_l1(b"k", 8, 100));
    assert!(!rule.whole_to_l1(b"k", 8, 30));
    assert!(rule.whole_to_l1(b"k", 100, 29));
    // mcrouter compares the exptime as a number: 0 (never expires) is below it.
    assert!(rule.whole_to_l1(b"k", 100, 0));
    assert!(!rule.whole_to_l1(&[b'k'; 231], 100, 100));
    assert!(rule.whole_to_l1(&[b'k'; 232], 100, 100));
    let never = SizeSplitRule {
        threshold: 0,
        ..rule
    };
    assert!(never.whole_to_l1(b"k", 1 << 20, 0));
}

#[test]
fn fields_are_checked_as_mcrouter_checks_them() {
    let l1l2 = r#""l1": "Pool|A", "l2": "Pool|B""#;
    assert!(refused(r#""l1": "Pool|A", "threshold": 1"#).contains("no 'l2'"));
    assert!(refused(l1l2).contains("no 'threshold'"));
    let with = |extra: &str| refused(&format!(r#"{l1l2}, "threshold": 8, {extra}"#));
    assert!(with(r#""ttl_threshold": -1"#).contains("ttl_threshold"));
    assert!(with(r#""failure_ttl": 0"#).contains("failure_ttl"));
    assert!(with(r#""both_full_set": 1"#).contains("both_full_set"));
    assert!(with(r#""retries": 0"#).contains("retries"));
    assert!(with(r#""retries": 11"#).contains("retries"));
    assert!(refused(&format!(r#"{l1l2}, "threshold": "8""#)).contains("threshold"));
    assert!(with(r#""retries": "2""#).contains("retries"));
    let full = r#""threshold": 8, "ttl_threshold": 5, "both_full_set": true,
                  "failure_ttl": 9, "retries": 10"#;
    let c = config(&format!("{{{BASE}, {full}}}"));
    let Plan::SizeSplit { rule, .. } = c.plan("set", b"k", DEFAULT) else {
        panic!("not split");
    };
    assert!(rule.both_full_set);
    assert_eq!((rule.failure_ttl, rule.retries), (9, 10));
}

#[test]
fn a_key_learnt_later_is_planned_by_its_own_hash_below_the_route() {
    let pools = r#""pools": {"A": {"servers": ["h:1"]},
                  "B": {"servers": ["h:2", "h:3", "h:4", "h:5", "h:6", "h:7"]}}"#;
    let parse = |route: &str| {
        let text = format!(r#"{{{pools}, "route": {route}}}"#);
        parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
    };
    let c = parse(
        r#"{"type": "L1L2SizeSplitRoute", "l1": "PoolRoute|A", "l2": "PoolRoute|B",
            "threshold": 8}"#,
    );
    let l2_alone = parse(r#""PoolRoute|B""#);
    let Plan::SizeSplit { levels, .. } = c.plan("lease-get", b"/r/c1/k", DEFAULT) else {
        panic!("not split");
    };
    let index = |plan: &Plan| match plan {
        Plan::Send(Send { index, .. }) => *index,
        p => panic!("{p:?}"),
    };
    let mut seen = std::collections::HashSet::new();
    for suffix in 0..40u32 {
        let key = l2_key(b"/r/c1/k", suffix.to_string().as_bytes());
        let deferred = Deferred {
            target: levels.l2,
            key: key.clone(),
            op: "get",
            exptime: Vec::new(),
        };
        let Plan::Rekey { key: sent, plan } = c.plan_deferred(&deferred, 0) else {
            panic!("not rekeyed");
        };
        assert_eq!(sent, key);
        // Where a get of that key through l2's pool goes.
        assert_eq!(index(&plan), index(&l2_alone.plan("get", &key, DEFAULT)));
        seen.insert(index(&plan));
    }
    assert!(seen.len() > 1, "every suffix on one server: {seen:?}");
}
