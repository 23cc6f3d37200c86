#![no_main]
//! Arbitrary bytes through the server-like parse/consume/swallow loop. The first byte picks
//! the chunk size and limits so partial reads and small item limits are exercised too; the
//! same bytes then go through the router's mcrouter dialect (`lease-get`, `lease-set`).

use libfuzzer_sys::fuzz_target;
use proto::{stream, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(sel & 0x3f) + 1;
    let limits = if sel & 0x40 != 0 {
        Limits {
            item_size_max: 100,
            use_cas: sel & 0x80 != 0,
            max_get_line: 3000,
        }
    } else {
        Limits::default()
    };
    stream::run(rest, chunk, &limits);
    stream::run(rest, rest.len().max(1), &limits);
    stream::run_with(rest, chunk, &limits, proto::parse_mcrouter);
});
