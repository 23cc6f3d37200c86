//! WarmUpRoute's gets/gat/gats against scripted servers: pool 0 is cold, pool 1 warm.

use super::super::FailoverState;
use super::*;
use crate::test_support::{r, to};

/// Runs `exec` to the end, each server answering with `answer(pool, request)`; returns
/// the client's reply and every (pool, request) sent, in order.
fn run(
    exec: &mut Exec,
    answer: &mut dyn FnMut(usize, &[u8]) -> Reply,
) -> (Vec<u8>, Vec<(usize, String)>) {
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
                sent.push((s.pool, String::from_utf8_lossy(&bytes).into_owned()));
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

fn warm_up(exptime: u32) -> Plan {
    Plan::WarmUp {
        cold: Box::new(to(0, 0)),
        warm: Box::new(to(1, 0)),
        fill: Box::new(to(0, 0)),
        exptime,
    }
}

fn one(cmd: GetCmd, exptime: u32) -> Exec {
    let req = ReqSpec::Get {
        cmd,
        key: b"k".to_vec(),
    };
    Exec::new(vec![req], vec![warm_up(exptime)], &mut |_| true)
}

/// Cold misses until something is added to it; warm holds `k` (flags 7, 55 s left).
fn servers() -> impl FnMut(usize, &[u8]) -> Reply {
    let mut cold_has = false;
    move |pool, req| match (pool, req) {
        (0, b"gets k\r\n") if cold_has => r(b"VALUE k 7 2 42\r\nhi\r\nEND\r\n"),
        (0, b"gat 30 k\r\n" | b"gats 30 k\r\n") if cold_has => {
            r(b"VALUE k 7 2 42\r\nhi\r\nEND\r\n")
        }
        (0, r0) if r0.starts_with(b"add ") => {
            cold_has = true;
            r(b"STORED\r\n")
        }
        (0, _) => r(b"END\r\n"),
        (1, b"mg k s v t f\r\n") => r(b"VA 2 s2 t55 f7\r\nhi\r\n"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_gets_cold_miss_is_filled_from_warm_and_answered_with_colds_cas() {
    let (reply, sent) = run(&mut one(GetCmd::Gets, 0), &mut servers());
    assert_eq!(reply, b"VALUE k 7 2 42\r\nhi\r\nEND\r\n");
    let sent: Vec<(usize, &str)> = sent.iter().map(|(p, s)| (*p, s.as_str())).collect();
    assert_eq!(
        sent,
        vec![
            (0, "gets k\r\n"),
            (1, "mg k s v t f\r\n"),
            (0, "add k 7 55 2\r\nhi\r\n"),
            (0, "gets k\r\n"),
        ]
    );
    let (_, sent) = run(&mut one(GetCmd::Gets, 9), &mut servers());
    assert_eq!(
        sent[2].1, "add k 7 9 2\r\nhi\r\n",
        "a configured exptime wins"
    );
}

#[test]
fn a_gat_fills_cold_with_its_own_exptime_then_touches_cold() {
    for (cmd, name) in [(GetCmd::Gat(30), "gat"), (GetCmd::Gats(30), "gats")] {
        let (reply, sent) = run(&mut one(cmd, 9), &mut servers());
        assert_eq!(reply, b"VALUE k 7 2 42\r\nhi\r\nEND\r\n");
        let sent: Vec<&str> = sent.iter().map(|(_, s)| s.as_str()).collect();
        let again = format!("{name} 30 k\r\n");
        assert_eq!(
            sent,
            vec![
                &again[..],
                "mg k s v t f\r\n",
                "add k 7 30 2\r\nhi\r\n",
                &again[..]
            ]
        );
    }
}

#[test]
fn a_warm_miss_answers_with_colds_miss_and_adds_nothing() {
    let mut answer = |pool: usize, req: &[u8]| match (pool, req) {
        (0, b"gets k\r\n") => r(b"END\r\n"),
        (1, b"mg k s v t f\r\n") => r(b"EN\r\n"),
        other => panic!("unexpected {other:?}"),
    };
    let (reply, sent) = run(&mut one(GetCmd::Gets, 0), &mut answer);
    assert_eq!(reply, b"END\r\n");
    assert_eq!(sent.len(), 2);
}

#[test]
fn a_cold_hit_never_asks_warm() {
    let mut answer = |pool: usize, _: &[u8]| {
        assert_eq!(pool, 0);
        r(b"VALUE k 0 1 5\r\nx\r\nEND\r\n")
    };
    let (reply, sent) = run(&mut one(GetCmd::Gats(30), 0), &mut answer);
    assert_eq!(reply, b"VALUE k 0 1 5\r\nx\r\nEND\r\n");
    assert_eq!(sent.len(), 1);
}
