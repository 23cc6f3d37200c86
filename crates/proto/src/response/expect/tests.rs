//! Framing checked against what the request may get.

use super::super::*;
use proptest::prelude::*;

/// Frames `reply` whole as the answer to a request that `expect`s it and asked `keys`.
fn frame_as(expect: Expect, keys: &[&str], reply: &[u8]) -> (Frame, Option<Refusal>) {
    let (bytes, ends) = asked(keys);
    let mut f = Framer::new();
    let got = f.next(reply, expect, AskedKeys::new(&bytes, &ends));
    (got, f.refusal())
}

fn asked(keys: &[&str]) -> (Vec<u8>, Vec<u32>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for k in keys {
        bytes.extend_from_slice(k.as_bytes());
        ends.push(bytes.len() as u32);
    }
    (bytes, ends)
}

const MG: Expect = Expect::Meta {
    cmd: *b"mg",
    quiet: false,
};

/// A request kind, replies it may get, replies it may not.
type Kind = (Expect, Vec<&'static [u8]>, Vec<&'static [u8]>);

/// Each request kind with replies it may get and replies it may not (a reply of another
/// kind is what a backend one reply out of step sends).
fn kinds() -> Vec<Kind> {
    let meta = |cmd: &[u8; 2], quiet| Expect::Meta { cmd: *cmd, quiet };
    vec![
        (
            Expect::Get,
            vec![
                b"END\r\n",
                b"VALUE k 0 1\r\nx\r\nEND\r\n",
                b"VALUE k 0 1 9\r\nx\r\nEND\r\n",
            ],
            vec![
                b"WHATEVER 1 2 3\r\n",
                b"STORED\r\n",
                b"EN\r\n",
                b"VA 1\r\nx\r\n",
                b"1\r\n",
            ],
        ),
        (
            Expect::LeaseGet,
            vec![
                b"END\r\n",
                b"LVALUE k 99 0 0\r\n\r\nEND\r\n",
                b"VALUE k 0 1\r\nx\r\nEND\r\n",
            ],
            vec![b"STORED\r\n", b"NOT_FOUND\r\n"],
        ),
        (
            Expect::Store,
            vec![
                b"STORED\r\n",
                b"NOT_STORED\r\n",
                b"EXISTS\r\n",
                b"NOT_FOUND\r\n",
            ],
            vec![
                b"END\r\n",
                b"DELETED\r\n",
                b"STORED \r\n",
                b"STALE_STORED\r\n",
                b"OK\r\n",
            ],
        ),
        (
            Expect::LeaseSet,
            vec![b"STORED\r\n", b"STALE_STORED\r\n", b"NOT_STORED\r\n"],
            vec![b"END\r\n", b"TOUCHED\r\n"],
        ),
        (
            Expect::Delete,
            vec![b"DELETED\r\n", b"NOT_FOUND\r\n"],
            vec![b"STORED\r\n", b"END\r\n", b"HD\r\n"],
        ),
        (
            Expect::Arith,
            vec![
                b"15\r\n",
                b"0\r\n",
                b"18446744073709551615\r\n",
                b"NOT_FOUND\r\n",
            ],
            vec![
                b"STORED\r\n",
                b"-1\r\n",
                b"1 2\r\n",
                b"123456789012345678901\r\n",
                b"END\r\n",
            ],
        ),
        (
            Expect::Touch,
            vec![b"TOUCHED\r\n", b"NOT_FOUND\r\n"],
            vec![b"STORED\r\n", b"DELETED\r\n"],
        ),
        (Expect::Ok, vec![b"OK\r\n"], vec![b"STORED\r\n", b"OK \r\n"]),
        (
            MG,
            vec![b"VA 1 f0\r\nx\r\n", b"HD c5 t-1\r\n", b"HD\r\n", b"EN\r\n"],
            vec![
                b"NS\r\n",
                b"MN\r\n",
                b"HDX\r\n",
                b"END\r\n",
                b"VALUE k 0 1\r\nx\r\nEND\r\n",
            ],
        ),
        (
            meta(b"mg", true),
            vec![b"MN\r\n", b"HD\r\n", b"VA 0\r\n\r\n"],
            vec![b"NF\r\n", b"ME k\r\n"],
        ),
        (
            meta(b"ms", false),
            vec![b"HD\r\n", b"NS\r\n", b"EX\r\n", b"NF\r\n"],
            vec![b"EN\r\n", b"VA 1\r\nx\r\n", b"STORED\r\n"],
        ),
        (
            meta(b"md", false),
            vec![b"HD\r\n", b"NF\r\n", b"EX\r\n"],
            vec![b"NS\r\n", b"EN\r\n"],
        ),
        (
            meta(b"ma", false),
            vec![
                b"HD\r\n",
                b"VA 2\r\n10\r\n",
                b"NF\r\n",
                b"NS\r\n",
                b"EX\r\n",
            ],
            vec![b"EN\r\n", b"10\r\n"],
        ),
        (
            meta(b"me", false),
            vec![
                b"ME k exp=-1 la=3 cas=2 fetch=no cls=1 size=63\r\n",
                b"EN\r\n",
            ],
            vec![b"HD\r\n", b"VA 1\r\nx\r\n"],
        ),
    ]
}

#[test]
fn each_request_gets_only_its_replies() {
    let errors: [&[u8]; 4] = [
        b"ERROR\r\n",
        b"ERROR unknown command\r\n",
        b"CLIENT_ERROR bad data chunk\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
    ];
    for (expect, good, bad) in kinds() {
        for reply in good.iter().chain(&errors) {
            let got = frame_as(expect, &["k"], reply);
            assert_eq!(got.0, Frame::Complete(reply.len()), "{expect:?} {reply:?}");
        }
        for reply in bad {
            let got = frame_as(expect, &["k"], reply);
            assert_eq!(
                got,
                (Frame::Invalid, Some(Refusal::Unexpected)),
                "{expect:?} {reply:?}"
            );
        }
    }
}

#[test]
fn a_line_must_end_in_crlf() {
    for reply in [
        &b"STORED\n"[..],
        b"END\n",
        b"VALUE k 0 1\nx\r\nEND\r\n",
        b"\n",
    ] {
        let expect = if reply == b"STORED\n" {
            Expect::Store
        } else {
            Expect::Get
        };
        assert_eq!(
            frame_as(expect, &["k"], reply),
            (Frame::Invalid, Some(Refusal::Garbage)),
            "{reply:?}"
        );
    }
}

#[test]
fn garbage_is_refused_before_its_line_ends() {
    // A line that can still become a reply waits for its end...
    for (expect, partial) in [
        (Expect::Get, &b"VAL"[..]),
        (Expect::Get, b"VALUE k 0 100"),
        (Expect::Get, b"SERVER_ERR"),
        (Expect::Get, b"END\r"),
        (Expect::Store, b"NOT_"),
        (Expect::Arith, b"1234"),
        (MG, b"H"),
        (MG, b"HD t5 c"),
    ] {
        let got = frame_as(expect, &["k"], partial);
        assert_eq!(got.0, Frame::Incomplete(None), "{expect:?} {partial:?}");
    }
    // ...one that cannot is refused at once: a client never waits for a line end that
    // would not help.
    for (expect, partial) in [
        (Expect::Get, &b"W"[..]),
        (Expect::Get, b"\x8f\x01"),
        (Expect::Get, b"END\rx"),
        (Expect::Get, b"ENDX"),
        (Expect::Get, b"STO"),
        (Expect::Store, b"STORED "),
        (Expect::Arith, b"12a"),
        (Expect::Arith, b"123456789012345678901"),
        (MG, b"NS"),
        (MG, b"HDX"),
    ] {
        let got = frame_as(expect, &["k"], partial);
        assert_eq!(got.0, Frame::Invalid, "{expect:?} {partial:?}");
    }
    // Inside a get reply, only items, END and error lines may follow.
    let got = frame_as(Expect::Get, &["k"], b"VALUE k 0 1\r\nx\r\nSTO");
    assert_eq!(got.0, Frame::Invalid);
    let got = frame_as(Expect::Get, &["k"], b"VALUE k 0 1\r\nx\r\nSTORED\r\n");
    assert_eq!(got.0, Frame::Invalid);
}

#[test]
fn a_reply_line_is_bounded() {
    let mut line = b"SERVER_ERROR ".to_vec();
    line.resize(MAX_LINE, b'x');
    assert_eq!(frame_as(Expect::Get, &[], &line).0, Frame::Incomplete(None));
    line.push(b'x');
    assert_eq!(
        frame_as(Expect::Get, &[], &line),
        (Frame::Invalid, Some(Refusal::Garbage))
    );
    // Also when its end has come.
    line.extend_from_slice(b"\r\n");
    assert_eq!(frame_as(Expect::Get, &[], &line).0, Frame::Invalid);
}

#[test]
fn items_must_be_of_the_keys_asked_in_their_order() {
    let item = |k: &str| format!("VALUE {k} 0 1\r\nx\r\n");
    let reply = |keys: &[&str]| {
        let mut r: String = keys.iter().map(|k| item(k)).collect();
        r.push_str("END\r\n");
        r.into_bytes()
    };
    let keys = ["a", "b", "a"];
    for ok in [
        &[][..],
        &["a"],
        &["b"],
        &["a", "a"],
        &["b", "a"],
        &["a", "b", "a"],
    ] {
        let r = reply(ok);
        assert_eq!(
            frame_as(Expect::Get, &keys, &r).0,
            Frame::Complete(r.len()),
            "{ok:?}"
        );
    }
    for bad in [
        &["c"][..],
        &["b", "b"],
        &["a", "a", "a"],
        &["b", "a", "b"],
        &["a", "b", "a", "a"],
    ] {
        let r = reply(bad);
        assert_eq!(
            frame_as(Expect::Get, &keys, &r),
            (Frame::Invalid, Some(Refusal::UnaskedKey)),
            "{bad:?}"
        );
    }
    // Refused on its VALUE line, before its data is waited for.
    assert_eq!(
        frame_as(Expect::Get, &["a"], b"VALUE b 0 1000000\r\n").0,
        Frame::Invalid
    );
    // An item found incomplete is checked again, from the same place, when more comes.
    let (bytes, ends) = asked(&["a", "b"]);
    let keys = AskedKeys::new(&bytes, &ends);
    let r = reply(&["a", "b"]);
    let mut f = Framer::new();
    for cut in [3, 14, 20, 30] {
        assert!(matches!(
            f.next(&r[..cut], Expect::Get, keys),
            Frame::Incomplete(_)
        ));
    }
    assert_eq!(f.next(&r, Expect::Get, keys), Frame::Complete(r.len()));
    // The next reply starts from the first key again.
    let (bytes, ends) = asked(&["b"]);
    let b = reply(&["b"]);
    assert_eq!(
        f.next(&b, Expect::Get, AskedKeys::new(&bytes, &ends)),
        Frame::Complete(b.len())
    );
    // A lease token is of its key too.
    assert_eq!(
        frame_as(Expect::LeaseGet, &["k"], b"LVALUE j 99 0 0\r\n\r\nEND\r\n").0,
        Frame::Invalid
    );
}

#[test]
fn a_meta_reply_must_echo_its_requests_opaque_and_key() {
    // The request sent `O7` and `k` for key `a`: [opaque, key]; "" when not sent.
    let ok = |echo: &[&str], r: &[u8]| frame_as(MG, echo, r).0 == Frame::Complete(r.len());
    for r in [
        &b"HD O7 ka\r\n"[..],
        b"EN O7\r\n",
        b"EN\r\n",
        b"HD t5\r\n",
        b"VA 1 O7 ka f0\r\nx\r\n",
    ] {
        assert!(ok(&["7", "a"], r), "{:?}", String::from_utf8_lossy(r));
    }
    let refused = |echo: &[&str], r: &[u8]| {
        frame_as(MG, echo, r) == (Frame::Invalid, Some(Refusal::Unexpected))
    };
    // Another request's opaque or key, or one the request did not send.
    for (echo, r) in [
        (&["7", "a"][..], &b"HD O8 ka\r\n"[..]),
        (&["7", "a"], b"EN O7 kb\r\n"),
        (&["7", "a"], b"VA 1 O70\r\nx\r\n"),
        (&["", "a"], b"HD O7 ka\r\n"),
        (&["7", ""], b"HD O7 ka\r\n"),
    ] {
        assert!(
            refused(echo, r),
            "{echo:?} {:?}",
            String::from_utf8_lossy(r)
        );
    }
    // Nothing to check without an opaque or key; error lines carry text, not flags.
    assert!(ok(&[], b"HD O8 kb\r\n"));
    assert!(ok(&["7", "a"], b"CLIENT_ERROR key Otoo long\r\n"));
}

#[test]
fn an_announced_length_over_the_limit_is_refused_at_once() {
    let mut f = Framer::new().max_value(100);
    let keys = (b"k".to_vec(), vec![1u32]);
    let keys = AskedKeys::new(&keys.0, &keys.1);
    assert_eq!(
        f.next(b"VALUE k 0 100\r\n", Expect::Get, keys),
        Frame::Incomplete(Some(117))
    );
    let mut f = Framer::new().max_value(100);
    assert_eq!(
        f.next(b"VALUE k 0 101\r\n", Expect::Get, keys),
        Frame::Invalid
    );
    assert_eq!(f.refusal(), Some(Refusal::TooLarge(101)));
    assert_eq!(f.next(b"VA 101 f\r\n", MG, keys), Frame::Invalid);
    assert_eq!(f.refusal(), Some(Refusal::TooLarge(101)));
    let mut f = Framer::new();
    for len in ["67108865", "2147483648", "4294967296", "9999999999"] {
        let line = format!("VALUE k 0 {len}\r\n");
        assert_eq!(
            f.next(line.as_bytes(), Expect::Get, keys),
            Frame::Invalid,
            "{len}"
        );
        assert_eq!(f.refusal(), Some(Refusal::TooLarge(len.parse().unwrap())));
    }
    let line = format!("VALUE k 0 {DEFAULT_MAX_VALUE}\r\n");
    assert!(matches!(
        f.next(line.as_bytes(), Expect::Get, keys),
        Frame::Incomplete(Some(_))
    ));
}

#[test]
fn expect_of_each_forwarded_request() {
    let of = |line: &[u8]| match crate::parse(line, &crate::Limits::default()) {
        crate::Parse::Request(req, _) => Expect::of(&req),
        other => panic!("{other:?}"),
    };
    assert_eq!(of(b"get a b\r\n"), Some(Expect::Get));
    assert_eq!(of(b"gats 10 a\r\n"), Some(Expect::Get));
    assert_eq!(of(b"cas a 0 0 1 5\r\nx\r\n"), Some(Expect::Store));
    assert_eq!(of(b"delete a noreply\r\n"), Some(Expect::Delete));
    assert_eq!(of(b"decr a 1\r\n"), Some(Expect::Arith));
    assert_eq!(of(b"touch a 1\r\n"), Some(Expect::Touch));
    assert_eq!(of(b"flush_all\r\n"), Some(Expect::Ok));
    assert_eq!(of(b"mg a v\r\n"), Some(MG));
    assert_eq!(
        of(b"ms a 1 q\r\nx\r\n"),
        Some(Expect::Meta {
            cmd: *b"ms",
            quiet: true
        })
    );
    assert_eq!(of(b"version\r\n"), None);
    assert_eq!(of(b"stats\r\n"), None);
}

proptest! {
    /// A reply a request may get is never refused, however it is cut: the check of a line
    /// still arriving agrees with the check of the whole line.
    #[test]
    fn a_valid_reply_cut_anywhere_waits(which in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let all: Vec<(Expect, &[u8])> = kinds()
            .into_iter()
            .flat_map(|(e, good, _)| good.into_iter().map(move |r| (e, r)))
            .chain([(Expect::Get, &b"SERVER_ERROR busy\r\n"[..]), (Expect::Store, b"ERROR\r\n")])
            .collect();
        let (expect, reply) = all[which.index(all.len())];
        let cut = cut.index(reply.len());
        let (bytes, ends) = asked(&["k"]);
        let mut f = Framer::new();
        let keys = AskedKeys::new(&bytes, &ends);
        prop_assert!(matches!(f.next(&reply[..cut], expect, keys), Frame::Incomplete(_)));
        prop_assert_eq!(f.next(reply, expect, keys), Frame::Complete(reply.len()));
    }

    /// Whatever items a backend sends, a get reply is taken exactly when their keys are a
    /// subsequence of the keys asked (in order, each asked key used once); then its items
    /// are those sent.
    #[test]
    fn items_are_taken_iff_they_follow_the_keys_asked(
        asked_keys in prop::collection::vec(0u8..4, 0..6),
        sent in prop::collection::vec(0u8..4, 0..6),
        cuts in prop::collection::vec(1usize..30, 1..4),
    ) {
        let name = |k: &u8| format!("k{k}");
        let asked_names: Vec<String> = asked_keys.iter().map(name).collect();
        let asked_refs: Vec<&str> = asked_names.iter().map(String::as_str).collect();
        let (bytes, ends) = asked(&asked_refs);
        let keys = AskedKeys::new(&bytes, &ends);
        let mut reply = Vec::new();
        for k in &sent {
            reply.extend_from_slice(format!("VALUE {} 0 2\r\nv{k}\r\n", name(k)).as_bytes());
        }
        reply.extend_from_slice(b"END\r\n");
        let mut rest = asked_keys.iter();
        let follows = sent.iter().all(|s| rest.any(|a| a == s));
        // Fed in pieces, as reads bring it.
        let mut f = Framer::new();
        let mut end = 0;
        let mut got = Frame::Incomplete(None);
        for &c in cuts.iter().cycle() {
            end = (end + c).min(reply.len());
            got = f.next(&reply[..end], Expect::Get, keys);
            if !matches!(got, Frame::Incomplete(_)) || end == reply.len() {
                break;
            }
        }
        if follows {
            prop_assert_eq!(got, Frame::Complete(reply.len()));
            let items: Vec<&[u8]> = f.items().iter().map(|it| &reply[it.key.clone()]).collect();
            let want: Vec<String> = sent.iter().map(name).collect();
            prop_assert_eq!(items, want.iter().map(|w| w.as_bytes()).collect::<Vec<_>>());
        } else {
            prop_assert_eq!(got, Frame::Invalid);
            prop_assert_eq!(f.refusal(), Some(Refusal::UnaskedKey));
        }
    }
}
