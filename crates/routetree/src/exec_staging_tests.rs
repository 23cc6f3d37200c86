//! StagingRoute against scripted servers: pool 0 is warm, pool 1 staging.

use super::super::FailoverState;
use super::*;
use crate::test_support::{get, r, to};

/// Runs `exec` to the end, each server answering with `answer(pool, request)`; returns
/// the client's reply and every (pool, request, client already answered) sent, in order.
fn run(
    exec: &mut Exec,
    answer: &mut dyn FnMut(usize, &[u8]) -> Reply,
) -> (Vec<u8>, Vec<(usize, String, bool)>) {
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
                let answered = exec.parts[0].is_some();
                let text = String::from_utf8_lossy(&bytes).into_owned();
                sent.push((s.pool, text, answered));
                queue.push_back((node, s.pool, bytes));
            }
        }
        let Some((node, pool, bytes)) = queue.pop_front() else {
            break;
        };
        let reply = answer(pool, &bytes);
        exec.on_reply(node, reply, &mut limits, &mut actions);
    }
    assert!(exec.finished());
    let reply = exec.parts[0].as_ref().expect("answered").bytes.clone();
    (reply, sent)
}

fn staging(op: StagingOp) -> Plan {
    Plan::Staging {
        warm: Box::new(to(0, 0)),
        staging: Box::new(to(1, 0)),
        op,
    }
}

fn store(cmd: proto::StoreCmd, cas: u64) -> ReqSpec {
    ReqSpec::Store {
        cmd,
        key: b"k".to_vec(),
        flags: 3,
        exptime: 60,
        data: b"hi".to_vec(),
        cas,
    }
}

fn one(req: ReqSpec, plan: Plan) -> Exec {
    Exec::new(vec![req], vec![plan], &mut |_| true)
}

#[test]
fn a_warm_hit_is_added_to_staging_after_the_client_has_it() {
    let mut answer = |pool: usize, req: &[u8]| match (pool, req) {
        (0, b"get k\r\n") => r(b"VALUE k 7 2\r\nhi\r\nEND\r\n"),
        (0, b"mg k s v t f\r\n") => r(b"VA 2 s2 t55 f7\r\nhi\r\n"),
        (1, _) => r(b"STORED\r\n"),
        other => panic!("unexpected {other:?}"),
    };
    let (reply, sent) = run(&mut one(get("k"), staging(StagingOp::Fill)), &mut answer);
    assert_eq!(reply, b"VALUE k 7 2\r\nhi\r\nEND\r\n");
    assert_eq!(
        sent,
        vec![
            (0, "get k\r\n".into(), false),
            (0, "mg k s v t f\r\n".into(), true),
            (1, "add k 7 55 2\r\nhi\r\n".into(), true),
        ]
    );
    // A warm miss leaves staging alone.
    let (reply, sent) = run(&mut one(get("k"), staging(StagingOp::Fill)), &mut |_, _| {
        r(b"END\r\n")
    });
    assert_eq!(reply, b"END\r\n");
    assert_eq!(sent.len(), 1);
}

#[test]
fn stored_sets_reach_staging_as_plain_sets() {
    let mut stored = |_: usize, _: &[u8]| r(b"STORED\r\n");
    for req in [
        store(proto::StoreCmd::Set, 0),
        store(proto::StoreCmd::Cas, 9),
    ] {
        let (reply, sent) = run(&mut one(req, staging(StagingOp::SetIfStored)), &mut stored);
        assert_eq!(reply, b"STORED\r\n");
        assert_eq!(sent[1], (1, "set k 3 60 2\r\nhi\r\n".into(), true));
    }
    // What warm did not store, staging does not get.
    let (reply, sent) = run(
        &mut one(
            store(proto::StoreCmd::Cas, 9),
            staging(StagingOp::SetIfStored),
        ),
        &mut |_, _| r(b"EXISTS\r\n"),
    );
    assert_eq!(reply, b"EXISTS\r\n");
    assert_eq!(sent.len(), 1);
}

#[test]
fn other_updates_are_copied_unless_warm_fails() {
    let add = || store(proto::StoreCmd::Add, 0);
    // NOT_STORED is an answer, not an error: staging gets the add too.
    let (reply, sent) = run(
        &mut one(add(), staging(StagingOp::CopyUnlessError)),
        &mut |_, _| r(b"NOT_STORED\r\n"),
    );
    assert_eq!(reply, b"NOT_STORED\r\n");
    assert_eq!(sent[1], (1, "add k 3 60 2\r\nhi\r\n".into(), true));
    let (reply, sent) = run(
        &mut one(add(), staging(StagingOp::CopyUnlessError)),
        &mut |_, _| r(b"SERVER_ERROR out of memory\r\n"),
    );
    assert_eq!(reply, b"SERVER_ERROR out of memory\r\n");
    assert_eq!(sent.len(), 1);
}

#[test]
fn a_lease_set_the_new_pool_refused_is_invalidated_on_the_old_one() {
    let lease_set = || ReqSpec::LeaseSet {
        key: b"k".to_vec(),
        token: 77,
        flags: 3,
        exptime: 60,
        data: b"hi".to_vec(),
    };
    let plan = || staging(StagingOp::InvalidateLease);
    let (reply, sent) = run(&mut one(lease_set(), plan()), &mut |_, _| {
        r(b"NOT_STORED\r\n")
    });
    assert_eq!(reply, b"NOT_STORED\r\n");
    assert_eq!(
        sent,
        vec![
            (0, "lease-set k 77 3 60 2\r\nhi\r\n".into(), false),
            (1, "lease-set k 77 0 -1 0\r\n\r\n".into(), true),
        ]
    );
    // Stored on the new pool: nothing more.
    let (reply, sent) = run(&mut one(lease_set(), plan()), &mut |_, _| r(b"STORED\r\n"));
    assert_eq!(reply, b"STORED\r\n");
    assert_eq!(sent.len(), 1);
}
