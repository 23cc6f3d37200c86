#![no_main]
//! Arbitrary bytes as a server's reply to the Python client's core (`pyclient::wire`). The
//! first byte picks the request (one of every kind, with a count for the multi-part ones), the
//! dialect and the size of the pieces the reply arrives in. Fed in pieces, the parser reaches
//! the outcome it reaches fed whole; it asks only for bytes beyond those it was given; a whole
//! reply took no more bytes than it had, and its items lie within them. Each line of the input
//! is also read as a tracking reply and as an invalidation notice.

use libfuzzer_sys::fuzz_target;
use pyclient::wire::{notice_line, tracking_line, Kind, Notice, Reply, ReplyParser, Span, Stop};

fn kind(sel: u8, n: usize) -> Kind {
    match sel % 17 {
        0 => Kind::Get,
        1 => Kind::GetMany,
        2 => Kind::Store,
        3 => Kind::Delete,
        4 => Kind::Touch,
        5 => Kind::Ok,
        6 => Kind::SetMany(n),
        7 => Kind::AddTokenMany(n),
        8 => Kind::DeleteMany(n),
        9 => Kind::Arith,
        10 => Kind::Lease,
        11 => Kind::Exists,
        12 => Kind::LeaseExists,
        13 => Kind::Probe,
        14 => Kind::Version,
        15 => Kind::Stats,
        _ => Kind::Line,
    }
}

/// The parser's outcome on `bytes` arriving `chunk` at a time: the reply and the bytes it took,
/// or where it stopped.
fn parse(bytes: &[u8], kind: Kind, meta: bool, chunk: usize) -> Result<(Reply, usize), Stop> {
    let mut p = ReplyParser::new(kind, meta);
    let mut end = 0;
    loop {
        match p.advance(&bytes[..end]) {
            Ok(()) => {
                let used = p.consumed();
                assert!(used <= end, "took {used} of {end} bytes");
                return Ok((p.take(), used));
            }
            Err(Stop::More { want }) => {
                assert!(
                    want == 0 || want > end,
                    "asked for {want} bytes with {end} given"
                );
                if end == bytes.len() {
                    return Err(Stop::More { want });
                }
                end = (end + chunk).min(bytes.len());
            }
            Err(bad) => return Err(bad),
        }
    }
}

fn within(span: Span, used: usize) {
    assert!(
        span.start <= span.end && span.end <= used,
        "{span:?} past {used}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Some((&chunk, bytes)) = rest.split_first() else {
        return;
    };
    let kind = kind(sel >> 1, usize::from(chunk >> 6));
    let meta = sel & 1 != 0;
    let whole = parse(bytes, kind, meta, bytes.len().max(1));
    let pieces = parse(bytes, kind, meta, usize::from(chunk & 0x3f) + 1);
    assert_eq!(whole, pieces);
    match whole {
        Ok((Reply::Items(items), used)) => {
            for (key, value, _) in items {
                within(key, used);
                within(value, used);
                assert!(key.end <= value.start, "a key after its value");
            }
        }
        Ok((Reply::Value(Some(item)), used)) => within(item.data, used),
        _ => {}
    }
    for line in bytes.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let _ = tracking_line(line);
        if let Some(Notice::Key(key)) = notice_line(line) {
            assert!(
                key.len() <= line.len(),
                "a notice's key longer than its line"
            );
        }
    }
});
