#![no_main]
//! Arbitrary bytes as a server's replies to `memfleet bench`: the first byte picks the
//! request kind and the read size. The resumable parser must never panic, never claim
//! bytes it was not given, and find the same replies (and the same protocol error) when
//! the stream arrives in pieces as when it arrives whole.

use libfuzzer_sys::fuzz_target;

use proto::response::tally::{Expect, ProtocolError, Reply, ReplyParser};

const EXPECTS: [Expect; 8] = [
    Expect::Store,
    Expect::Get,
    Expect::MetaStore,
    Expect::MetaGet,
    Expect::MetaMultiGet,
    Expect::RedisStore,
    Expect::RedisGet,
    Expect::RedisMultiGet,
];

/// Feeds `stream` `chunk` bytes at a time, keeping unconsumed bytes as the bench's reader
/// does: the replies found and the error that ended the stream, if any.
fn run(expect: Expect, stream: &[u8], chunk: usize) -> (Vec<Reply>, Option<ProtocolError>) {
    let mut parser = ReplyParser::new();
    let mut replies = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match parser.parse(expect, &buf) {
                Ok((used, reply)) => {
                    assert!(used <= buf.len());
                    buf.drain(..used);
                    match reply {
                        Some(r) => replies.push(r),
                        None => break,
                    }
                }
                Err(e) => return (replies, Some(e)),
            }
        }
    }
    (replies, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, stream)) = data.split_first() else {
        return;
    };
    let expect = EXPECTS[usize::from(sel & 7)];
    let whole = run(expect, stream, stream.len().max(1));
    let pieces = run(expect, stream, usize::from(sel >> 3) + 1);
    assert_eq!(pieces, whole);
});
