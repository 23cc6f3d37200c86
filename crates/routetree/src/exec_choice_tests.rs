//! RandomRoute's pick and LatencyInjectionRoute's waits, driven by hand.

use super::choice::{TIMER_STEP, TIMER_TOTAL};
use super::*;
use crate::test_support::{get, r, to};

fn random(n: usize) -> Plan {
    Plan::Random {
        plans: (0..n).map(|i| to(0, i)).collect(),
    }
}

/// The server a RandomRoute over `n` sends to when the sampler's coins come up `coins`.
fn picked(n: usize, coins: &[bool]) -> usize {
    let mut coins = coins.iter().copied();
    let mut asked = Vec::new();
    let mut sample = |p: f64| {
        asked.push(p);
        coins.next().unwrap_or(true)
    };
    let mut exec = Exec::new(vec![get("k")], vec![random(n)], &mut sample);
    let mut out = Vec::new();
    exec.start(&mut FailoverState::default(), &mut out);
    let [Action::Send { node }] = out[..] else {
        panic!("{out:?}")
    };
    exec.send(node).index
}

#[test]
fn random_route_sends_to_the_child_the_coins_pick() {
    assert_eq!(picked(3, &[true]), 0);
    assert_eq!(picked(3, &[false, true]), 1);
    assert_eq!(picked(3, &[false, false]), 2, "the last coin is 1");
    // Each child by coins of 1/3, 1/2, 1: uniform.
    let mut asked = Vec::new();
    let mut sample = |p: f64| {
        asked.push(p);
        false
    };
    Exec::new(vec![get("k")], vec![random(3)], &mut sample);
    assert_eq!(asked, vec![1.0 / 3.0, 0.5, 1.0]);
}

fn delay(before_ms: u64, after_ms: u64, total_ms: u64) -> Exec {
    let plan = Plan::Delay {
        plan: Box::new(to(0, 1)),
        before_ms,
        after_ms,
        total_ms,
    };
    Exec::new(vec![get("k")], vec![plan], &mut |_| true)
}

const HIT: &[u8] = b"VALUE k 0 1\r\nv\r\nEND\r\n";

#[test]
fn latency_injection_waits_before_and_after_the_child() {
    let mut limits = FailoverState::default();
    let mut exec = delay(5, 7, 0);
    let mut out = Vec::new();
    exec.start(&mut limits, &mut out);
    assert_eq!(
        out,
        vec![Action::Wait {
            node: 0,
            timer: TIMER_STEP,
            ms: 5
        }]
    );
    assert!(!exec.finished());
    out.clear();
    exec.on_timer(0, TIMER_STEP, &mut limits, &mut out);
    assert_eq!(
        out,
        vec![Action::Send { node: 1 }],
        "sent once the wait is over"
    );
    out.clear();
    exec.on_reply(1, r(HIT), &mut limits, &mut out);
    assert_eq!(
        out,
        vec![Action::Wait {
            node: 0,
            timer: TIMER_STEP,
            ms: 7
        }]
    );
    assert!(exec.replies().is_none(), "the reply waits too");
    out.clear();
    exec.on_timer(0, TIMER_STEP, &mut limits, &mut out);
    assert_eq!(out, vec![Action::Done { part: 0 }]);
    assert_eq!(exec.replies().unwrap()[0].bytes, HIT);
    assert!(exec.finished());
}

#[test]
fn latency_injection_pads_to_the_total() {
    let mut limits = FailoverState::default();
    let mut exec = delay(0, 0, 30);
    let mut out = Vec::new();
    exec.start(&mut limits, &mut out);
    assert_eq!(
        out,
        vec![
            Action::Wait {
                node: 0,
                timer: TIMER_TOTAL,
                ms: 30
            },
            Action::Send { node: 1 },
        ]
    );
    out.clear();
    exec.on_reply(1, r(HIT), &mut limits, &mut out);
    assert!(out.is_empty(), "{out:?}");
    exec.on_timer(0, TIMER_TOTAL, &mut limits, &mut out);
    assert_eq!(out, vec![Action::Done { part: 0 }]);
    assert!(exec.finished());
    // A child slower than the total replies as soon as it is back.
    let mut exec = delay(0, 0, 30);
    out.clear();
    exec.start(&mut limits, &mut out);
    out.clear();
    exec.on_timer(0, TIMER_TOTAL, &mut limits, &mut out);
    assert!(out.is_empty(), "{out:?}");
    exec.on_reply(1, r(HIT), &mut limits, &mut out);
    assert_eq!(out, vec![Action::Done { part: 0 }]);
    assert!(exec.finished());
}
