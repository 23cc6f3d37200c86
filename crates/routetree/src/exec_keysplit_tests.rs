//! KeySplitRoute's replicas and L1L2CacheRoute against scripted servers.

use super::super::FailoverState;
use super::*;
use crate::test_support::{get, r, to};

/// Runs `exec` to the end, each server answering with `answer(pool, request)`; returns
/// the client's reply and every (pool, request) sent, in order.
fn run(
    exec: &mut Exec,
    limits: &mut FailoverState,
    answer: &mut dyn FnMut(usize, &[u8]) -> Reply,
) -> (Vec<u8>, Vec<(usize, String)>) {
    let mut actions = Vec::new();
    exec.start(limits, &mut actions);
    let mut sent = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    loop {
        for a in actions.drain(..) {
            if let Action::Send { node } | Action::SendCopy { node } = a {
                let s = exec.send(node).clone();
                let mut bytes = Vec::new();
                exec.request(node).write(&s, &mut bytes);
                sent.push((s.pool, String::from_utf8_lossy(&bytes).into_owned()));
                queue.push_back((node, s.pool, bytes));
            }
        }
        let Some((node, pool, bytes)) = queue.pop_front() else {
            break;
        };
        // As the worker does: the reply carries the key of the request it answers.
        let reply = answer(pool, &bytes);
        exec.on_reply(node, reply, limits, &mut actions);
    }
    assert!(exec.finished());
    let reply = exec.parts[0].as_ref().expect("answered").bytes.clone();
    (reply, sent)
}

/// Replica plans for key `k` through pools 0, 1, 2 (pool i holds replica i).
fn replicas() -> Vec<Plan> {
    (0..3)
        .map(|i| match i {
            0 => to(0, 0),
            _ => Plan::Rekey {
                key: format!("k::{i}").into_bytes(),
                plan: Box::new(to(i, 0)),
            },
        })
        .collect()
}

/// A sample that picks replica `want` of `n` with build_key_split's coins.
fn picking(want: usize, n: usize) -> impl FnMut(f64) -> bool {
    let mut i = 0;
    move |p| {
        assert!((p - 1.0 / (n - i) as f64).abs() < 1e-9);
        i += 1;
        i - 1 == want
    }
}

#[test]
fn a_get_reads_one_replica_and_answers_with_the_clients_key() {
    let plan = Plan::KeySplit {
        replicas: replicas(),
        fanout: false,
        pick: None,
    };
    let mut exec = Exec::new(vec![get("k")], vec![plan], &mut picking(2, 3));
    let mut answer = |_: usize, _: &[u8]| r(b"VALUE k::2 5 1\r\nx\r\nEND\r\n");
    let (reply, sent) = run(&mut exec, &mut FailoverState::default(), &mut answer);
    assert_eq!(sent, vec![(2, "get k::2\r\n".to_owned())]);
    assert_eq!(reply, b"VALUE k 5 1\r\nx\r\nEND\r\n");
}

#[test]
fn a_pinned_replica_is_used_without_drawing() {
    let plan = Plan::KeySplit {
        replicas: replicas(),
        fanout: false,
        pick: Some(2),
    };
    let mut exec = Exec::new(vec![get("k")], vec![plan], &mut |_| panic!("no draw"));
    let (_, sent) = run(&mut exec, &mut FailoverState::default(), &mut |_, _| {
        r(b"END\r\n")
    });
    assert_eq!(sent, vec![(2, "get k::2\r\n".to_owned())]);
}

#[test]
fn replicas_are_picked_uniformly() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut seen = [0usize; 3];
    for _ in 0..3000 {
        let plan = Plan::KeySplit {
            replicas: replicas(),
            fanout: false,
            pick: None,
        };
        let mut sample = |p: f64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            ((rng >> 11) as f64 / (1u64 << 53) as f64) < p
        };
        let mut exec = Exec::new(vec![get("k")], vec![plan], &mut sample);
        let (_, sent) = run(&mut exec, &mut FailoverState::default(), &mut |_, _| {
            r(b"END\r\n")
        });
        seen[sent[0].0] += 1;
    }
    assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
}

#[test]
fn a_fanout_writes_every_replica_and_answers_with_the_picked_one() {
    let plan = Plan::KeySplit {
        replicas: replicas(),
        fanout: true,
        pick: Some(1),
    };
    let del = ReqSpec::Delete { key: b"k".to_vec() };
    let mut exec = Exec::new(vec![del], vec![plan], &mut |_| panic!("the host's replica"));
    let mut answer = |pool: usize, _: &[u8]| match pool {
        1 => r(b"DELETED\r\n"),
        _ => r(b"NOT_FOUND\r\n"),
    };
    let (reply, sent) = run(&mut exec, &mut FailoverState::default(), &mut answer);
    let sent: Vec<&str> = sent.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(sent, ["delete k::1\r\n", "delete k\r\n", "delete k::2\r\n"]);
    assert_eq!(reply, b"DELETED\r\n");
}

#[test]
fn first_hit_takes_the_first_hit_or_the_last_reply() {
    let plan = || Plan::All {
        mode: AllMode::FirstHit,
        plans: replicas(),
    };
    let mut exec = Exec::new(vec![get("k")], vec![plan()], &mut |_| true);
    let mut answer = |pool: usize, _: &[u8]| match pool {
        1 => r(b"VALUE k::1 0 1\r\ny\r\nEND\r\n"),
        _ => r(b"END\r\n"),
    };
    let (reply, sent) = run(&mut exec, &mut FailoverState::default(), &mut answer);
    assert_eq!(sent.len(), 3);
    assert_eq!(reply, b"VALUE k 0 1\r\ny\r\nEND\r\n");
    let mut exec = Exec::new(vec![get("k")], vec![plan()], &mut |_| true);
    let mut answer = |pool: usize, _: &[u8]| match pool {
        2 => r(b"SERVER_ERROR down\r\n"),
        _ => r(b"END\r\n"),
    };
    let (reply, _) = run(&mut exec, &mut FailoverState::default(), &mut answer);
    assert_eq!(reply, b"SERVER_ERROR down\r\n", "the last reply");
}

fn l1l2(period: usize) -> Plan {
    Plan::L1L2 {
        l1: Box::new(to(0, 0)),
        l2: Box::new(to(1, 0)),
        upgrading_l1_exptime: 10,
        ncache_exptime: 60,
        ncache_update_period: period,
        route: 7,
    }
}

fn l1l2_get(
    plan: Plan,
    limits: &mut FailoverState,
    answer: &mut dyn FnMut(usize, &[u8]) -> Reply,
) -> (Vec<u8>, Vec<(usize, String)>) {
    let mut exec = Exec::new(vec![get("k")], vec![plan], &mut |_| true);
    run(&mut exec, limits, answer)
}

#[test]
fn an_l1_miss_reads_l2_and_adds_the_item_to_l1_with_the_short_exptime() {
    let mut limits = FailoverState::default();
    let mut answer = |pool: usize, req: &[u8]| match (pool, req) {
        (0, b"get k\r\n") => r(b"END\r\n"),
        (1, b"get k\r\n") => r(b"VALUE k 7 2\r\nhi\r\nEND\r\n"),
        (0, _) => r(b"STORED\r\n"),
        other => panic!("unexpected {other:?}"),
    };
    let (reply, sent) = l1l2_get(l1l2(0), &mut limits, &mut answer);
    assert_eq!(reply, b"VALUE k 7 2\r\nhi\r\nEND\r\n");
    let want = [
        (0, "get k\r\n"),
        (1, "get k\r\n"),
        (0, "add k 7 10 2\r\nhi\r\n"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|(p, s)| (*p, s.to_string())).collect();
    assert_eq!(sent, want);
    // An l1 hit never asks l2; an l1 error does.
    let (_, sent) = l1l2_get(l1l2(0), &mut limits, &mut |_, _| {
        r(b"VALUE k 0 1\r\nx\r\nEND\r\n")
    });
    assert_eq!(sent.len(), 1);
    let (reply, sent) = l1l2_get(l1l2(0), &mut limits, &mut |pool, _| match pool {
        0 => r(b"SERVER_ERROR busy\r\n"),
        _ => r(b"END\r\n"),
    });
    assert_eq!(reply, b"END\r\n");
    assert_eq!(
        sent.len(),
        2,
        "no negative entry without ncacheUpdatePeriod"
    );
}

#[test]
fn an_l2_miss_leaves_a_negative_entry_that_reads_as_a_miss() {
    let mut limits = FailoverState::default();
    let mut answer = |pool: usize, req: &[u8]| match (pool, req) {
        (_, b"get k\r\n") => r(b"END\r\n"),
        (0, _) => r(b"STORED\r\n"),
        other => panic!("unexpected {other:?}"),
    };
    let (reply, sent) = l1l2_get(l1l2(3), &mut limits, &mut answer);
    assert_eq!(reply, b"END\r\n");
    assert_eq!(
        sent[2],
        (0, "add k 65536 60 6\r\nncache".to_owned() + "\r\n")
    );
    // A negative entry in l1: a miss, and every third one refreshes l1 from l2.
    let negative = || r(b"VALUE k 65536 6\r\nncache\r\nEND\r\n");
    let mut l2_value = r(b"END\r\n");
    for round in 1..=6 {
        let (reply, sent) = l1l2_get(l1l2(3), &mut limits, &mut |pool, req| match (pool, req) {
            (0, b"get k\r\n") => negative(),
            (1, b"get k\r\n") => l2_value.clone(),
            _ => r(b"STORED\r\n"),
        });
        assert_eq!(reply, b"END\r\n", "round {round}");
        if round % 3 == 0 {
            let refresh = &sent[1..];
            assert_eq!(refresh[0], (1, "get k\r\n".to_owned()));
            if round == 3 {
                assert_eq!(refresh[1], (0, "set k 65536 60 6\r\nncache\r\n".to_owned()));
            } else {
                assert_eq!(refresh[1], (0, "set k 3 10 2\r\nok\r\n".to_owned()));
            }
            l2_value = r(b"VALUE k 3 2\r\nok\r\nEND\r\n");
        } else {
            assert_eq!(sent.len(), 1, "round {round}");
        }
    }
}

#[test]
fn items_are_read_from_classic_and_meta_replies() {
    assert_eq!(
        item(b"VALUE k 7 2 99\r\nhi\r\nEND\r\n"),
        Some((7, &b"hi"[..]))
    );
    assert_eq!(item(b"VA 2 t5 f9\r\nhi\r\n"), Some((9, &b"hi"[..])));
    assert_eq!(item(b"VA 2 t5\r\nhi\r\n"), None, "flags unknown");
    assert_eq!(item(b"END\r\n"), None);
    assert_eq!(item(b"VALUE k 7 5\r\nhi\r\n"), None, "short");
}
