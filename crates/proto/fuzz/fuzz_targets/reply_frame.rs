#![no_main]
//! Arbitrary bytes as a backend's reply stream through the memcached and RESP framers of
//! `proto::response`: fed in chunks (the first byte picks the size) they must frame exactly
//! as when fed whole, every reply must stay within the bytes given, and each get reply's
//! items must lie inside it in order (apart only by lease tokens), their keys and values as
//! its VALUE lines say.

use libfuzzer_sys::fuzz_target;
use proto::response::{parse_line, Frame, Line, ReplyFramer};

/// Frames `stream` fed `chunk` bytes at a time: the replies, and whether it ended invalid.
fn frame(stream: &[u8], chunk: usize, redis: bool) -> (Vec<Vec<u8>>, bool) {
    let mut f = ReplyFramer::new(redis);
    let mut replies = Vec::new();
    let (mut start, mut end) = (0, 0);
    while end < stream.len() {
        end = (end + chunk).min(stream.len());
        loop {
            match f.next(&stream[start..end]) {
                Frame::Complete(n) => {
                    assert!(n > 0 && start + n <= end);
                    let reply = &stream[start..start + n];
                    check_items(reply, &f);
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

fn check_items(reply: &[u8], f: &ReplyFramer) {
    let mut at = 0;
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
    let whole = frame(rest, rest.len().max(1), redis);
    let chunked = frame(rest, chunk, redis);
    // An invalid stream may be noticed at a different reply when read in pieces only if a
    // line grows past the limit; otherwise the replies are the same.
    if !whole.1 && !chunked.1 {
        assert_eq!(whole.0, chunked.0);
    } else {
        let n = whole.0.len().min(chunked.0.len());
        assert_eq!(whole.0[..n], chunked.0[..n]);
    }
});
