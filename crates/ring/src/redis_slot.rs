//! Redis Cluster's key to hash slot mapping.
//!
//! A key's slot is CRC-16/XMODEM of the key modulo 16384, or of its hash tag when it has one:
//! the bytes between the first `{` and the first `}` after it, when there are any. An empty
//! tag means the whole key, never a later tag (`{}{a}` hashes all five bytes). That is exactly
//! twemproxy's rule for the tag `{}` (both scan the same way); the tests hold the scan
//! here to `hash_tag_slice`, and the Redis vectors below pin the behaviour.

use crate::hash::CRC16_TABLE;
#[cfg(test)]
use crate::ring::hash_tag_slice;

/// Number of hash slots in a Redis Cluster.
pub const REDIS_SLOTS: usize = 16384;

/// Redis Cluster's hash slot of a key: CRC16 (XMODEM/CCITT, the one in redis' crc16.c) of the
/// key, or of its hash tag (the bytes between the first '{' and the first '}' after it, when
/// that is non-empty), modulo 16384.
pub fn redis_slot(key: &[u8]) -> u16 {
    // Most keys have no '{': a word-wide look for one, then the CRC two bytes a step.
    match has_open_brace(key) {
        false => crc16_slot(key),
        true => crc16_slot(tag_of(key)),
    }
}

fn has_open_brace(key: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const BRACES: u64 = u64::from_ne_bytes([b'{'; 8]);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_ne_bytes(w.try_into().expect("8 bytes")) ^ BRACES;
        // Nonzero exactly when a byte of x is zero, i.e. a byte of w is '{'.
        if x.wrapping_sub(ONES) & !x & (ONES << 7) != 0 {
            return true;
        }
    }
    words.remainder().contains(&b'{')
}

#[inline(always)]
fn crc16_step(crc: u16, b: u8) -> u16 {
    (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)]
}

/// Two CRC steps at once: the CRC being linear, stepping `crc` over bytes (a, b) gives
/// `CRC16_PAIR[(crc >> 8) ^ a] ^ CRC16_TABLE[(crc & 0xff) ^ b]`.
static CRC16_PAIR: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let t = CRC16_TABLE[i];
        table[i] = (t << 8) ^ CRC16_TABLE[(t >> 8) as usize];
        i += 1;
    }
    table
};

fn crc16_slot(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    let mut pairs = bytes.chunks_exact(2);
    for p in &mut pairs {
        crc = CRC16_PAIR[usize::from((crc >> 8) as u8 ^ p[0])]
            ^ CRC16_TABLE[usize::from(crc as u8 ^ p[1])];
    }
    for &b in pairs.remainder() {
        crc = crc16_step(crc, b);
    }
    crc % REDIS_SLOTS as u16
}

/// The bytes Redis Cluster hashes for a key with a '{'.
fn tag_of(key: &[u8]) -> &[u8] {
    let open = key.iter().position(|&b| b == b'{').expect("a '{'");
    tag_after(key, open)
}

/// The bytes hashed for `key` whose first '{' is at `open`.
fn tag_after(key: &[u8], open: usize) -> &[u8] {
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// The bytes of `key` that Redis Cluster hashes: its tag when non-empty, else the whole key.
#[cfg(test)]
fn redis_hash_tag(key: &[u8]) -> &[u8] {
    hash_tag_slice(key, Some(*b"{}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::crc16_xmodem;
    use proptest::prelude::*;

    /// `CLUSTER KEYSLOT` answers of a real redis-server (see tests/vectors/README.md).
    const VECTORS: &str = include_str!("../../../tests/vectors/redis-cluster-slots.tsv");

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn matches_redis_server() {
        let mut n = 0;
        for line in VECTORS.lines() {
            let (hex, slot) = line.split_once('\t').unwrap();
            let key = unhex(hex);
            assert_eq!(
                redis_slot(&key),
                slot.parse::<u16>().unwrap(),
                "key {key:?}"
            );
            n += 1;
        }
        assert!(n >= 60, "only {n} vectors");
    }

    #[test]
    fn open_brace_found_at_any_place_and_only_there() {
        for len in 1..24 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut key = vec![b'a'; len];
                    key[at] = b;
                    assert_eq!(has_open_brace(&key), b == b'{', "{key:?}");
                }
            }
        }
    }

    #[test]
    fn tag_edge_cases() {
        // Empty tag: the whole key, not the next tag.
        assert_eq!(redis_hash_tag(b"{}"), b"{}");
        assert_eq!(redis_hash_tag(b"{}{a}"), b"{}{a}");
        assert_eq!(redis_hash_tag(b"a{b}c{d}"), b"b");
        assert_eq!(redis_hash_tag(b"{"), b"{");
        // A '}' before the first '{' does not close it.
        assert_eq!(redis_hash_tag(b"}{"), b"}{");
        assert_eq!(redis_hash_tag(b"}{a}"), b"a");
        assert_eq!(redis_hash_tag(b"{{a}}"), b"{a");
        assert_eq!(redis_hash_tag(b""), b"");
        assert_eq!(redis_hash_tag(b"\xff{\x00\x80}\x01"), b"\x00\x80");
        assert_eq!(redis_slot(b""), 0);
        // The check value of CRC-16/XMODEM.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
    }

    proptest! {
        #[test]
        fn tagged_key_hashes_like_its_tag(
            pre in proptest::collection::vec(any::<u8>().prop_filter("no {", |b| *b != b'{'), 0..20),
            tag in proptest::collection::vec(any::<u8>().prop_filter("no }", |b| *b != b'}'), 1..20),
            post in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut key = pre;
            key.push(b'{');
            key.extend_from_slice(&tag);
            key.push(b'}');
            key.extend_from_slice(&post);
            prop_assert_eq!(redis_slot(&key), redis_slot(&tag));
        }

        #[test]
        fn matches_tag_then_crc(key in proptest::collection::vec(
            prop_oneof![Just(b'{'), Just(b'}'), any::<u8>()], 0..40)
        ) {
            let want = (usize::from(crc16_xmodem(redis_hash_tag(&key))) % REDIS_SLOTS) as u16;
            prop_assert_eq!(redis_slot(&key), want);
        }

        #[test]
        fn slot_is_in_range(key in proptest::collection::vec(any::<u8>(), 0..100)) {
            prop_assert!((redis_slot(&key) as usize) < REDIS_SLOTS);
        }
    }
}
