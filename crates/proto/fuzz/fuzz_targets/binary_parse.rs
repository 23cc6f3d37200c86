#![no_main]
//! Binary protocol requests: the input is a byte stream a client might send. It is parsed the
//! way a server would consume it (requests, errors with their swallow and close), whole and
//! in pieces, checking that no result claims bytes that were not given; replies are composed
//! for every request and must parse back with `parse_response`.

use libfuzzer_sys::fuzz_target;
use proto::binary::{parse_request, parse_response, BinParse, ResponseParse, Settings, Status};
use proto::Limits;

/// Consumes `input` as a server would, with reads of at most `step` bytes.
fn run(input: &[u8], step: usize, settings: &Settings) {
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut swallow = 0usize;
    let mut out = Vec::new();
    loop {
        let drop = swallow.min(buf.len());
        buf.drain(..drop);
        swallow -= drop;
        match parse_request(&buf, settings) {
            BinParse::Request(req, n) => {
                assert!(n > 0 && n <= buf.len());
                out.clear();
                req.write_hit(&mut out, 1, 2, b"value");
                req.write_miss(&mut out);
                req.write_ok(&mut out, 3, b"ok");
                req.write_error(&mut out, Status::NotStored);
                let mut rest = &out[..];
                while !rest.is_empty() {
                    let ResponseParse::Response(_, m) = parse_response(rest) else {
                        panic!("composed reply does not parse")
                    };
                    rest = &rest[m..];
                }
                buf.drain(..n);
                continue;
            }
            BinParse::Error(e) => {
                assert!(e.consumed <= buf.len());
                out.clear();
                e.write_reply(&mut out);
                if e.close {
                    return;
                }
                assert!(e.consumed > 0);
                let (consumed, skip) = (e.consumed, e.swallow);
                buf.drain(..consumed);
                swallow = skip;
                continue;
            }
            BinParse::Incomplete { total } => {
                assert!(total > buf.len() && total <= 24 + 255 + 65535 + (1 << 20));
                if fed == input.len() {
                    return;
                }
            }
        }
        let n = step.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let settings = Settings {
        limits: Limits {
            item_size_max: if sel & 0x80 != 0 { 100 } else { 1 << 20 },
            ..Limits::default()
        },
        sasl: sel & 0x40 != 0,
        authenticated: sel & 0x20 != 0,
    };
    run(rest, usize::from(sel & 0x1f) + 1, &settings);
    run(rest, rest.len().max(1), &settings);
    let _ = parse_response(rest);
});
