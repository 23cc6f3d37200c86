//! Bob Jenkins' SpookyHash V2 (the version folly ships as `SpookyHashV2`), which mcrouter's
//! WeightedCh3 uses to decide whether a candidate server accepts a key.
//!
//! Words are read little-endian, as the reference does on the x86/ARM machines mcrouter runs on.
//! Messages shorter than 192 bytes take the "short" path (4 lanes), longer ones the 12-lane
//! block path; both are checked against the reference's published `Hash32` answers.

/// The reference's fixed odd constant (`sc_const`).
const CONST: u64 = 0xdead_beef_dead_beef;
/// Bytes per block of the long path.
const BLOCK: usize = 96;
/// Messages shorter than this take the short path.
const SHORT_LIMIT: usize = 2 * BLOCK;

/// The 32-bit hash: the low half of the first 128-bit word, both seeds set to `seed`.
pub fn hash32(message: &[u8], seed: u32) -> u32 {
    hash128(message, u64::from(seed), u64::from(seed)).0 as u32
}

/// The 64-bit hash: the first word of [`hash128`] with both seeds set to `seed`.
pub fn hash64(message: &[u8], seed: u64) -> u64 {
    hash128(message, seed, seed).0
}

/// The full 128-bit hash as two words.
pub fn hash128(message: &[u8], seed1: u64, seed2: u64) -> (u64, u64) {
    if message.len() < SHORT_LIMIT {
        return short(message, seed1, seed2);
    }
    let mut s = [0u64; 12];
    for lane in 0..4 {
        s[lane * 3] = seed1;
        s[lane * 3 + 1] = seed2;
        s[lane * 3 + 2] = CONST;
    }
    let mut blocks = message.chunks_exact(BLOCK);
    for block in &mut blocks {
        mix(&words::<12>(block), &mut s);
    }
    let rest = blocks.remainder();
    let mut last = [0u8; BLOCK];
    last[..rest.len()].copy_from_slice(rest);
    last[BLOCK - 1] = rest.len() as u8;
    let data = words::<12>(&last);
    for (h, d) in s.iter_mut().zip(data) {
        *h = h.wrapping_add(d);
    }
    for _ in 0..3 {
        end_partial(&mut s);
    }
    (s[0], s[1])
}

fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

fn words<const N: usize>(bytes: &[u8]) -> [u64; N] {
    std::array::from_fn(|i| word(&bytes[i * 8..]))
}

/// One 96-byte block into the 12 lanes; each step touches lanes i, i+1, i+2, i+10 and i+11.
fn mix(data: &[u64; 12], s: &mut [u64; 12]) {
    const ROT: [u32; 12] = [11, 32, 43, 31, 17, 28, 39, 57, 55, 54, 22, 46];
    for (i, (&d, &r)) in data.iter().zip(&ROT).enumerate() {
        let (i1, i2, i10, i11) = ((i + 1) % 12, (i + 2) % 12, (i + 10) % 12, (i + 11) % 12);
        s[i] = s[i].wrapping_add(d);
        s[i2] ^= s[i10];
        s[i11] ^= s[i];
        s[i] = s[i].rotate_left(r);
        s[i11] = s[i11].wrapping_add(s[i1]);
    }
}

fn end_partial(s: &mut [u64; 12]) {
    const ROT: [u32; 12] = [44, 15, 34, 21, 38, 33, 10, 13, 38, 53, 42, 54];
    for (i, &r) in ROT.iter().enumerate() {
        let (i1, i2, i11) = ((i + 1) % 12, (i + 2) % 12, (i + 11) % 12);
        s[i11] = s[i11].wrapping_add(s[i1]);
        s[i2] ^= s[i11];
        s[i1] = s[i1].rotate_left(r);
    }
}

/// The four-lane mixer of the short path: lanes (c, d, a, b) rotate through the same three steps.
fn short_mix(h: &mut [u64; 4]) {
    const ROT: [u32; 12] = [50, 52, 30, 41, 54, 48, 38, 37, 62, 34, 5, 36];
    for (step, r) in ROT.iter().enumerate() {
        // Step k rotates lane (k+2)%4, adds lane (k+3)%4 and folds it into lane k%4.
        let (x, y, z) = ((step + 2) % 4, (step + 3) % 4, step % 4);
        h[x] = h[x].rotate_left(*r);
        h[x] = h[x].wrapping_add(h[y]);
        h[z] ^= h[x];
    }
}

fn short_end(h: &mut [u64; 4]) {
    const ROT: [u32; 11] = [15, 52, 26, 51, 28, 9, 47, 54, 32, 25, 63];
    for (step, r) in ROT.iter().enumerate() {
        let (x, y) = ((step + 2) % 4, (step + 3) % 4);
        h[y] ^= h[x];
        h[x] = h[x].rotate_left(*r);
        h[y] = h[y].wrapping_add(h[x]);
    }
}

fn short(message: &[u8], seed1: u64, seed2: u64) -> (u64, u64) {
    // Lanes: h[0] = a, h[1] = b, h[2] = c, h[3] = d.
    let mut h = [seed1, seed2, CONST, CONST];
    let len = message.len();
    let mut rest = message;
    if len > 15 {
        while rest.len() >= 32 {
            h[2] = h[2].wrapping_add(word(rest));
            h[3] = h[3].wrapping_add(word(&rest[8..]));
            short_mix(&mut h);
            h[0] = h[0].wrapping_add(word(&rest[16..]));
            h[1] = h[1].wrapping_add(word(&rest[24..]));
            rest = &rest[32..];
        }
        if rest.len() >= 16 {
            h[2] = h[2].wrapping_add(word(rest));
            h[3] = h[3].wrapping_add(word(&rest[8..]));
            short_mix(&mut h);
            rest = &rest[16..];
        }
    }
    h[3] = h[3].wrapping_add((len as u64) << 56);
    if rest.is_empty() {
        h[2] = h[2].wrapping_add(CONST);
        h[3] = h[3].wrapping_add(CONST);
    } else {
        // Up to 15 tail bytes: the first 8 go into c, the rest into d, both little-endian.
        let mut tail = [0u8; 16];
        tail[..rest.len()].copy_from_slice(rest);
        h[2] = h[2].wrapping_add(word(&tail));
        h[3] = h[3].wrapping_add(word(&tail[8..]));
    }
    short_end(&mut h);
    (h[0], h[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers from the reference test (`TestResults`): `Hash32(buf, len, 0)` where
    /// `buf[i] = i + 128`, for the listed lengths. They cover every short-path tail length,
    /// the 16- and 32-byte chunk boundaries, both sides of the 192-byte switch to the block
    /// path and several block remainders.
    const KNOWN: &[(usize, [u32; 4])] = &[
        (0, [0x6bf50919, 0x70de1d26, 0xa2b37298, 0x35bc5fbf]),
        (4, [0x8223b279, 0x5bcb315e, 0x53fe88a1, 0xf9f1a233]),
        (8, [0xee193982, 0x54f86f29, 0xc8772d36, 0x9ed60886]),
        (12, [0x5f23d1da, 0x1ed9f474, 0xf2ef0c89, 0x83ec01f9]),
        (16, [0xf274736c, 0x7e9ac0df, 0xc7aed250, 0xb1015811]),
        (28, [0x99ae8622, 0x170c658b, 0x149ba493, 0x027bca7c]),
        (32, [0xe5cfc8b6, 0xce01d9d7, 0x11103330, 0x5d1f5ed4]),
        (60, [0x1cd6a5a2, 0x197b402e, 0xc28d0d2b, 0x09c1afb4]),
        (188, [0xe715b13a, 0x0394c3b2, 0x11efbbae, 0xe13d9e19]),
        (192, [0x77e012bd, 0x2d05114c, 0xaecf2ddd, 0xb2a2b4aa]),
        (196, [0xb9429546, 0x55dce815, 0xc89138f8, 0x46dcae20]),
        (252, [0x4d42096f, 0xd6e9456a, 0x0bade318, 0x2f40ee0b]),
        (284, [0x447130aa, 0x8cc4a81f, 0x0868ec83, 0xc22c642d]),
        (508, [0x918fa7c9, 0xaf2e2cd9, 0x82046f8e, 0xcc1c8250]),
    ];

    #[test]
    fn reference_known_answers() {
        let buf: Vec<u8> = (0..512u32).map(|i| (i + 128) as u8).collect();
        for (start, want) in KNOWN {
            for (k, want) in want.iter().enumerate() {
                let len = start + k;
                assert_eq!(hash32(&buf[..len], 0), *want, "length {len}");
            }
        }
    }

    #[test]
    fn words_are_consistent() {
        let msg = b"this is only a test...";
        let (a, _) = hash128(msg, 0, 0);
        assert_eq!(hash64(msg, 0), a);
        assert_eq!(u64::from(hash32(msg, 0)), a & 0xffff_ffff);
    }
}
