//! WarmUpRoute's lease-get against scripted servers: pool 0 is cold, pool 1 warm, pool 2
//! cold as planned for the lease-set.

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

fn lease_get(exptime: u32) -> Exec {
    let plan = Plan::WarmUp {
        cold: Box::new(to(0, 0)),
        warm: Box::new(to(1, 0)),
        fill: Box::new(to(2, 0)),
        exptime,
    };
    let req = ReqSpec::LeaseGet { key: b"k".to_vec() };
    Exec::new(vec![req], vec![plan], &mut |_| true)
}

/// Cold answers `cold`; warm holds `k` (flags 7, 55 s left) when `warm_has`.
fn servers(cold: &'static [u8], warm_has: bool) -> impl FnMut(usize, &[u8]) -> Reply {
    move |pool, req| match (pool, req) {
        (0, b"lease-get k\r\n") => r(cold),
        (1, b"mg k s v t f\r\n") if warm_has => r(b"VA 2 s2 t55 f7\r\nhi\r\n"),
        (1, b"mg k s v t f\r\n") => r(b"EN\r\n"),
        (2, _) => r(b"STORED\r\n"),
        other => panic!("unexpected {other:?}"),
    }
}

fn sent(list: &[(usize, &str)]) -> Vec<(usize, String)> {
    list.iter().map(|(p, s)| (*p, s.to_string())).collect()
}

#[test]
fn a_cold_miss_filled_from_warm_spends_colds_token() {
    let (reply, out) = run(
        &mut lease_get(0),
        &mut servers(b"LVALUE k 77 0 0\r\n\r\nEND\r\n", true),
    );
    assert_eq!(reply, b"VALUE k 7 2\r\nhi\r\nEND\r\n");
    assert_eq!(
        out,
        sent(&[
            (0, "lease-get k\r\n"),
            (1, "mg k s v t f\r\n"),
            (2, "lease-set k 77 7 55 2\r\nhi\r\n"),
        ])
    );
    // A configured exptime wins over warm's TTL.
    let (_, out) = run(
        &mut lease_get(9),
        &mut servers(b"LVALUE k 77 0 0\r\n\r\nEND\r\n", true),
    );
    assert_eq!(out[2], (2, "lease-set k 77 7 9 2\r\nhi\r\n".to_string()));
}

#[test]
fn a_warm_miss_answers_with_colds_lease() {
    let cold = b"LVALUE k 77 0 0\r\n\r\nEND\r\n";
    let (reply, out) = run(&mut lease_get(0), &mut servers(cold, false));
    assert_eq!(reply, cold);
    assert_eq!(out.len(), 2, "no lease-set: {out:?}");
}

#[test]
fn a_cold_hit_or_hot_miss_answers_at_once() {
    for cold in [&b"VALUE k 0 1\r\nx\r\nEND\r\n"[..], b"NOT_FOUND_HOT\r\n"] {
        let (reply, out) = run(&mut lease_get(0), &mut servers(cold, true));
        assert_eq!(reply, cold);
        assert_eq!(out, sent(&[(0, "lease-get k\r\n")]));
    }
}

#[test]
fn a_cold_error_still_reads_warm_as_mcrouter() {
    // mcrouter goes on to warm on anything but a hit or hot miss; the lease-set then
    // carries token 0, which cold refuses.
    let (reply, out) = run(
        &mut lease_get(0),
        &mut servers(b"SERVER_ERROR busy\r\n", true),
    );
    assert_eq!(reply, b"VALUE k 7 2\r\nhi\r\nEND\r\n");
    assert_eq!(out[2], (2, "lease-set k 0 7 55 2\r\nhi\r\n".to_string()));
}
