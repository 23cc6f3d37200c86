//! Byte layout of one item inside a segment (or a dedicated large buffer).
//!
//! ```text
//! [bits u8][key_len u8][value_len varint 1..5][cas u64][exptime u32][time u32][client flags u32 if HAS_FLAGS][key][value]
//! ```
//! All integers little endian, unaligned. A 10-byte key with a 100-byte value and zero flags
//! costs 19 header bytes.

pub const HAS_FLAGS: u8 = 1;
pub const STALE: u8 = 2;
pub const TOKEN_SENT: u8 = 4;
pub const FETCHED: u8 = 8;
/// Unlinked from the index; its bytes are garbage until the segment is compacted or freed.
pub const DEAD: u8 = 16;
/// Read since it was written (or since it was last given a second chance by eviction).
pub const ACCESSED: u8 = 32;

/// Decoded positions of an item's fields, relative to the item start.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub bits: u8,
    pub key_len: usize,
    pub value_len: usize,
    /// Offset of the cas field (exptime and time follow it).
    pub fixed: usize,
    pub key: usize,
    pub value: usize,
}

impl Layout {
    pub fn total(&self) -> usize {
        self.value + self.value_len
    }
}

pub fn varint_len(v: usize) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

pub fn encoded_len(key_len: usize, value_len: usize, flags: u32) -> usize {
    2 + varint_len(value_len) + 16 + if flags != 0 { 4 } else { 0 } + key_len + value_len
}

pub fn parse(buf: &[u8]) -> Layout {
    let bits = buf[0];
    let key_len = buf[1] as usize;
    let mut value_len = 0usize;
    let mut shift = 0;
    let mut p = 2;
    loop {
        let b = buf[p];
        p += 1;
        value_len |= ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let fixed = p;
    let key = fixed + 16 + if bits & HAS_FLAGS != 0 { 4 } else { 0 };
    Layout {
        bits,
        key_len,
        value_len,
        fixed,
        key,
        value: key + key_len,
    }
}

/// Header fields written for a new item.
pub struct Header {
    pub bits: u8,
    pub cas: u64,
    pub exptime: u32,
    pub time: u32,
    pub flags: u32,
}

/// Writes the header and key; returns the layout so the caller can fill the value.
pub fn write_header(buf: &mut [u8], h: &Header, key: &[u8], value_len: usize) -> Layout {
    let mut bits = h.bits & !(HAS_FLAGS | DEAD);
    if h.flags != 0 {
        bits |= HAS_FLAGS;
    }
    buf[0] = bits;
    buf[1] = key.len() as u8;
    let mut p = 2;
    let mut v = value_len;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[p] = b;
            p += 1;
            break;
        }
        buf[p] = b | 0x80;
        p += 1;
    }
    let fixed = p;
    buf[p..p + 8].copy_from_slice(&h.cas.to_le_bytes());
    buf[p + 8..p + 12].copy_from_slice(&h.exptime.to_le_bytes());
    buf[p + 12..p + 16].copy_from_slice(&h.time.to_le_bytes());
    p += 16;
    if h.flags != 0 {
        buf[p..p + 4].copy_from_slice(&h.flags.to_le_bytes());
        p += 4;
    }
    buf[p..p + key.len()].copy_from_slice(key);
    Layout {
        bits,
        key_len: key.len(),
        value_len,
        fixed,
        key: p,
        value: p + key.len(),
    }
}

pub fn cas(buf: &[u8], l: &Layout) -> u64 {
    u64::from_le_bytes(buf[l.fixed..l.fixed + 8].try_into().unwrap())
}
pub fn set_cas(buf: &mut [u8], l: &Layout, v: u64) {
    buf[l.fixed..l.fixed + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn exptime(buf: &[u8], l: &Layout) -> u32 {
    u32::from_le_bytes(buf[l.fixed + 8..l.fixed + 12].try_into().unwrap())
}
pub fn set_exptime(buf: &mut [u8], l: &Layout, v: u32) {
    buf[l.fixed + 8..l.fixed + 12].copy_from_slice(&v.to_le_bytes());
}
pub fn time(buf: &[u8], l: &Layout) -> u32 {
    u32::from_le_bytes(buf[l.fixed + 12..l.fixed + 16].try_into().unwrap())
}
pub fn set_time(buf: &mut [u8], l: &Layout, v: u32) {
    buf[l.fixed + 12..l.fixed + 16].copy_from_slice(&v.to_le_bytes());
}
pub fn flags(buf: &[u8], l: &Layout) -> u32 {
    if l.bits & HAS_FLAGS == 0 {
        0
    } else {
        u32::from_le_bytes(buf[l.fixed + 16..l.fixed + 20].try_into().unwrap())
    }
}

/// Smallest item: empty key and value.
pub const MIN_ITEM: usize = 19;

/// Fills `buf` (empty, or at least `MIN_ITEM` and at most 16,403 bytes) with one dead item, so
/// walks over a segment skip it: bytes in front of a value received in place.
pub fn write_filler(buf: &mut [u8]) {
    let n = buf.len();
    if n == 0 {
        return;
    }
    debug_assert!((MIN_ITEM..=16_403).contains(&n));
    // value_len's varint takes one byte up to 127, two from 128.
    let (key_len, value_len) = match n {
        ..=146 => (0, n - MIN_ITEM),
        147 => (1, 127),
        _ => (0, n - MIN_ITEM - 1),
    };
    let h = Header {
        bits: 0,
        cas: 0,
        exptime: 0,
        time: 0,
        flags: 0,
    };
    write_header(buf, &h, &[0u8; 1][..key_len], value_len);
    buf[0] |= DEAD;
    debug_assert_eq!(parse(buf).total(), n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_budget() {
        for (klen, vlen, flags) in [(11, 100, 0u32), (1, 0, 7), (250, 200_000, u32::MAX)] {
            let key = vec![b'k'; klen];
            let n = encoded_len(klen, vlen, flags);
            let mut buf = vec![0u8; n];
            let h = Header {
                bits: FETCHED | DEAD,
                cas: 99,
                exptime: 5,
                time: 6,
                flags,
            };
            let l = write_header(&mut buf, &h, &key, vlen);
            let p = parse(&buf);
            assert_eq!(p.total(), n);
            assert_eq!(p.value, l.value);
            assert_eq!(p.key_len, klen);
            assert_eq!(p.value_len, vlen);
            assert_eq!(p.bits & DEAD, 0);
            assert_eq!(p.bits & FETCHED, FETCHED);
            assert_eq!(cas(&buf, &p), 99);
            assert_eq!(exptime(&buf, &p), 5);
            assert_eq!(time(&buf, &p), 6);
            assert_eq!(super::flags(&buf, &p), flags);
            assert_eq!(&buf[p.key..p.key + klen], &key[..]);
        }
        // The headline item: 11-byte key, 100-byte value, no flags => 19 bytes of header.
        assert_eq!(encoded_len(11, 100, 0), 19 + 111);
    }

    #[test]
    fn fillers_cover_every_gap_size() {
        for n in [0, MIN_ITEM, 100, 146, 147, 148, 300, 2100, 16_403] {
            let mut buf = vec![0xAAu8; n];
            write_filler(&mut buf);
            if n > 0 {
                let l = parse(&buf);
                assert_eq!(l.total(), n);
                assert_ne!(l.bits & DEAD, 0);
            }
        }
    }
}
