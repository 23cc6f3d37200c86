//! L1L2SizeSplitRoute against scripted servers: pool 0 is l1, pool 1 l2.

use super::super::FailoverState;
use super::*;
use crate::test_support::{get, r, to};

/// Runs `exec` to the end, each server answering with `answer(pool, request)`; returns
/// the client's reply and every (pool, request, client already answered) sent, in order.
fn run(
    exec: &mut Exec,
    answer: &mut dyn FnMut(usize, &str) -> Reply,
) -> (String, Vec<(usize, String, bool)>) {
    let mut limits = FailoverState::default();
    let mut actions = Vec::new();
    exec.start(&mut limits, &mut actions);
    let mut sent = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    loop {
        for a in actions.drain(..) {
            if let Action::Send { node } | Action::SendCopy { node } = a {
                let s = exec.send(node).clone();
                let mut bytes = Vec::new();
                exec.request(node).write(&s, &mut bytes);
                let text = String::from_utf8_lossy(&bytes).into_owned();
                sent.push((s.pool, text.clone(), exec.parts[0].is_some()));
                queue.push_back((node, s.pool, text));
            }
        }
        let Some((node, pool, text)) = queue.pop_front() else {
            break;
        };
        let reply = answer(pool, &text);
        exec.on_reply(node, reply, &mut limits, &mut actions);
    }
    assert!(exec.finished());
    let reply = exec.parts[0].as_ref().expect("answered").bytes.clone();
    (String::from_utf8_lossy(&reply).into_owned(), sent)
}

fn plan(op: SizeSplitOp, both_full_set: bool) -> Plan {
    Plan::SizeSplit {
        l1: Box::new(to(0, 0)),
        l2: Box::new(to(1, 0)),
        rule: SizeSplitRule {
            threshold: 8,
            ttl_threshold: 0,
            both_full_set,
        },
        op,
    }
}

fn set(value: &str) -> ReqSpec {
    ReqSpec::Store {
        cmd: proto::StoreCmd::Set,
        key: b"k".to_vec(),
        flags: 3,
        exptime: 60,
        data: value.as_bytes().to_vec(),
        cas: 0,
    }
}

fn one(req: ReqSpec, plan: Plan) -> Exec {
    Exec::new(vec![req], vec![plan], &mut |_| true)
}

fn stored(_: usize, _: &str) -> Reply {
    r(b"STORED\r\n")
}

#[test]
fn a_small_set_goes_to_l1_only() {
    let (reply, sent) = run(
        &mut one(set("1234567"), plan(SizeSplitOp::Set, false)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    assert_eq!(sent, vec![(0, "set k 3 60 7\r\n1234567\r\n".into(), false)]);
}

#[test]
fn a_large_set_goes_to_l2_then_leaves_a_sentinel_on_l1() {
    let (reply, sent) = run(
        &mut one(set("12345678"), plan(SizeSplitOp::Set, false)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    assert_eq!(
        sent,
        vec![
            (1, "set k 3 60 8\r\n12345678\r\n".into(), false),
            (0, "set k 35 60 0\r\n\r\n".into(), false),
        ]
    );
}

#[test]
fn a_large_set_l2_did_not_store_leaves_l1_alone() {
    let mut answer = |pool: usize, _: &str| match pool {
        1 => r(b"SERVER_ERROR out of memory\r\n"),
        _ => panic!("l1 was written"),
    };
    let (reply, sent) = run(
        &mut one(set("12345678"), plan(SizeSplitOp::Set, false)),
        &mut answer,
    );
    assert_eq!(reply, "SERVER_ERROR out of memory\r\n");
    assert_eq!(sent.len(), 1);
}

#[test]
fn both_full_set_writes_l1_whole_and_l2_after_the_client_has_its_reply() {
    let (reply, sent) = run(
        &mut one(set("12345678"), plan(SizeSplitOp::Set, true)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    let whole = "set k 3 60 8\r\n12345678\r\n".to_string();
    assert_eq!(sent, vec![(0, whole.clone(), false), (1, whole, true)]);
}

#[test]
fn a_get_follows_a_sentinel_to_l2_and_passes_anything_else_on() {
    let get_plan = || plan(SizeSplitOp::Get, false);
    let mut l1_value = |pool: usize, _: &str| match pool {
        0 => r(b"VALUE k 3 2\r\nhi\r\nEND\r\n"),
        _ => panic!("l2 asked"),
    };
    let (reply, _) = run(&mut one(get("k"), get_plan()), &mut l1_value);
    assert_eq!(reply, "VALUE k 3 2\r\nhi\r\nEND\r\n");

    let mut split = |pool: usize, _: &str| match pool {
        0 => r(b"VALUE k 35 0\r\n\r\nEND\r\n"),
        _ => r(b"VALUE k 3 8\r\n12345678\r\nEND\r\n"),
    };
    let (reply, sent) = run(&mut one(get("k"), get_plan()), &mut split);
    assert_eq!(reply, "VALUE k 3 8\r\n12345678\r\nEND\r\n");
    assert_eq!(
        sent,
        vec![
            (0, "get k\r\n".into(), false),
            (1, "get k\r\n".into(), false)
        ]
    );

    // l2 lost the value: a miss, never the sentinel.
    let mut lost = |pool: usize, _: &str| match pool {
        0 => r(b"VALUE k 35 0\r\n\r\nEND\r\n"),
        _ => r(b"END\r\n"),
    };
    let (reply, _) = run(&mut one(get("k"), get_plan()), &mut lost);
    assert_eq!(reply, "END\r\n");
}

#[test]
fn a_gets_through_a_sentinel_carries_l1s_cas_with_l2s_value() {
    let gets = || ReqSpec::Get {
        cmd: GetCmd::Gets,
        key: b"k".to_vec(),
    };
    let mut split = |pool: usize, _: &str| match pool {
        0 => r(b"VALUE k 35 0 41\r\n\r\nEND\r\n"),
        _ => r(b"VALUE k 3 8 977\r\n12345678\r\nEND\r\n"),
    };
    let (reply, sent) = run(&mut one(gets(), plan(SizeSplitOp::Get, false)), &mut split);
    // A `cas` goes to l1, so the token must be l1's.
    assert_eq!(reply, "VALUE k 3 8 41\r\n12345678\r\nEND\r\n");
    assert_eq!(
        sent,
        vec![
            (0, "gets k\r\n".into(), false),
            (1, "gets k\r\n".into(), false)
        ]
    );
    let mut whole = |pool: usize, _: &str| match pool {
        0 => r(b"VALUE k 3 2 5\r\nhi\r\nEND\r\n"),
        _ => panic!("l2 asked"),
    };
    let (reply, _) = run(&mut one(gets(), plan(SizeSplitOp::Get, false)), &mut whole);
    assert_eq!(reply, "VALUE k 3 2 5\r\nhi\r\nEND\r\n");
}

#[test]
fn a_meta_request_is_refused_rather_than_shown_a_sentinel() {
    let mg = ReqSpec::Meta {
        cmd: *b"mg",
        key: b"k".to_vec(),
        flags: b"v".to_vec(),
        data: None,
        binary: false,
        exptime: None,
    };
    let mut none = |_: usize, _: &str| -> Reply { panic!("sent") };
    let (reply, sent) = run(&mut one(mg, plan(SizeSplitOp::Get, false)), &mut none);
    assert!(reply.starts_with("SERVER_ERROR"), "{reply}");
    assert!(sent.is_empty());
}
