use super::*;
use proptest::prelude::*;

/// Framing with no expectation, for the tests of framing itself.
trait FrameAny {
    fn any(&mut self, buf: &[u8]) -> Frame;
}

impl FrameAny for Framer {
    fn any(&mut self, buf: &[u8]) -> Frame {
        self.next(buf, Expect::Any, AskedKeys::NONE)
    }
}

fn frame_all(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut f = Framer::new();
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        match f.any(&stream[start..]) {
            Frame::Complete(n) => {
                out.push(stream[start..start + n].to_vec());
                start += n;
            }
            Frame::Incomplete(_) => break,
            Frame::Invalid => panic!("invalid at {start}"),
        }
    }
    assert_eq!(start, stream.len(), "left over bytes");
    out
}

/// The items of one complete get reply.
fn items_of(reply: &[u8]) -> Vec<Item> {
    let mut f = Framer::new();
    assert_eq!(f.any(reply), Frame::Complete(reply.len()));
    f.items().to_vec()
}

#[test]
fn frames_each_reply_kind() {
    let replies: Vec<&[u8]> = vec![
        b"STORED\r\n",
        b"VALUE a 0 3\r\nabc\r\nVALUE bb 5 0 77\r\n\r\nEND\r\n",
        b"END\r\n",
        b"VA 2 f0 kfoo\r\nhi\r\n",
        b"HD c5\r\n",
        b"EN\r\n",
        b"MN\r\n",
        b"12345\r\n",
        b"SERVER_ERROR out of memory storing object\r\n",
        b"VALUE x 0 5\r\nEND\r\n\r\nEND\r\n",
        b"ME k exp=-1 la=3 cas=2 fetch=no cls=1 size=63\r\n",
    ];
    let stream: Vec<u8> = replies.concat();
    let got = frame_all(&stream);
    assert_eq!(got, replies.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
}

#[test]
fn items_so_far_can_be_dropped_and_the_reply_goes_on() {
    let reply = b"VALUE a 0 1\r\nA\r\nVALUE b 0 2\r\nBB\r\nVALUE c 0 3\r\nCCC\r\nEND\r\n";
    let mut f = Framer::new();
    assert!(f.items_so_far().is_empty());
    let cut = 40; // a's and b's items, part of c's
    assert!(matches!(f.any(&reply[..cut]), Frame::Incomplete(_)));
    assert_eq!(f.items_so_far().len(), 2);
    let a = f.items_so_far()[0].item.end;
    f.drop_front(1, a);
    let rest = &reply[a..];
    assert_eq!(
        f.items_so_far()[0],
        items_of(&reply[a..])[0],
        "b's item, moved"
    );
    assert_eq!(f.any(rest), Frame::Complete(rest.len()));
    assert_eq!(f.items(), items_of(rest));
    assert!(f.items_so_far().is_empty(), "at a reply boundary again");
}

#[test]
fn incomplete_until_whole_and_knows_the_size() {
    let reply = b"VALUE k 0 10\r\n0123456789\r\nEND\r\n";
    for cut in 0..reply.len() {
        let mut f = Framer::new();
        match f.any(&reply[..cut]) {
            Frame::Incomplete(Some(n)) => assert_eq!(n, 26),
            Frame::Incomplete(None) => {}
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    assert_eq!(Framer::new().any(reply), Frame::Complete(reply.len()));
}

#[test]
fn garbage_is_invalid() {
    assert_eq!(Framer::new().any(b"VALUE k 0 x\r\n"), Frame::Invalid);
    assert_eq!(Framer::new().any(b"VALUE k 0\r\n"), Frame::Invalid);
    assert_eq!(Framer::new().any(b"VALUE k 0 1\r\nabc\r\n"), Frame::Invalid);
    assert_eq!(
        Framer::new().any(&vec![b'x'; MAX_REPLY_LINE + 1]),
        Frame::Invalid
    );
    assert_eq!(Framer::new().any(b"VA x\r\n"), Frame::Invalid);
    assert_eq!(Framer::new().any(b"VA 12345678901\r\n"), Frame::Invalid);
}

#[test]
fn items_of_a_get_reply_in_one_pass() {
    let r = b"VALUE a 0 3\r\nabc\r\nVALUE bb 5 0 77\r\n\r\nEND\r\n";
    let items = items_of(r);
    assert_eq!(items.len(), 2);
    let [a, bb] = &items[..] else { unreachable!() };
    assert_eq!(&r[a.key.clone()], b"a");
    assert_eq!(&r[a.flags.clone()], b"0");
    assert_eq!(&r[a.cas.clone()], b"");
    assert_eq!(&r[a.value.clone()], b"abc");
    assert_eq!(&r[a.item.clone()], b"VALUE a 0 3\r\nabc\r\n");
    assert_eq!(&r[bb.key.clone()], b"bb");
    assert_eq!(&r[bb.flags.clone()], b"5");
    assert_eq!(&r[bb.cas.clone()], b"77");
    assert_eq!(&r[bb.value.clone()], b"");
    assert_eq!(&r[bb.item.clone()], b"VALUE bb 5 0 77\r\n\r\n");
    assert!(items_of(b"END\r\n").is_empty());
    // Items of a reply read in pieces are those of the whole reply.
    let mut f = Framer::new();
    assert_eq!(f.any(&r[..36]), Frame::Incomplete(Some(37)));
    assert_eq!(f.any(r), Frame::Complete(r.len()));
    assert_eq!(f.items(), &items[..]);
    // The next reply starts with no items.
    assert_eq!(f.any(b"STORED\r\n"), Frame::Complete(8));
    assert!(f.items().is_empty());
    let moved = bb.moved(18, 3);
    assert_eq!(
        &b"xyzVALUE bb 5 0 77\r\n\r\n"[moved.item.clone()],
        &r[bb.item.clone()]
    );
    assert_eq!(&b"xyzVALUE bb 5 0 77\r\n\r\n"[moved.cas], b"77");
}

#[test]
fn reply_lines_are_classified() {
    assert!(is_get_reply(b"VALUE a 0 1\r\nx\r\nEND\r\n") && is_get_reply(b"END\r\n"));
    assert!(!is_get_reply(b"SERVER_ERROR x\r\n"));
    assert_eq!(parse_line(b"END"), Ok(Line::End));
    assert_eq!(parse_line(b"STORED"), Ok(Line::Other(b"STORED")));
    assert_eq!(parse_line(b"VA 3 f1 t"), Ok(Line::Va { len: 3 }));
    assert_eq!(
        parse_line(b"VALUE k 1 2 3"),
        Ok(Line::Value {
            key: b"k",
            flags: b"1",
            cas: Some(b"3"),
            len: 2
        })
    );
    assert_eq!(parse_line(b"VALUE k 1"), Err(BadLine));
    assert_eq!(
        parse_line(b"LVALUE k 99 0 3"),
        Ok(Line::LeaseValue {
            key: b"k",
            token: b"99",
            len: 3
        })
    );
    assert_eq!(parse_line(b"LVALUE k 99 0"), Err(BadLine));
}

#[test]
fn lease_get_replies_frame_whole() {
    let mut f = Framer::new();
    let r = b"LVALUE k 99 0 3\r\nabc\r\nEND\r\nSTORED\r\n";
    assert_eq!(f.any(&r[..12]), Frame::Incomplete(None));
    assert_eq!(f.any(&r[..20]), Frame::Incomplete(Some(22)));
    assert_eq!(f.any(r), Frame::Complete(27));
    assert!(f.items().is_empty());
    assert_eq!(f.any(b"LVALUE k 99 0 3\r\nabcd\r\n"), Frame::Invalid);
}

/// A lease token is framed like an item but is not one, so an item after it starts past it
/// (the reply_frame fuzz target had assumed items back to back).
#[test]
fn an_item_after_a_lease_token_keeps_its_place() {
    let r = b"LVALUE k 99 0 3\r\nabc\r\nVALUE j 1 2\r\nhi\r\nEND\r\n";
    let items = items_of(r);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].item, 22..39);
    assert_eq!(&r[items[0].key.clone()], b"j");
    assert_eq!(&r[items[0].value.clone()], b"hi");
}

#[test]
fn error_lines_are_whole_words() {
    for line in [
        &b"ERROR"[..],
        b"ERROR unknown command",
        b"ERROR: shutdown not enabled",
        b"CLIENT_ERROR bad data chunk",
        b"SERVER_ERROR out of memory",
    ] {
        assert!(is_error_line(line), "{line:?}");
        assert_eq!(parse_line(line), Ok(Line::Error));
        let mut reply = line.to_vec();
        reply.extend_from_slice(b"\r\n");
        assert!(is_error_reply(&reply));
    }
    for line in [
        &b"ERRORX"[..],
        b"ERRORS 3",
        b"CLIENT_ERRORX",
        b"SERVER_ERRORS",
        b"STORED",
        b"EN",
        b"",
    ] {
        assert!(!is_error_line(line), "{line:?}");
        assert!(!is_error_reply(line));
    }
    assert!(!is_error_reply(b"ERRORX\r\n"));
}

fn merge(keys: &[&str], frag_of: &[usize], frags: &[&[u8]]) -> Vec<u8> {
    let items: Vec<Vec<Item>> = frags
        .iter()
        .map(|f| {
            if is_get_reply(f) {
                items_of(f)
            } else {
                Vec::new()
            }
        })
        .collect();
    let frags: Vec<Fragment> = frags
        .iter()
        .zip(&items)
        .map(|(reply, items)| Fragment { reply, items })
        .collect();
    let mut out = Vec::new();
    let keys = keys
        .iter()
        .map(|k| k.as_bytes())
        .zip(frag_of.iter().copied());
    merge_get(keys, &frags, &mut out);
    out
}

#[test]
fn multi_get_merges_in_key_order() {
    let out = merge(
        &["a", "b", "c", "a", "d"],
        &[0, 1, 0, 0, 1],
        &[
            b"VALUE a 0 1\r\n1\r\nVALUE c 0 1\r\n3\r\nVALUE a 0 1\r\n1\r\nEND\r\n",
            b"VALUE d 0 1\r\n4\r\nEND\r\n",
        ],
    );
    assert_eq!(
        out,
        b"VALUE a 0 1\r\n1\r\nVALUE c 0 1\r\n3\r\nVALUE a 0 1\r\n1\r\nVALUE d 0 1\r\n4\r\nEND\r\n"
    );
    let out = merge(
        &["a", "b"],
        &[0, 1],
        &[b"END\r\n", b"SERVER_ERROR Connection refused\r\n"],
    );
    assert_eq!(out, b"SERVER_ERROR Connection refused\r\n");
    let out = merge(
        &["x", "y"],
        &[1, 0],
        &[
            b"VALUE y 1 0\r\n\r\nEND\r\n",
            b"VALUE x 2 0 9\r\n\r\nEND\r\n",
        ],
    );
    assert_eq!(out, b"VALUE x 2 0 9\r\n\r\nVALUE y 1 0\r\n\r\nEND\r\n");
    // An item no key asked for still goes out, after the others.
    let out = merge(&["a"], &[0], &[b"VALUE z 0 1\r\nz\r\nEND\r\n"]);
    assert_eq!(out, b"VALUE z 0 1\r\nz\r\nEND\r\n");
}

proptest! {
    /// Any split of a stream of well-formed replies frames to the same replies and items.
    #[test]
    fn split_reads_frame_the_same(
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6),
        cut in 0usize..400,
    ) {
        let mut stream = Vec::new();
        let mut expect = Vec::new();
        let mut get = Vec::new();
        let mut want_values = Vec::new();
        for (i, v) in values.iter().enumerate() {
            get.extend_from_slice(format!("VALUE k{i} {i} {}\r\n", v.len()).as_bytes());
            get.extend_from_slice(v);
            get.extend_from_slice(b"\r\n");
            want_values.push((format!("k{i}").into_bytes(), v.clone()));
            let mut va = format!("VA {} t\r\n", v.len()).into_bytes();
            va.extend_from_slice(v);
            va.extend_from_slice(b"\r\n");
            expect.push(va);
        }
        get.extend_from_slice(b"END\r\n");
        expect.insert(0, get);
        expect.push(b"STORED\r\n".to_vec());
        for e in &expect { stream.extend_from_slice(e); }
        let cut = cut.min(stream.len());
        // Feed the first `cut` bytes, then everything: same result as all at once.
        let mut f = Framer::new();
        let first = f.any(&stream[..cut]);
        prop_assert!(first != Frame::Invalid);
        let mut got = Vec::new();
        let mut start = 0;
        while let Frame::Complete(n) = f.any(&stream[start..]) {
            let reply = &stream[start..start + n];
            if start == 0 {
                let items: Vec<(Vec<u8>, Vec<u8>)> = f
                    .items()
                    .iter()
                    .map(|it| (reply[it.key.clone()].to_vec(), reply[it.value.clone()].to_vec()))
                    .collect();
                prop_assert_eq!(&items, &want_values);
            }
            got.push(reply.to_vec());
            start += n;
        }
        prop_assert_eq!(got, expect);
    }

    /// Arbitrary bytes never panic the framer, and a complete reply stays within the buffer
    /// with items inside it, in order.
    #[test]
    fn arbitrary_bytes_frame_safely(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut f = Framer::new();
        if let Frame::Complete(n) = f.any(&buf) {
            prop_assert!(n <= buf.len());
            let mut end = 0;
            for it in f.items() {
                prop_assert!(it.item.start >= end && it.item.end <= n);
                prop_assert!(it.key.end <= it.value.start && it.value.end + 2 == it.item.end);
                end = it.item.end;
            }
        }
    }
}
