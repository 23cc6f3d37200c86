//! L1L2SizeSplitRoute's fields and its plan by operation.

use super::*;
use crate::test_support::to;
use crate::{parse_config, Config};

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
        },
        op,
    };
    assert_eq!(c.plan("get", b"k", DEFAULT), split(SizeSplitOp::Get));
    assert_eq!(c.plan("gets", b"k", DEFAULT), split(SizeSplitOp::Get));
    assert_eq!(c.plan("set", b"k", DEFAULT), split(SizeSplitOp::Set));
    // As mcrouter: deletes, cas and the rest reach l1 only.
    for op in [
        "delete", "add", "cas", "append", "incr", "touch", "gat", "metaget",
    ] {
        assert_eq!(c.plan(op, b"k", DEFAULT), to(0, 0), "{op}");
    }
    for op in ["lease-get", "lease-set"] {
        let Plan::Error(m) = c.plan(op, b"k", DEFAULT) else {
            panic!("{op} is served");
        };
        assert!(m.contains(op), "{m}");
    }
}

#[test]
fn a_set_stays_whole_below_the_threshold_or_ttl_threshold_or_with_a_long_key() {
    let rule = SizeSplitRule {
        threshold: 8,
        ttl_threshold: 30,
        both_full_set: false,
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
    // Valid, but for requests the route does not serve: refused by name.
    assert!(with(r#""retries": 10"#).contains("'retries' is not supported"));
    assert!(with(r#""failure_ttl": 9"#).contains("'failure_ttl' is not supported"));
    let full = r#""threshold": 8, "ttl_threshold": 5, "both_full_set": true"#;
    let c = config(&format!("{{{BASE}, {full}}}"));
    let Plan::SizeSplit { rule, .. } = c.plan("set", b"k", DEFAULT) else {
        panic!("not split");
    };
    assert!(rule.both_full_set);
}
