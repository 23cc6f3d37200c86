//! A server-like driver used by the fuzz target and tests: feeds bytes in chunks, parses,
//! consumes and swallows exactly as the server must, and checks the parser's invariants.

use crate::{parse, Limits, Parse};

/// What a run saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub requests: usize,
    pub errors: usize,
    pub closed: bool,
    /// Concatenated error replies.
    pub replies: Vec<u8>,
}

/// Feeds `input` in chunks of `chunk` bytes (at least 1). Panics if an invariant breaks.
pub fn run(input: &[u8], chunk: usize, limits: &Limits) -> Outcome {
    run_with(input, chunk, limits, parse)
}

/// [`run`] with another parser ([`crate::parse_mcrouter`]).
pub fn run_with(
    input: &[u8],
    chunk: usize,
    limits: &Limits,
    parse: for<'a> fn(&'a [u8], &Limits) -> Parse<'a>,
) -> Outcome {
    let chunk = chunk.max(1);
    let mut out = Outcome::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut swallow = 0usize;
    let mut fed = 0;
    while fed < input.len() {
        let take = chunk.min(input.len() - fed);
        let mut piece = &input[fed..fed + take];
        fed += take;
        let s = swallow.min(piece.len());
        swallow -= s;
        piece = &piece[s..];
        buf.extend_from_slice(piece);
        loop {
            match parse(&buf, limits) {
                Parse::Request(req, used) => {
                    assert!(used > 0 && used <= buf.len(), "bad consumed {used}");
                    check_request(&req, &buf[..used]);
                    out.requests += 1;
                    buf.drain(..used);
                }
                Parse::Incomplete { total } => {
                    if let Some(t) = total {
                        assert!(t > buf.len(), "Incomplete total {t} <= {}", buf.len());
                        assert!(t <= buf.len() + limits.item_size_max + 2 + 4096);
                    } else {
                        assert!(buf.len() <= limits.max_get_line.max(crate::MAX_COMMAND_LINE));
                    }
                    break;
                }
                Parse::Error {
                    reply,
                    consumed,
                    swallow: sw,
                    close,
                    ..
                } => {
                    assert!(consumed <= buf.len());
                    assert!(consumed > 0 || close, "error without progress");
                    assert!(reply.is_empty() || reply.ends_with(b"\r\n"));
                    out.errors += 1;
                    out.replies.extend_from_slice(reply);
                    buf.drain(..consumed);
                    let s = sw.min(buf.len());
                    buf.drain(..s);
                    swallow = sw - s;
                    if close {
                        out.closed = true;
                        return out;
                    }
                    if swallow > 0 {
                        break;
                    }
                }
            }
        }
    }
    out
}

fn check_request(req: &crate::Request<'_>, used: &[u8]) {
    use crate::Request::*;
    let within = |s: &[u8]| {
        s.is_empty()
            || (s.as_ptr() as usize >= used.as_ptr() as usize
                && s.as_ptr() as usize + s.len() <= used.as_ptr() as usize + used.len())
    };
    match req {
        Get { keys, .. } | Gat { keys, .. } | LeaseGet { keys } => {
            for k in keys.flatten() {
                assert!(!k.is_empty() && k.len() <= crate::KEY_MAX_LENGTH && within(k));
                assert!(!k.contains(&b' '));
            }
        }
        Store { key, data, .. } | LeaseSet { key, data, .. } => {
            assert!(key.len() <= crate::KEY_MAX_LENGTH && within(key) && within(data));
        }
        MetaSet {
            key, data, flags, ..
        } => {
            assert!(key.as_bytes().len() <= crate::KEY_MAX_LENGTH && within(data));
            for (f, _) in flags.iter() {
                assert!(flags.has(f));
            }
        }
        MetaGet { key, .. } | MetaDelete { key, .. } | MetaArithmetic { key, .. } => {
            assert!(key.as_bytes().len() <= crate::KEY_MAX_LENGTH && within(key.wire()));
        }
        _ => {}
    }
}
