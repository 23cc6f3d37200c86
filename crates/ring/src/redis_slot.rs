//! Redis Cluster's key to hash slot mapping.
//!
//! A key's slot is CRC-16/XMODEM of the key modulo 16384, or of its hash tag when it has one:
//! the bytes between the first `{` and the first `}` after it, when there are any. An empty
//! tag means the whole key, never a later tag (`{}{a}` hashes all five bytes). That is exactly
//! twemproxy's rule for the tag `{}` (both scan the same way); the tests hold the one-pass
//! scan here to `hash_tag_slice`, and the Redis vectors below pin the behaviour.

use crate::hash::CRC16_TABLE;
#[cfg(test)]
use crate::ring::hash_tag_slice;

/// Number of hash slots in a Redis Cluster.
pub const REDIS_SLOTS: usize = 16384;

/// Redis Cluster's hash slot of a key: CRC16 (XMODEM/CCITT, the one in redis' crc16.c) of the
/// key, or of its hash tag (the bytes between the first '{' and the first '}' after it, when
/// that is non-empty), modulo 16384.
pub fn redis_slot(key: &[u8]) -> u16 {
    // Most keys have no tag: one pass hashes while it looks for the '{'.
    let mut crc: u16 = 0;
    for (i, &b) in key.iter().enumerate() {
        if b == b'{' {
            return crc16_slot(tag_after(key, i));
        }
        crc = crc16_step(crc, b);
    }
    crc % REDIS_SLOTS as u16
}

#[inline(always)]
fn crc16_step(crc: u16, b: u8) -> u16 {
    (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)]
}

fn crc16_slot(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &b| crc16_step(crc, b)) % REDIS_SLOTS as u16
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
        fn one_pass_matches_tag_then_crc(key in proptest::collection::vec(
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
