#![no_main]
//! Meta commands only: the first byte picks mg/ms/md/ma/me/mn and the rest is the line (key,
//! flags, tokens) and whatever follows, so the fuzzer spends its time in meta flag, key and
//! base64 parsing rather than discovering the command names.

use libfuzzer_sys::fuzz_target;
use proto::{stream, Limits};

const COMMANDS: [&[u8]; 6] = [b"mg ", b"ms ", b"md ", b"ma ", b"me ", b"mn "];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut input = Vec::with_capacity(rest.len() + 8);
    input.extend_from_slice(COMMANDS[usize::from(sel) % COMMANDS.len()]);
    input.extend_from_slice(rest);
    let limits = Limits {
        item_size_max: if sel & 0x80 != 0 { 100 } else { 1 << 20 },
        ..Limits::default()
    };
    stream::run(&input, usize::from(sel >> 3 & 0xf) + 1, &limits);
    stream::run(&input, input.len(), &limits);
});
