//! mcrouter's consistent hash `furc_hash` (its Ch3 hash function) and its `crc32_hash`.
//!
//! furc walks a binary decision tree over the pool size. The bits it needs come from a
//! stream: word 0 is MurmurHash64A of the key (seed 4193360111) and word n is MurmurHash64A
//! of the 8 little-endian bytes of word n-1 under the same seed, so long keys cost no more
//! than short ones. A try that lands outside the pool is retried further along the stream;
//! after 32 tries the answer is 0.

/// MurmurHash64A seed mcrouter chose for diffusion under recursive application.
pub const FURC_SEED: u64 = 4_193_360_111;
/// Bits between the draws of one try; it limits pools to 2^23 servers.
const SHIFT: u32 = 23;
/// Tries before giving up on an in-range answer.
const MAX_TRIES: u32 = 32;
/// The largest pool furc places keys in: 2^23 = 8,388,608 servers.
pub const FURC_MAX_POOL_SIZE: u32 = 1 << SHIFT;

/// Words a lookup can reach: bit positions stay below `32 + MAX_TRIES * SHIFT * 32` (each
/// try reads at most 32 bits, SHIFT apart, and a reset only moves back down).
const MAX_WORDS: usize = (32 + (MAX_TRIES * SHIFT * 32) as usize) / 64 + 1;

/// The lazily extended stream of 64-bit words furc draws its bits from, on the stack.
struct BitStream<'k> {
    key: &'k [u8],
    words: [u64; MAX_WORDS],
    filled: usize,
}

impl BitStream<'_> {
    fn bit(&mut self, index: u32) -> bool {
        let word = (index >> 6) as usize;
        while self.filled <= word {
            self.words[self.filled] = match self.filled {
                0 => murmur2::murmur64a(self.key, FURC_SEED),
                n => murmur2::murmur64a(&self.words[n - 1].to_le_bytes(), FURC_SEED),
            };
            self.filled += 1;
        }
        (self.words[word] >> (index & 63)) & 1 == 1
    }
}

/// The server index in `0..pool_size` that furc gives `key` (0 for pools of 0 or 1).
///
/// Pools larger than [`FURC_MAX_POOL_SIZE`] are accepted as mcrouter's C function accepts
/// them; config validation refuses them before they get here.
pub fn furc_hash(key: &[u8], pool_size: u32) -> u32 {
    if pool_size <= 1 {
        return 0;
    }
    let mut bits = BitStream {
        key,
        words: [0; MAX_WORDS],
        filled: 0,
    };
    // Depth of the tree: the number of bits in pool_size - 1.
    let mut depth = 32 - (pool_size - 1).leading_zeros();
    let mut at = depth;
    for _ in 0..MAX_TRIES {
        // A clear bit at the current position means "the answer is in a smaller subtree".
        while !bits.bit(at) {
            depth -= 1;
            if depth == 0 {
                return 0;
            }
            at = depth;
        }
        at += SHIFT;
        let mut num = 1u32;
        for _ in 1..depth {
            num = (num << 1) | u32::from(bits.bit(at));
            at += SHIFT;
        }
        if num < pool_size {
            return num;
        }
    }
    0
}

/// mcrouter's `crc32_hash`: the standard (zlib) CRC-32 of the key.
pub fn crc32_hash(key: &[u8]) -> u32 {
    crc32fast::hash(key)
}

/// The server index mcrouter's Crc32 hash function gives `key` in a pool of `pool_size`.
pub fn crc32_index(key: &[u8], pool_size: u32) -> u32 {
    if pool_size == 0 {
        return 0;
    }
    (crc32_hash(key) & 0x7fff_ffff) % pool_size
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers mcrouter's own unit tests assert for furc.
    #[test]
    fn mcrouter_unit_test_answers() {
        assert_eq!(furc_hash(b"sample", 100), 97);
        assert_eq!(furc_hash(b"", 100), 72);
        assert_eq!(furc_hash(b"sample", 1), 0);
        assert_eq!(furc_hash(b"", FURC_MAX_POOL_SIZE), 6_173_600);
        assert_eq!(furc_hash(b"sample", FURC_MAX_POOL_SIZE), 5_167_780);
        let mut counts = [0u32; 3];
        for i in 0..1000 {
            counts[furc_hash(i.to_string().as_bytes(), 3) as usize] += 1;
        }
        assert_eq!(counts, [307, 342, 351]);
    }

    /// Keys of every byte value (mcrouter's test builds them from signed chars -128..127).
    #[test]
    fn all_byte_values() {
        let mut key: Vec<u8> = (0..256u32).map(|i| (i as i32 - 128) as i8 as u8).collect();
        assert_eq!(furc_hash(&key, 99_999), 31_015);
        key.reverse();
        assert_eq!(furc_hash(&key, 99_999), 67_101);
    }

    proptest::proptest! {
        /// Any key and any pool size (beyond furc's maximum too, as the C accepts) gives an
        /// index inside the pool without running off the bit stream.
        #[test]
        fn index_is_in_range(key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
                             pool in 1u32..=u32::MAX) {
            proptest::prop_assert!(furc_hash(&key, pool) < pool);
        }
    }

    #[test]
    fn crc32_known_answer() {
        // The CRC-32 check value.
        assert_eq!(crc32_hash(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            crc32_index(b"123456789", 7),
            (0xcbf4_3926 & 0x7fff_ffff) % 7
        );
    }
}
