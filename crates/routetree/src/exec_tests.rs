//! The executor against scripted servers: each (pool, index) answers with a fixed reply,
//! and every request it got is recorded.

use super::*;
use crate::test_support::{get, r, to};
use crate::{AllMode, ExptimeAction, FailoverLimit, Plan, Send};

fn set(key: &str, exptime: i64) -> ReqSpec {
    ReqSpec::Store {
        cmd: proto::StoreCmd::Set,
        key: key.as_bytes().to_vec(),
        flags: 0,
        exptime,
        data: b"v".to_vec(),
        cas: 0,
    }
}

/// Scripted servers: `answer(pool, index, request bytes)` gives the reply. Replies are
/// given back in the order requests were sent (`delay_first` holds the first one back
/// until the end, to see who answers before whom).
struct Fleet<F: FnMut(usize, usize, &[u8]) -> Reply> {
    answer: F,
    sent: Vec<(usize, usize, Vec<u8>)>,
    limits: FailoverState,
}

impl<F: FnMut(usize, usize, &[u8]) -> Reply> Fleet<F> {
    fn new(answer: F) -> Self {
        Fleet {
            answer,
            sent: Vec::new(),
            limits: FailoverState::default(),
        }
    }

    /// Runs to the end; returns the parts' replies (as bytes) in the order they were done.
    fn run(&mut self, exec: &mut Exec) -> Vec<(usize, Vec<u8>)> {
        let mut actions = Vec::new();
        exec.start(&mut self.limits, &mut actions);
        let mut done = Vec::new();
        let mut queue = std::collections::VecDeque::new();
        let mut timers = std::collections::VecDeque::new();
        loop {
            for a in actions.drain(..) {
                match a {
                    Action::Send { node } | Action::SendCopy { node } => {
                        let s = exec.send(node).clone();
                        let mut bytes = Vec::new();
                        exec.request(node).write(&s, &mut bytes);
                        self.sent.push((s.pool, s.index, bytes.clone()));
                        queue.push_back((node, s, bytes));
                    }
                    Action::Done { part } => {
                        done.push((part, exec.parts[part].as_ref().unwrap().bytes.clone()))
                    }
                    // Waits are over once every reply is in.
                    Action::Wait { node, timer, .. } => timers.push_back((node, timer)),
                    Action::Plan { .. } => unreachable!("no deferred plans here"),
                }
            }
            let Some((node, s, bytes)) = queue.pop_front() else {
                match timers.pop_front() {
                    Some((node, timer)) => {
                        exec.on_timer(node, timer, &mut self.limits, &mut actions);
                        continue;
                    }
                    None => break,
                }
            };
            let reply = (self.answer)(s.pool, s.index, &bytes);
            exec.on_reply(node, reply, &mut self.limits, &mut actions);
        }
        assert!(exec.finished());
        done
    }
}

fn exec(req: ReqSpec, plan: Plan) -> Exec {
    Exec::new(vec![req], vec![plan], &mut |_| true)
}

#[test]
fn send_and_null_and_error() {
    let mut fleet = Fleet::new(|_, _, _| r(b"STORED\r\n"));
    assert_eq!(
        fleet.run(&mut exec(set("k", 0), to(0, 1))),
        vec![(0, b"STORED\r\n".to_vec())]
    );
    assert_eq!(fleet.sent, vec![(0, 1, b"set k 0 0 1\r\nv\r\n".to_vec())]);
    assert_eq!(
        fleet.run(&mut exec(get("k"), Plan::Null)),
        vec![(0, b"END\r\n".to_vec())]
    );
    assert_eq!(
        fleet.run(&mut exec(set("k", 0), Plan::Null)),
        vec![(0, b"NOT_STORED\r\n".to_vec())]
    );
    assert_eq!(
        fleet.run(&mut exec(get("k"), Plan::Error("no way".into()))),
        vec![(0, b"SERVER_ERROR no way\r\n".to_vec())]
    );
    assert_eq!(fleet.sent.len(), 1, "Null and Error send nothing");
}

#[test]
fn all_modes_reply_as_mcrouter_documents() {
    let plans = |mode| Plan::All {
        mode,
        plans: vec![to(0, 0), to(1, 0), to(2, 0)],
    };
    // Server 1 is down; the others store.
    let answer = |p: usize, _: usize, _: &[u8]| {
        if p == 1 {
            Reply::error(McResult::ConnectError)
        } else {
            r(b"STORED\r\n")
        }
    };
    let mut fleet = Fleet::new(answer);
    let sync = fleet.run(&mut exec(set("k", 0), plans(AllMode::Sync)));
    assert_eq!(
        sync,
        vec![(0, b"SERVER_ERROR connection error\r\n".to_vec())]
    );
    assert_eq!(fleet.sent.len(), 3, "every child gets the write");
    let asynchronous = fleet.run(&mut exec(set("k", 0), plans(AllMode::Async)));
    assert_eq!(asynchronous, vec![(0, b"NOT_STORED\r\n".to_vec())]);
    assert_eq!(fleet.sent.len(), 6, "and in the background for AllAsync");
    let majority = fleet.run(&mut exec(set("k", 0), plans(AllMode::Majority)));
    assert_eq!(majority, vec![(0, b"STORED\r\n".to_vec())]);
    let initial = fleet.run(&mut exec(set("k", 0), plans(AllMode::Initial)));
    assert_eq!(initial, vec![(0, b"STORED\r\n".to_vec())]);
    assert_eq!(fleet.sent.len(), 12);
    // AllFastest: the first non-error; all errors: the last error.
    let fastest = Plan::All {
        mode: AllMode::Fastest,
        plans: vec![to(1, 0), to(0, 0)],
    };
    assert_eq!(
        fleet.run(&mut exec(set("k", 0), fastest)),
        vec![(0, b"STORED\r\n".to_vec())]
    );
    let all_down = Plan::All {
        mode: AllMode::Fastest,
        plans: vec![to(1, 0), to(1, 1)],
    };
    assert_eq!(
        fleet.run(&mut exec(set("k", 0), all_down)),
        vec![(0, b"SERVER_ERROR connection error\r\n".to_vec())]
    );
}

#[test]
fn majority_fails_when_most_are_down() {
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            r(b"STORED\r\n")
        } else {
            Reply::error(McResult::Tko)
        }
    });
    let plan = Plan::All {
        mode: AllMode::Majority,
        plans: vec![to(0, 0), to(1, 0), to(2, 0)],
    };
    assert_eq!(
        fleet.run(&mut exec(set("k", 0), plan)),
        vec![(0, b"SERVER_ERROR unavailable\r\n".to_vec())]
    );
}

#[test]
fn failover_moves_on_only_on_listed_errors() {
    let failover = |errors: &[&str]| Plan::Failover {
        plans: vec![to(0, 0), to(1, 0), to(2, 0)],
        order: (0..3).collect(),
        least_failures: None,
        max_error_tries: usize::MAX,
        errors: errors.iter().map(|e| e.to_string()).collect(),
        limit: None,
        route: 0,
    };
    let answer = |p: usize, _: usize, _: &[u8]| match p {
        0 => Reply::error(McResult::Timeout),
        1 => r(b"SERVER_ERROR busy\r\n"),
        _ => r(b"STORED\r\n"),
    };
    let mut fleet = Fleet::new(answer);
    let all = fleet.run(&mut exec(
        set("k", 0),
        failover(&["timeout", "remote_error"]),
    ));
    assert_eq!(all, vec![(0, b"STORED\r\n".to_vec())]);
    assert_eq!(fleet.sent.len(), 3);
    let only_timeouts = fleet.run(&mut exec(set("k", 0), failover(&["timeout"])));
    assert_eq!(only_timeouts, vec![(0, b"SERVER_ERROR busy\r\n".to_vec())]);
    assert_eq!(fleet.sent.len(), 5, "the third is not tried");
    // A miss is not an error: no failover.
    let mut misses = Fleet::new(|_, _, _| r(b"END\r\n"));
    misses.run(&mut exec(get("k"), failover(&["timeout"])));
    assert_eq!(misses.sent.len(), 1);
}

#[test]
fn failover_with_exptime_caps_the_gutter() {
    // What routetree makes of FailoverWithExptimeRoute: the failover child carries Min.
    let gutter = Plan::Send(Send {
        pool: 1,
        index: 0,
        keep_prefix: false,
        exptime: vec![(ExptimeAction::Min, 10)],
        asynclog: None,
    });
    let plan = Plan::Failover {
        plans: vec![to(0, 0), gutter],
        order: (0..2).collect(),
        least_failures: None,
        max_error_tries: usize::MAX,
        errors: vec!["connect_error".into()],
        limit: None,
        route: 0,
    };
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            Reply::error(McResult::ConnectError)
        } else {
            r(b"STORED\r\n")
        }
    });
    fleet.run(&mut exec(set("k", 100), plan));
    assert_eq!(fleet.sent[0].2, b"set k 0 100 1\r\nv\r\n");
    assert_eq!(fleet.sent[1].2, b"set k 0 10 1\r\nv\r\n");
}

#[test]
fn miss_failover_stops_at_the_first_hit() {
    let plan = |best| Plan::MissFailover {
        plans: vec![to(0, 0), to(1, 0), to(2, 0)],
        return_best_on_error: best,
    };
    let mut fleet = Fleet::new(|p, _, _| match p {
        0 => r(b"END\r\n"),
        1 => r(b"VALUE k 0 1\r\nx\r\nEND\r\n"),
        _ => panic!("not asked"),
    });
    assert_eq!(
        fleet.run(&mut exec(get("k"), plan(false))),
        vec![(0, b"VALUE k 0 1\r\nx\r\nEND\r\n".to_vec())]
    );
    let mut errors = Fleet::new(|p, _, _| match p {
        1 => r(b"END\r\n"),
        _ => Reply::error(McResult::Timeout),
    });
    assert_eq!(
        errors.run(&mut exec(get("k"), plan(false))),
        vec![(0, b"SERVER_ERROR timeout\r\n".to_vec())],
        "the last reply"
    );
    assert_eq!(
        errors.run(&mut exec(get("k"), plan(true))),
        vec![(0, b"END\r\n".to_vec())],
        "the best reply"
    );
}

#[test]
fn warm_up_fills_cold_with_the_remaining_ttl() {
    let plan = |exptime| Plan::WarmUp {
        cold: Box::new(to(0, 0)),
        warm: Box::new(to(1, 0)),
        fill: Box::new(to(0, 0)),
        exptime,
    };
    let answer = |p: usize, _: usize, req: &[u8]| match (p, req) {
        (0, b"get k\r\n") => r(b"END\r\n"),
        (1, b"get k\r\n") => r(b"VALUE k 7 2\r\nhi\r\nEND\r\n"),
        (1, b"mg k s v t f\r\n") => r(b"VA 2 s2 t55 f7\r\nhi\r\n"),
        (0, _) => r(b"STORED\r\n"),
        other => panic!("unexpected {other:?}"),
    };
    let mut fleet = Fleet::new(answer);
    assert_eq!(
        fleet.run(&mut exec(get("k"), plan(0))),
        vec![(0, b"VALUE k 7 2\r\nhi\r\nEND\r\n".to_vec())]
    );
    let sent: Vec<&[u8]> = fleet.sent.iter().map(|s| &s.2[..]).collect();
    assert_eq!(
        sent,
        vec![
            &b"get k\r\n"[..],
            b"get k\r\n",
            b"mg k s v t f\r\n",
            b"add k 7 55 2\r\nhi\r\n"
        ]
    );
    fleet.sent.clear();
    fleet.run(&mut exec(get("k"), plan(9)));
    assert_eq!(
        fleet.sent[3].2, b"add k 7 9 2\r\nhi\r\n",
        "a configured exptime wins"
    );
    // A cold hit never asks warm.
    let mut hot = Fleet::new(|p, _, _| {
        assert_eq!(p, 0);
        r(b"VALUE k 0 1\r\nx\r\nEND\r\n")
    });
    hot.run(&mut exec(get("k"), plan(0)));
    assert_eq!(hot.sent.len(), 1);
}

#[test]
fn shadows_are_sent_and_ignored() {
    let plan = Plan::Shadowed {
        main: Box::new(to(0, 0)),
        shadows: vec![(1.0, to(1, 0)), (0.5, to(2, 0))],
    };
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            r(b"STORED\r\n")
        } else {
            Reply::error(McResult::ConnectError)
        }
    });
    let mut sampled = Exec::new(vec![set("k", 0)], vec![plan], &mut |f| f >= 1.0);
    assert_eq!(fleet.run(&mut sampled), vec![(0, b"STORED\r\n".to_vec())]);
    let pools: Vec<usize> = fleet.sent.iter().map(|s| s.0).collect();
    assert_eq!(pools, vec![0, 1], "the 50% shadow was not sampled");
}

#[test]
fn shadow_copies_go_out_after_the_main_reply() {
    let plan = Plan::Shadowed {
        main: Box::new(to(0, 0)),
        shadows: vec![(1.0, to(1, 0))],
    };
    let mut e = Exec::new(vec![get("k")], vec![plan], &mut |_| true);
    let mut limits = FailoverState::default();
    let mut actions = Vec::new();
    e.start(&mut limits, &mut actions);
    let sends: Vec<usize> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { node } => Some(e.send(*node).pool),
            _ => None,
        })
        .collect();
    assert_eq!(sends, vec![0], "only the main child is sent at first");
    let Action::Send { node } = actions[0] else {
        unreachable!()
    };
    let mut after = Vec::new();
    e.on_reply(node, r(b"END\r\n"), &mut limits, &mut after);
    assert!(
        matches!(after[0], Action::Done { .. }),
        "the client is answered first"
    );
    assert!(
        matches!(after[1], Action::SendCopy { node } if e.send(node).pool == 1),
        "then the copy goes to the shadow, after the turn's replies"
    );
    assert!(!e.finished(), "the copy is still out");
}

#[test]
fn parts_answer_independently() {
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            r(b"VALUE a 0 1\r\n1\r\nEND\r\n")
        } else {
            r(b"END\r\n")
        }
    });
    let mut e = Exec::new(
        vec![get("a"), get("b")],
        vec![to(0, 0), to(1, 0)],
        &mut |_| true,
    );
    let done = fleet.run(&mut e);
    assert_eq!(done.len(), 2);
    let mut out = Vec::new();
    let replies: Vec<Reply> = e.replies().unwrap().into_iter().cloned().collect();
    reply::merge_gets(&replies, &mut out);
    assert_eq!(out, b"VALUE a 0 1\r\n1\r\nEND\r\n");
}

#[test]
fn failover_limit_is_a_token_bucket_per_route() {
    let plan = |route, rate| Plan::Failover {
        plans: vec![to(0, 0), to(1, 0)],
        order: (0..2).collect(),
        least_failures: None,
        max_error_tries: usize::MAX,
        errors: vec!["tko".into()],
        limit: Some(FailoverLimit { rate, burst: 2.0 }),
        route,
    };
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            Reply::error(McResult::Tko)
        } else {
            r(b"STORED\r\n")
        }
    });
    let mut replies = Vec::new();
    for _ in 0..4 {
        replies.push(fleet.run(&mut exec(set("k", 0), plan(7, 0.0)))[0].1.clone());
    }
    let stored = b"STORED\r\n".to_vec();
    let down = b"SERVER_ERROR unavailable\r\n".to_vec();
    assert_eq!(
        replies,
        [stored.clone(), stored.clone(), down.clone(), down]
    );
    // Another route has its own bucket; a rate refills it.
    assert_eq!(fleet.run(&mut exec(set("k", 0), plan(8, 0.0)))[0].1, stored);
    for _ in 0..3 {
        assert_eq!(fleet.run(&mut exec(set("k", 0), plan(9, 1.0)))[0].1, stored);
    }
}

#[test]
fn least_failures_policy_asks_children_with_fewer_errors_in_a_row_first() {
    let plan = || Plan::Failover {
        plans: (0..4).map(|p| to(p, 0)).collect(),
        order: (0..4).collect(),
        least_failures: Some(3),
        max_error_tries: usize::MAX,
        errors: vec!["tko".into()],
        limit: None,
        route: 11,
    };
    // Pools 0 and 1 are down, 2 and 3 up.
    let mut fleet = Fleet::new(|p, _, _| {
        if p < 2 {
            Reply::error(McResult::Tko)
        } else {
            r(b"STORED\r\n")
        }
    });
    let asked = |fleet: &mut Fleet<_>| {
        fleet.sent.clear();
        let reply = fleet.run(&mut exec(set("k", 0), plan()))[0].1.clone();
        assert_eq!(reply, b"STORED\r\n");
        fleet.sent.iter().map(|s| s.0).collect::<Vec<_>>()
    };
    assert_eq!(asked(&mut fleet), [0, 1, 2], "no errors yet: config order");
    // Child 1 failed once, 2 answered: 2 and 3 come before 1, and max_tries leaves 1 out.
    assert_eq!(asked(&mut fleet), [0, 2]);
    assert_eq!(
        asked(&mut fleet),
        [0, 2],
        "the first child is always asked first"
    );
}

/// A FailoverRoute over two servers (route id 5), as a lease pairing sees it.
fn failover_pair() -> Plan {
    Plan::Failover {
        plans: vec![to(0, 0), to(1, 0)],
        order: (0..2).collect(),
        least_failures: None,
        max_error_tries: usize::MAX,
        errors: vec!["connect_error".into(), "tko".into()],
        limit: None,
        route: 5,
    }
}

fn lease_set(key: &str, token: u64) -> ReqSpec {
    ReqSpec::LeaseSet {
        key: key.as_bytes().to_vec(),
        token,
        flags: 0,
        exptime: 0,
        data: b"v".to_vec(),
    }
}

fn meta(cmd: &[u8; 2], key: &str, flags: &str, data: Option<&[u8]>) -> ReqSpec {
    ReqSpec::Meta {
        cmd: *cmd,
        key: key.as_bytes().to_vec(),
        flags: flags.as_bytes().to_vec(),
        data: data.map(<[u8]>::to_vec),
        binary: false,
        exptime: None,
    }
}

/// Runs `req` through the failover pair with the book's pins, then books what it handed out.
fn run_leased<F: FnMut(usize, usize, &[u8]) -> Reply>(
    fleet: &mut Fleet<F>,
    book: &crate::lease::LeaseBook,
    req: ReqSpec,
) -> Vec<u8> {
    let now = std::time::Instant::now();
    let mut e = exec(req, failover_pair());
    e.pin_leases(book, now);
    let reply = fleet.run(&mut e).remove(0).1;
    for lease in e.take_issued() {
        book.record(&lease, now);
    }
    reply
}

#[test]
fn lease_set_goes_to_the_child_that_issued_the_token() {
    let book = crate::lease::LeaseBook::default();
    let primary_up = std::cell::Cell::new(false);
    let mut fleet = Fleet::new(|p, _, req: &[u8]| match (p, primary_up.get()) {
        (0, false) => Reply::error(McResult::ConnectError),
        (_, _) if req.starts_with(b"lease-get") => r(b"LVALUE k 4242 0 0\r\n\r\nEND\r\n"),
        _ => r(b"STORED\r\n"),
    });
    // The primary is down: the backup hands out the lease.
    let got = run_leased(&mut fleet, &book, ReqSpec::LeaseGet { key: b"k".to_vec() });
    assert_eq!(got, b"LVALUE k 4242 0 0\r\n\r\nEND\r\n");
    // The primary is back: the lease-set still goes to the backup, and only there.
    primary_up.set(true);
    fleet.sent.clear();
    assert_eq!(
        run_leased(&mut fleet, &book, lease_set("k", 4242)),
        b"STORED\r\n"
    );
    assert_eq!(
        fleet.sent,
        vec![(1, 0, b"lease-set k 4242 0 0 1\r\nv\r\n".to_vec())]
    );
    // Another token (or key) is routed as usual: the primary.
    fleet.sent.clear();
    run_leased(&mut fleet, &book, lease_set("k", 4243));
    run_leased(&mut fleet, &book, lease_set("j", 4242));
    let pools: Vec<usize> = fleet.sent.iter().map(|s| s.0).collect();
    assert_eq!(pools, vec![0, 0]);
}

#[test]
fn lease_set_does_not_fail_over_from_the_issuer() {
    let book = crate::lease::LeaseBook::default();
    let primary_up = std::cell::Cell::new(true);
    let mut fleet = Fleet::new(|p, _, _: &[u8]| match (p, primary_up.get()) {
        (0, false) => Reply::error(McResult::ConnectError),
        _ => r(b"VA 0 c77 W\r\n\r\n"),
    });
    // The primary wins the lease for an mg, then fails before the ms.
    run_leased(&mut fleet, &book, meta(b"mg", "k", "v c N30", None));
    primary_up.set(false);
    fleet.sent.clear();
    let ms = meta(b"ms", "k", "T30 C77", Some(b"v"));
    assert_eq!(
        run_leased(&mut fleet, &book, ms),
        b"SERVER_ERROR connection error\r\n",
        "the backup never issued token 77"
    );
    assert_eq!(
        fleet.sent,
        vec![(0, 0, b"ms k 1 T30 C77\r\nv\r\n".to_vec())]
    );
    // An ms without a token fails over as any update does.
    fleet.sent.clear();
    run_leased(&mut fleet, &book, meta(b"ms", "k", "T30", Some(b"v")));
    assert_eq!(fleet.sent.len(), 2);
}

#[test]
fn only_winning_meta_gets_book_a_lease() {
    let book = crate::lease::LeaseBook::default();
    let mut fleet = Fleet::new(|p, _, _: &[u8]| match p {
        0 => Reply::error(McResult::Tko),
        _ => r(b"VA 0 c77 Z\r\n\r\n"),
    });
    // Z: someone else holds the lease; c77 is no lease of this client's.
    run_leased(&mut fleet, &book, meta(b"mg", "k", "v c N30", None));
    let now = std::time::Instant::now();
    assert_eq!(book.child(5, b"k", 77, now), None);
}

#[test]
fn initial_sync_waits_for_all_and_answers_with_the_first() {
    // WarmUpRoute's deletes: cold and warm both get it, cold's reply once warm answered.
    let plan = Plan::All {
        mode: AllMode::InitialSync,
        plans: vec![to(0, 0), to(1, 0)],
    };
    let mut e = exec(ReqSpec::Delete { key: b"k".to_vec() }, plan);
    let mut limits = FailoverState::default();
    let mut out = Vec::new();
    e.start(&mut limits, &mut out);
    let nodes: Vec<usize> = out
        .iter()
        .map(|a| match a {
            Action::Send { node } => *node,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(nodes.len(), 2, "both get the delete");
    out.clear();
    e.on_reply(nodes[0], r(b"DELETED\r\n"), &mut limits, &mut out);
    assert!(out.is_empty(), "no reply before warm answered");
    e.on_reply(nodes[1], r(b"NOT_FOUND\r\n"), &mut limits, &mut out);
    assert_eq!(out, vec![Action::Done { part: 0 }]);
    assert_eq!(e.replies().unwrap()[0].bytes, b"DELETED\r\n");
    // In whichever order they answer.
    let mut e = exec(
        ReqSpec::Delete { key: b"k".to_vec() },
        Plan::All {
            mode: AllMode::InitialSync,
            plans: vec![to(0, 0), to(1, 0)],
        },
    );
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            r(b"NOT_FOUND\r\n")
        } else {
            Reply::error(McResult::Timeout)
        }
    });
    assert_eq!(fleet.run(&mut e), vec![(0, b"NOT_FOUND\r\n".to_vec())]);
}

#[test]
fn failover_follows_the_policy_order_and_error_budget() {
    let plan = |order: Vec<usize>, max_error_tries| Plan::Failover {
        plans: vec![to(0, 0), to(1, 0), to(2, 0), to(3, 0)],
        order,
        least_failures: None,
        max_error_tries,
        errors: vec!["timeout".into(), "tko".into()],
        limit: None,
        route: 0,
    };
    // 0 times out, 3 is TKO'd, 1 answers; 2 is not in the order.
    let answer = |p: usize, _: usize, _: &[u8]| match p {
        0 => Reply::error(McResult::Timeout),
        3 => Reply::error(McResult::Tko),
        1 => r(b"STORED\r\n"),
        _ => panic!("not in the order"),
    };
    let mut fleet = Fleet::new(answer);
    let got = fleet.run(&mut exec(set("k", 0), plan(vec![0, 3, 1], 2)));
    assert_eq!(got, vec![(0, b"STORED\r\n".to_vec())]);
    let pools: Vec<usize> = fleet.sent.iter().map(|s| s.0).collect();
    assert_eq!(pools, vec![0, 3, 1], "a TKO is not an error try");
    // One error try allowed: the first timeout is the reply.
    fleet.sent.clear();
    let got = fleet.run(&mut exec(set("k", 0), plan(vec![0, 3, 1], 1)));
    assert_eq!(got, vec![(0, b"SERVER_ERROR timeout\r\n".to_vec())]);
    assert_eq!(fleet.sent.len(), 1);
    // The order ends: the last error is the reply.
    fleet.sent.clear();
    let got = fleet.run(&mut exec(set("k", 0), plan(vec![0, 3], 9)));
    assert_eq!(got, vec![(0, b"SERVER_ERROR unavailable\r\n".to_vec())]);
}

/// A config with one server per pool, routed by `route`.
fn rate_config(route: &str) -> crate::Config {
    let text = format!(
        r#"{{"pools": {{"A": {{"servers": ["127.0.0.1:5000"]}},
                       "B": {{"servers": ["127.0.0.1:6000"]}}}},
             "route": {route}}}"#
    );
    crate::parse_config("t.json", &text).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `req` through `config`'s plan at `now`; the reply bytes.
fn run_at<F: FnMut(usize, usize, &[u8]) -> Reply>(
    fleet: &mut Fleet<F>,
    config: &crate::Config,
    req: ReqSpec,
    now: Instant,
) -> Vec<u8> {
    let plan = config.plan(req.operation(), req.key(), crate::DEFAULT_ROUTE_PREFIX);
    fleet.limits.set_now(now);
    fleet.run(&mut exec(req, plan))[0].1.clone()
}

#[test]
fn rate_limit_route_passes_a_burst_then_the_rate_and_answers_the_default_reply_past_it() {
    let config = rate_config(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A",
            "rates": {"gets_rate": 2, "gets_burst": 3, "sets_rate": 1}}"#,
    );
    let mut fleet = Fleet::new(|_, _, req: &[u8]| {
        if req.starts_with(b"get") {
            r(b"VALUE k 0 1\r\nv\r\nEND\r\n")
        } else {
            r(b"STORED\r\n")
        }
    });
    let t0 = Instant::now();
    let hit = b"VALUE k 0 1\r\nv\r\nEND\r\n".to_vec();
    // The bucket starts full: a burst of 3 gets pass, the 4th is over the rate.
    for _ in 0..3 {
        assert_eq!(run_at(&mut fleet, &config, get("k"), t0), hit);
    }
    assert_eq!(run_at(&mut fleet, &config, get("k"), t0), b"END\r\n");
    assert_eq!(fleet.sent.len(), 3, "a request over the rate is not sent");
    // 2 a second: after half a second one more passes, then none.
    let later = t0 + std::time::Duration::from_millis(500);
    assert_eq!(run_at(&mut fleet, &config, get("k"), later), hit);
    assert_eq!(run_at(&mut fleet, &config, get("k"), later), b"END\r\n");
    // Sets have their own bucket (burst = rate = 1): NOT_STORED past it.
    assert_eq!(
        run_at(&mut fleet, &config, set("k", 0), later),
        b"STORED\r\n"
    );
    assert_eq!(
        run_at(&mut fleet, &config, set("k", 0), later),
        b"NOT_STORED\r\n"
    );
    // Deletes and arithmetic have no rate here: never limited.
    for _ in 0..5 {
        run_at(
            &mut fleet,
            &config,
            ReqSpec::Delete { key: b"k".to_vec() },
            later,
        );
    }
    assert_eq!(fleet.sent.len(), 5 + 5);
    // A long pause refills to the burst, not beyond.
    let much_later = t0 + std::time::Duration::from_secs(60);
    for _ in 0..3 {
        assert_eq!(run_at(&mut fleet, &config, get("k"), much_later), hit);
    }
    assert_eq!(
        run_at(&mut fleet, &config, get("k"), much_later),
        b"END\r\n"
    );
}

#[test]
fn rate_limit_route_sends_requests_over_the_rate_to_its_fallback() {
    let config = rate_config(
        r#"{"type": "RateLimitRoute", "target": "PoolRoute|A", "fallback": "PoolRoute|B",
            "rates": {"deletes_rate": 1}}"#,
    );
    let mut fleet = Fleet::new(|p, _, _| {
        if p == 0 {
            r(b"DELETED\r\n")
        } else {
            r(b"NOT_FOUND\r\n")
        }
    });
    let t0 = Instant::now();
    let del = || ReqSpec::Delete { key: b"k".to_vec() };
    assert_eq!(run_at(&mut fleet, &config, del(), t0), b"DELETED\r\n");
    assert_eq!(run_at(&mut fleet, &config, del(), t0), b"NOT_FOUND\r\n");
    let pools: Vec<usize> = fleet.sent.iter().map(|s| s.0).collect();
    assert_eq!(pools, [0, 1]);
}

#[test]
fn pool_route_rates_limit_that_pool_route() {
    let config = rate_config(
        r#"{"type": "PoolRoute", "pool": "A", "rates": {"sets_rate": 0, "sets_burst": 1}}"#,
    );
    let mut fleet = Fleet::new(|_, _, _| r(b"STORED\r\n"));
    let t0 = Instant::now();
    assert_eq!(run_at(&mut fleet, &config, set("k", 0), t0), b"STORED\r\n");
    let later = t0 + std::time::Duration::from_secs(3600);
    assert_eq!(
        run_at(&mut fleet, &config, set("k", 0), later),
        b"NOT_STORED\r\n",
        "a rate of 0 never refills"
    );
}
