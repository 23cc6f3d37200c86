//! L1L2SizeSplitRoute against scripted servers: pool 0 is l1, pool 1 l2.

use super::super::FailoverState;
use super::*;
use crate::test_support::{get, r, to};
use crate::Target;

/// Pools 0 (l1) and 1 (l2) of one server each, for the plans made once a key is known.
fn levels_config() -> crate::Config {
    let text = r#"{"pools": {"A": {"servers": ["h:1"]}, "B": {"servers": ["h:2"]}},
                   "route": {"type": "L1L2SizeSplitRoute", "l1": "Pool|A", "l2": "Pool|B",
                             "threshold": 8}}"#;
    crate::parse_config("t.json", text).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `exec` to the end, each server answering with `answer(pool, request)`; returns
/// the client's reply and every (pool, request, client already answered) sent, in order.
fn run(
    exec: &mut Exec,
    answer: &mut dyn FnMut(usize, &str) -> Reply,
) -> (String, Vec<(usize, String, bool)>) {
    let config = levels_config();
    let mut limits = FailoverState::default();
    let mut actions = Vec::new();
    exec.start(&mut limits, &mut actions);
    let mut sent = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    loop {
        // As the router does: a plan's sends go out in the same turn, in order.
        let mut i = 0;
        while i < actions.len() {
            let a = actions[i];
            i += 1;
            if let Action::Plan { node } = a {
                exec.on_plan(node, &config, 0, &mut limits, &mut actions);
                continue;
            }
            if let Action::Send { node } | Action::SendCopy { node } = a {
                let s = exec.send(node).clone();
                let mut bytes = Vec::new();
                exec.request(node).write(&s, &mut bytes);
                let text = String::from_utf8_lossy(&bytes).into_owned();
                sent.push((s.pool, text.clone(), exec.parts[0].is_some()));
                queue.push_back((node, s.pool, text));
            }
        }
        actions.clear();
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

fn rule(both_full_set: bool) -> SizeSplitRule {
    SizeSplitRule {
        threshold: 8,
        ttl_threshold: 0,
        both_full_set,
        failure_ttl: 30,
        retries: 1,
    }
}

fn plan_with(op: SizeSplitOp, rule: SizeSplitRule) -> Plan {
    Plan::SizeSplit {
        l1: Box::new(to(0, 0)),
        l2: Box::new(to(1, 0)),
        rule,
        op,
        levels: SizeSplitLevels {
            l1: Target::Server { pool: 0, index: 0 },
            l2: Target::Server { pool: 1, index: 0 },
            exptime: Vec::new(),
        },
    }
}

fn plan(op: SizeSplitOp, both_full_set: bool) -> Plan {
    plan_with(op, rule(both_full_set))
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

fn lease_get() -> ReqSpec {
    ReqSpec::LeaseGet { key: b"k".to_vec() }
}

fn lease_set(value: &str, exptime: i64) -> ReqSpec {
    ReqSpec::LeaseSet {
        key: b"k".to_vec(),
        token: 5,
        flags: 3,
        exptime,
        data: value.as_bytes().to_vec(),
    }
}

fn lease_set_plan(both_full_set: bool) -> Plan {
    plan(SizeSplitOp::LeaseSet { suffix: 4711 }, both_full_set)
}

#[test]
fn lease_get_passes_l1s_hits_and_lease_misses_on() {
    for l1 in [
        "VALUE k 3 2\r\nhi\r\nEND\r\n",
        "LVALUE k 12345 0 0\r\n\r\nEND\r\n",
    ] {
        let mut answer = |pool: usize, _: &str| match pool {
            0 => r(l1.as_bytes()),
            _ => panic!("l2 asked"),
        };
        let (reply, sent) = run(
            &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
            &mut answer,
        );
        assert_eq!(reply, l1);
        assert_eq!(sent, vec![(0, "lease-get k\r\n".into(), false)]);
    }
}

#[test]
fn lease_get_follows_a_sentinel_to_the_l2_key_it_names() {
    let mut answer = |pool: usize, req: &str| match (pool, req) {
        (0, _) => r(b"VALUE k 35 4\r\n4711\r\nEND\r\n"),
        (1, "get k|==|4711\r\n") => r(b"VALUE k|==|4711 3 8\r\n12345678\r\nEND\r\n"),
        _ => panic!("{pool} {req}"),
    };
    let (reply, sent) = run(
        &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
        &mut answer,
    );
    // The client's key, l2's flags and value.
    assert_eq!(reply, "VALUE k 3 8\r\n12345678\r\nEND\r\n");
    assert_eq!(sent.len(), 2);

    // A set's empty sentinel: l2 is asked a plain get of the key itself.
    let mut empty = |pool: usize, req: &str| match (pool, req) {
        (0, _) => r(b"VALUE k 35 0\r\n\r\nEND\r\n"),
        (1, "get k\r\n") => r(b"VALUE k 3 8\r\n12345678\r\nEND\r\n"),
        _ => panic!("{pool} {req}"),
    };
    let (reply, _) = run(
        &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
        &mut empty,
    );
    assert_eq!(reply, "VALUE k 3 8\r\n12345678\r\nEND\r\n");
}

#[test]
fn a_lease_miss_on_a_sentinel_is_a_plain_lease_miss() {
    let mut answer = |pool: usize, _: &str| match pool {
        0 => r(b"LVALUE k 99 35 4\r\n4711\r\nEND\r\n"),
        _ => panic!("l2 asked"),
    };
    let (reply, _) = run(
        &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
        &mut answer,
    );
    assert_eq!(reply, "LVALUE k 99 0 0\r\n\r\nEND\r\n");
}

#[test]
fn a_small_lease_set_goes_to_l1_as_it_is() {
    let (reply, sent) = run(
        &mut one(lease_set("1234567", 60), lease_set_plan(false)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    assert_eq!(
        sent,
        vec![(0, "lease-set k 5 3 60 7\r\n1234567\r\n".into(), false)]
    );
}

#[test]
fn a_large_lease_set_sets_the_suffixed_key_on_l2_then_a_sentinel_naming_it_on_l1() {
    let (reply, sent) = run(
        &mut one(lease_set("12345678", 60), lease_set_plan(false)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    assert_eq!(
        sent,
        vec![
            (1, "set k|==|4711 3 60 8\r\n12345678\r\n".into(), false),
            // The lease's token, the request's exptime, flags plus 0x20, the suffix.
            (0, "lease-set k 5 35 60 4\r\n4711\r\n".into(), false),
        ]
    );
}

#[test]
fn a_large_lease_set_l2_refused_goes_whole_to_l1_for_at_most_failure_ttl() {
    let mut l2_down = |pool: usize, _: &str| match pool {
        1 => r(b"SERVER_ERROR out of memory\r\n"),
        _ => r(b"STORED\r\n"),
    };
    for (exptime, capped) in [(60, 30), (0, 30), (10, 10), (-1, -1)] {
        let (reply, sent) = run(
            &mut one(lease_set("12345678", exptime), lease_set_plan(false)),
            &mut l2_down,
        );
        assert_eq!(reply, "STORED\r\n");
        let whole = format!("lease-set k 5 3 {capped} 8\r\n12345678\r\n");
        assert_eq!(sent[1], (0, whole, false), "exptime {exptime}");
    }
}

#[test]
fn a_large_lease_set_with_both_full_set_goes_to_l1_under_the_suffixed_key_then_l2() {
    let (reply, sent) = run(
        &mut one(lease_set("12345678", 60), lease_set_plan(true)),
        &mut stored,
    );
    assert_eq!(reply, "STORED\r\n");
    assert_eq!(
        sent,
        vec![
            (
                0,
                "lease-set k|==|4711 5 3 60 8\r\n12345678\r\n".into(),
                false
            ),
            (1, "set k|==|4711 3 60 8\r\n12345678\r\n".into(), true),
        ]
    );
}

/// l1 holds a lease-set's sentinel (CAS 41) until a `cas` removes it; l2 has lost the value.
struct LostL2 {
    sentinel: bool,
}

impl LostL2 {
    fn answer(&mut self, pool: usize, req: &str) -> Reply {
        match (pool, req) {
            (0, "cas k 0 -1 0 41\r\n\r\n") => {
                self.sentinel = false;
                r(b"STORED\r\n")
            }
            (0, _) if self.sentinel && req.starts_with("gets") => {
                r(b"VALUE k 35 4 41\r\n4711\r\nEND\r\n")
            }
            (0, _) if self.sentinel => r(b"VALUE k 35 4\r\n4711\r\nEND\r\n"),
            (0, "lease-get k\r\n") => r(b"LVALUE k 777 0 0\r\n\r\nEND\r\n"),
            (0, _) => r(b"END\r\n"),
            (1, "get k|==|4711\r\n" | "gets k|==|4711\r\n") => r(b"END\r\n"),
            _ => panic!("{pool} {req}"),
        }
    }
}

#[test]
fn a_lost_l2_value_removes_the_sentinel_with_a_cas_and_asks_l1_again() {
    let mut l = LostL2 { sentinel: true };
    let (reply, sent) = run(
        &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
        &mut |p, q| l.answer(p, q),
    );
    // Asked again, l1 hands out a lease for the refill.
    assert_eq!(reply, "LVALUE k 777 0 0\r\n\r\nEND\r\n");
    let sent: Vec<_> = sent.into_iter().map(|(p, s, _)| (p, s)).collect();
    assert_eq!(
        sent,
        vec![
            (0, "lease-get k\r\n".into()),
            (1, "get k|==|4711\r\n".into()),
            (0, "gets k\r\n".into()),
            (0, "cas k 0 -1 0 41\r\n\r\n".into()),
            (0, "lease-get k\r\n".into()),
        ]
    );

    let gets = ReqSpec::Get {
        cmd: GetCmd::Gets,
        key: b"k".to_vec(),
    };
    let mut l = LostL2 { sentinel: true };
    let (reply, sent) = run(
        &mut one(gets, plan(SizeSplitOp::Get, false)),
        &mut |p, q| l.answer(p, q),
    );
    assert_eq!(reply, "END\r\n");
    assert_eq!(sent.len(), 5);
    assert_eq!(sent[1].1, "gets k|==|4711\r\n");
}

#[test]
fn a_plain_get_of_a_lost_lease_set_value_removes_the_sentinel_and_answers_an_error() {
    let mut l = LostL2 { sentinel: true };
    let (reply, sent) = run(
        &mut one(get("k"), plan(SizeSplitOp::Get, false)),
        &mut |p, q| l.answer(p, q),
    );
    assert_eq!(reply, "SERVER_ERROR local error\r\n");
    assert!(!l.sentinel);
    assert_eq!(sent.len(), 4, "not asked again: {sent:?}");
}

#[test]
fn retries_bound_how_often_l1_is_asked_again() {
    // The sentinel keeps coming back (another client keeps writing it).
    let mut always = |pool: usize, req: &str| match (pool, req) {
        (0, "cas k 0 -1 0 41\r\n\r\n") => r(b"STORED\r\n"),
        (0, "gets k\r\n") => r(b"VALUE k 35 4 41\r\n4711\r\nEND\r\n"),
        (0, _) => r(b"VALUE k 35 4\r\n4711\r\nEND\r\n"),
        (1, _) => r(b"END\r\n"),
        _ => panic!("{pool} {req}"),
    };
    for retries in [1, 3] {
        let rule = SizeSplitRule {
            retries,
            ..rule(false)
        };
        let (reply, sent) = run(
            &mut one(lease_get(), plan_with(SizeSplitOp::LeaseGet, rule)),
            &mut always,
        );
        assert_eq!(reply, "SERVER_ERROR local error\r\n");
        let count = |what: &str| sent.iter().filter(|(_, s, _)| s.starts_with(what)).count();
        assert_eq!(count("lease-get"), 1 + retries as usize);
        assert_eq!(count("cas"), retries as usize);
    }
}

#[test]
fn a_sentinel_replaced_meanwhile_is_left_alone() {
    let mut replaced = |pool: usize, req: &str| match (pool, req) {
        (0, "gets k\r\n") => r(b"VALUE k 0 3 42\r\nnew\r\nEND\r\n"),
        (0, "lease-get k\r\n") => r(b"VALUE k 35 4\r\n4711\r\nEND\r\n"),
        (1, _) => r(b"END\r\n"),
        _ => panic!("{pool} {req}"),
    };
    let rule = SizeSplitRule {
        retries: 1,
        ..rule(false)
    };
    let (reply, sent) = run(
        &mut one(lease_get(), plan_with(SizeSplitOp::LeaseGet, rule)),
        &mut replaced,
    );
    assert_eq!(reply, "SERVER_ERROR local error\r\n");
    assert!(
        sent.iter().all(|(_, s, _)| !s.starts_with("cas")),
        "{sent:?}"
    );
}

#[test]
fn an_l2_error_removes_the_sentinel_and_answers_the_error() {
    let mut l2_error = |pool: usize, req: &str| match (pool, req) {
        (0, "cas k 0 -1 0 41\r\n\r\n") => r(b"STORED\r\n"),
        (0, "gets k\r\n") => r(b"VALUE k 35 4 41\r\n4711\r\nEND\r\n"),
        (0, _) => r(b"VALUE k 35 4\r\n4711\r\nEND\r\n"),
        (1, _) => r(b"SERVER_ERROR busy\r\n"),
        _ => panic!("{pool} {req}"),
    };
    let (reply, sent) = run(
        &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
        &mut l2_error,
    );
    assert_eq!(reply, "SERVER_ERROR remote error\r\n");
    assert_eq!(sent.len(), 4, "not asked again: {sent:?}");
    assert!(sent[3].1.starts_with("cas"));
}

#[test]
fn a_sentinel_value_that_cannot_be_a_key_is_not_sent_to_l2() {
    for value in ["a b", "x\r\ndelete other", &"9".repeat(250)] {
        let l1 = format!("VALUE k 35 {}\r\n{value}\r\nEND\r\n", value.len());
        let mut answer = |pool: usize, req: &str| match pool {
            0 => r(l1.as_bytes()),
            _ => panic!("l2 asked {req:?}"),
        };
        let (reply, sent) = run(
            &mut one(lease_get(), plan(SizeSplitOp::LeaseGet, false)),
            &mut answer,
        );
        assert!(reply.starts_with("CLIENT_ERROR"), "{reply}");
        assert_eq!(sent.len(), 1);
    }
}

#[test]
fn a_large_lease_sets_sentinel_goes_to_the_failover_child_that_handed_out_the_lease() {
    use crate::lease::{Issued, LeaseBook};
    let failover = Plan::Failover {
        plans: vec![to(0, 0), to(0, 1)],
        order: vec![0, 1],
        least_failures: None,
        max_error_tries: usize::MAX,
        errors: vec!["timeout".into()],
        limit: None,
        route: 9,
    };
    let Plan::SizeSplit {
        l2,
        rule,
        op,
        levels,
        ..
    } = lease_set_plan(false)
    else {
        unreachable!()
    };
    let plan = Plan::SizeSplit {
        l1: Box::new(failover),
        l2,
        rule,
        op,
        levels,
    };
    let book = LeaseBook::default();
    let now = std::time::Instant::now();
    let issued = Issued {
        route: 9,
        key: b"k".to_vec(),
        token: 5,
        child: 1,
        ttl: std::time::Duration::from_secs(10),
    };
    book.record(&issued, now);
    let mut exec = one(lease_set("12345678", 60), plan);
    exec.pin_leases(&book, now);
    let mut to_child = Vec::new();
    let mut answer = |pool: usize, req: &str| {
        to_child.push((pool, req.to_string()));
        r(b"STORED\r\n")
    };
    let (reply, _) = run(&mut exec, &mut answer);
    assert_eq!(reply, "STORED\r\n");
    let sentinel: Vec<_> = (0..exec.nodes.len())
        .filter_map(|n| match &exec.nodes[n].kind {
            Kind::Send(s)
                if exec.nodes[n].done && exec.requests[exec.nodes[n].req].key() == b"k" =>
            {
                Some((s.pool, s.index))
            }
            _ => None,
        })
        .collect();
    assert_eq!(sentinel, vec![(0, 1)], "{to_child:?}");
}
