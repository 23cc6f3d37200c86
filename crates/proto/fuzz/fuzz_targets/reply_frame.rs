#![no_main]
//! Arbitrary bytes as a backend's reply stream through the memcached and RESP framers of
//! `proto::response`: fed in chunks (the first byte picks the size) they must frame exactly
//! as when fed whole, every reply must stay within the bytes given, and each get reply's
//! items must lie inside it in order (apart only by lease tokens), their keys and values as
//! its VALUE lines say. With the top bit of the first byte set, the stream answers gets of
//! the keys `a b a k`: every item of a complete reply is then of one of them, in that order.

use libfuzzer_sys::fuzz_target;
use proto::response::{parse_line, AskedKeys, Expect, Frame, Line, ReplyFramer, DEFAULT_MAX_VALUE};

const ASKED: &[u8] = b"abak";
const ASKED_ENDS: &[u32] = &[1, 2, 3, 4];

/// Frames `stream` fed `chunk` bytes at a time: the replies, and whether it ended invalid.
fn frame(stream: &[u8], chunk: usize, redis: bool, get: bool) -> (Vec<Vec<u8>>, bool) {
    let mut f = ReplyFramer::new(redis, DEFAULT_MAX_VALUE);
    let (expect, keys) = if get {
        (Expect::Get, AskedKeys::new(ASKED, ASKED_ENDS))
    } else {
        (Expect::Any, AskedKeys::NONE)
    };
    let mut replies = Vec::new();
    let (mut start, mut end) = (0, 0);
    while end < stream.len() {
        end = (end + chunk).min(stream.len());
        loop {
            match f.next(&stream[start..end], expect, keys) {
                Frame::Complete(n) => {
                    assert!(n > 0 && start + n <= end);
                    let reply = &stream[start..start + n];
                    check_items(reply, &f, get);
                    replies.push(reply.to_vec());
                    start += n;
                }
                Frame::Incomplete(total) => {
                    if let Some(t) = total {
                        assert!(start + t > end, "hint {t} already satisfied");
                    }
                    break;
                }
                Frame::Invalid => return (replies, true),
            }
        }
    }
    (replies, false)
}

fn check_items(reply: &[u8], f: &ReplyFramer, get: bool) {
    let mut at = 0;
    let mut asked = ASKED.iter();
    for it in f.items() {
        // Items follow each other, except that a lease token (`LVALUE`, mcrouter's
        // lease-get miss) is framed like an item without being one.
        assert!(it.item.start >= at);
        if it.item.start > at {
            assert!(reply[at..].starts_with(b"LVALUE "), "gap before an item");
        }
        assert!(it.item.end <= reply.len());
        let line_end = it.value.start;
        let line = reply[it.item.start..line_end]
            .strip_suffix(b"\n")
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .expect("VALUE line ends with LF");
        match parse_line(line) {
            Ok(Line::Value { key, len, .. }) => {
                assert_eq!(&reply[it.key.clone()], key);
                if get {
                    assert!(key.len() == 1 && asked.any(|a| *a == key[0]), "unasked {key:?}");
                }
                assert_eq!(it.value.len(), len);
            }
            other => panic!("item line {other:?}"),
        }
        at = it.item.end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(sel & 0x3f) + 1;
    let redis = sel & 0x40 != 0;
    let get = sel & 0x80 != 0;
    let whole = frame(rest, rest.len().max(1), redis, get);
    let chunked = frame(rest, chunk, redis, get);
    // An invalid stream may be noticed at a different reply when read in pieces only if a
    // line grows past the limit; otherwise the replies are the same.
    if !whole.1 && !chunked.1 {
        assert_eq!(whole.0, chunked.0);
    } else {
        let n = whole.0.len().min(chunked.0.len());
        assert_eq!(whole.0[..n], chunked.0[..n]);
    }
});
