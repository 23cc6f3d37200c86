#![no_main]
//! Arbitrary bytes through the router-like RESP request loop (chunked feeding, invariants
//! checked by `resp::drive`) and through the backend reply framer. The first byte picks the
//! chunk size and the limits.

use libfuzzer_sys::fuzz_target;
use proto::resp::{self, drive, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(sel & 0x1f) + 1;
    let limits = Limits {
        unauthenticated: sel & 0x20 != 0,
        max_inline_len: if sel & 0x40 != 0 { 40 } else { 64 * 1024 },
        max_bulk_len: if sel & 0x80 != 0 {
            100
        } else {
            512 * 1024 * 1024
        },
        ..Limits::default()
    };
    let chunked = drive::run(rest, chunk, &limits);
    let whole = drive::run(rest, rest.len().max(1), &limits);
    // Reading in pieces must not change what is parsed, except that the "too big" limits
    // count unparsed bytes without a line end, which depends on reads (as in redis-server).
    if chunked != whole {
        let too_big = [
            resp::ERR_TOO_BIG_INLINE,
            resp::ERR_TOO_BIG_MBULK,
            resp::ERR_TOO_BIG_BULK,
        ];
        assert!(
            chunked.error.is_some_and(|e| too_big.contains(&e)),
            "{chunked:?} != {whole:?}"
        );
        assert!(whole.requests.starts_with(&chunked.requests));
    }
    if let Ok(Some(n)) = resp::reply_len(rest) {
        assert!(n <= rest.len());
        let _ = resp::view_reply(&rest[..n]);
    }
});
