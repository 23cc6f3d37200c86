#![no_main]
//! Arbitrary bytes as a warm-restart file (`memfleet serve -e FILE`), read the way the server
//! reads one: open, check `-m`/`-I`, then block by block. A corrupt or truncated file must be
//! refused, never panic, and never make the reader allocate far more than the file holds
//! (run with `-malloc_limit_mb=64`: the inputs are a few KB). Every record handed out must be
//! within the limits the file was checked against, and an accepted file must write back
//! (through `Writer`, block for block) to the same bytes.
//!
//! Every frame carries a CRC, which random mutations almost never keep right, so each input
//! is also loaded with its frames' checksums recomputed: that lets the fuzzer reach the
//! lengths and records behind them.

use libfuzzer_sys::fuzz_target;
use store::snapshot::{Reader, Writer, FRAME_HEAD, MAGIC};

/// Largest `-I` memfleet serve accepts (as memcached: 1 GB).
const ITEM_SIZE_MAX_LIMIT: u64 = 1 << 30;

fuzz_target!(|data: &[u8]| {
    load(data);
    let mut sealed = data.to_vec();
    reseal(&mut sealed);
    load(&sealed);
});

/// Recomputes the checksum of every frame after the magic (of what is there of a cut one).
fn reseal(file: &mut [u8]) {
    let mut at = MAGIC.len();
    while at + FRAME_HEAD <= file.len() {
        let len = u32::from_le_bytes(file[at + 1..at + 5].try_into().unwrap()) as usize;
        let end = (at + FRAME_HEAD).saturating_add(len).min(file.len());
        let mut h = crc32fast::Hasher::new();
        h.update(&file[at..at + 5]);
        h.update(&file[at + FRAME_HEAD..end]);
        file[at + 5..at + FRAME_HEAD].copy_from_slice(&h.finalize().to_le_bytes());
        at = end;
    }
}

fn load(data: &[u8]) {
    let Ok(mut reader) = Reader::open(data) else {
        return;
    };
    let header = reader.header().clone();
    // The server passes its own settings; take the file's, within what a server can have.
    let item_size_max = header.item_size_max.min(ITEM_SIZE_MAX_LIMIT);
    if reader.expect(header.mem_limit, item_size_max).is_err() {
        assert_ne!(item_size_max, header.item_size_max);
        return;
    }
    let mut rewritten = Writer::header(&header);
    let mut writer = Writer::new();
    let mut empty_block = false;
    let (mut count, mut max_cas) = (0u64, 0u64);
    let accepted = loop {
        match reader.next_block() {
            Ok(Some(block)) => {
                let n = block.len();
                empty_block |= n == 0;
                let mut seen = 0;
                for r in block {
                    assert!((1..=250).contains(&r.key.len()), "key of {}", r.key.len());
                    assert!(r.value.len() as u64 <= item_size_max);
                    writer.push(&r);
                    max_cas = max_cas.max(r.cas);
                    seen += 1;
                }
                assert_eq!(seen, n, "block length and its records differ");
                count += n as u64;
                rewritten.extend_from_slice(writer.take_block());
            }
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    if !accepted {
        return;
    }
    assert_eq!(reader.totals(), (count, max_cas));
    assert_eq!(writer.items(), count);
    rewritten.extend_from_slice(&writer.finish());
    // An empty ITEMS frame is accepted but never written; a version the writer cuts or
    // that is not UTF-8 does not come back byte for byte either.
    let head = Writer::header(&header);
    if !empty_block && data.starts_with(&head) {
        assert_eq!(
            rewritten, data,
            "an accepted file does not write back the same"
        );
    }
}
