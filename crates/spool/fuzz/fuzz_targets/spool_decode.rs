#![no_main]
//! Arbitrary bytes as a delete spool file (`memfleet route --async-dir`, the invalidator's
//! `spool_dir`; one key per line): decoding must never panic, hand back only keys memcached accepts, and call the file
//! clean only when it is exactly those keys' lines (empty lines aside). The decoded keys
//! written back as a spool decode to themselves, clean.

use libfuzzer_sys::fuzz_target;

fn encode(keys: &[Vec<u8>]) -> Vec<u8> {
    keys.iter()
        .flat_map(|k| k.iter().chain(b"\n"))
        .copied()
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let (keys, clean) = spool::decode(data);
    assert!(keys.iter().all(|k| spool::valid_key(k)));
    let lines: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let exact = (data.is_empty() || data.ends_with(b"\n"))
        && lines.len() == keys.len()
        && lines.iter().zip(&keys).all(|(l, k)| *l == k.as_slice());
    assert_eq!(clean, exact, "clean={clean} for {} keys", keys.len());
    let again = encode(&keys);
    assert!(again.len() <= data.len());
    assert_eq!(spool::decode(&again), (keys, true));
});
