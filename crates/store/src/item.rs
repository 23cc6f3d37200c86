//! Byte layout of one item inside a segment (or a dedicated large buffer).
//!
//! ```text
//! [bits u8][key_len u8][value_len varint 1..5][time u16][exptime u32 if HAS_EXPTIME][client flags u32 if HAS_FLAGS][cas u32, or u64 if CAS_WIDE][key][value]
//! ```
//! time, read on every lookup, sits at a fixed offset after the varint; exptime right after
//! it (0 when absent); the variable-width cas comes last.
//! All integers little endian, unaligned. A 10-byte key with a 100-byte value, no exptime,
//! zero flags and a cas below 2^32 costs 9 header bytes. The widths are fixed when the item
//! is written: an in-place update that does not fit (`cas_fits`, `exptime_fits`) stores a new
//! item instead.
//!
//! time (last access or update) is kept as the low 16 bits of the unix time and read back as
//! the latest time at or before `now` with those bits (`decode_time`): exact while the item
//! was touched less than ~18 hours ago. `Store::reclaim` walks every item well within that
//! and moves the stamp of one idle longer than `IDLE_CAP` forward to `now - IDLE_CAP`, so
//! an idle time reads exactly up to 12 hours and as 12 hours or a little more beyond.

pub const HAS_FLAGS: u8 = 1;
pub const STALE: u8 = 2;
pub const TOKEN_SENT: u8 = 4;
pub const FETCHED: u8 = 8;
/// Unlinked from the index; its bytes are garbage until the segment is compacted or freed.
pub const DEAD: u8 = 16;
/// Read since it was written (or since it was last given a second chance by eviction).
pub const ACCESSED: u8 = 32;
/// The cas takes 8 bytes (it did not fit in 4 when the item was written).
pub const CAS_WIDE: u8 = 64;
/// The item has an exptime field (items that never expire leave it out: most caches
/// store most items with exptime 0, and the 4 bytes are ~3% of a 100-byte item).
pub const HAS_EXPTIME: u8 = 128;

/// Decoded positions of an item's fields, relative to the item start.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub bits: u8,
    pub key_len: usize,
    pub value_len: usize,
    /// Offset of time (exptime if any, then the flags if any, then the cas follow it).
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

/// Bytes the cas takes: 4 while it fits, else 8 (cas values are per-shard counters, so
/// 4 until a shard has stored 2^28 items; explicit `E` values may be wide at once).
pub fn cas_len(cas: u64) -> usize {
    if cas > u32::MAX as u64 {
        8
    } else {
        4
    }
}

/// Whether `cas` can be written in place into the item laid out as `l`.
pub fn cas_fits(l: &Layout, cas: u64) -> bool {
    l.bits & CAS_WIDE != 0 || cas_len(cas) == 4
}

/// Whether exptime `e` can be written in place into the item laid out as `l`.
pub fn exptime_fits(l: &Layout, e: u32) -> bool {
    e == 0 || l.bits & HAS_EXPTIME != 0
}

/// 4 if the item has an exptime field, else 0 (branch-free).
fn exptime_len(bits: u8) -> usize {
    ((bits & HAS_EXPTIME) >> 5) as usize
}

/// time + exptime + flags + cas, branch-free: it is on every lookup's path.
fn fixed_len(bits: u8) -> usize {
    6 + exptime_len(bits) + ((bits & HAS_FLAGS) as usize) * 4 + ((bits & CAS_WIDE) >> 4) as usize
}

/// Offset of the client flags (when present).
fn flags_at(l: &Layout) -> usize {
    l.fixed + TIME_LEN + exptime_len(l.bits)
}

/// Offset of the cas.
fn cas_at(l: &Layout) -> usize {
    flags_at(l) + ((l.bits & HAS_FLAGS) as usize) * 4
}

/// Size of an item whose header will hold `cas`, with an exptime field when `exptime_field`
/// (see `Header::exptime_field`).
pub fn encoded_len(
    key_len: usize,
    value_len: usize,
    flags: u32,
    cas: u64,
    exptime_field: bool,
) -> usize {
    2 + varint_len(value_len)
        + cas_len(cas)
        + TIME_LEN
        + if exptime_field { 4 } else { 0 }
        + if flags != 0 { 4 } else { 0 }
        + key_len
        + value_len
}

/// The largest header an item of this key, value and flags can get: wide cas, exptime field.
pub fn max_header_len(key_len: usize, value_len: usize, flags: u32) -> usize {
    encoded_len(key_len, value_len, flags, u64::MAX, true) - value_len
}

/// `parse` for bytes that may not be an item (read back from flash): None unless the
/// header is well formed and the item fills `buf` exactly.
pub fn parse_checked(buf: &[u8]) -> Option<Layout> {
    let mut p = 2;
    loop {
        let b = *buf.get(p)?;
        p += 1;
        if b & 0x80 == 0 {
            break;
        }
        if p > 6 {
            return None;
        }
    }
    let l = parse(buf);
    (l.bits & DEAD == 0 && l.total() == buf.len()).then_some(l)
}

#[inline]
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
    let key = fixed + fixed_len(bits);
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
#[derive(Clone, Copy)]
pub struct Header {
    pub bits: u8,
    pub cas: u64,
    pub exptime: u32,
    pub time: u32,
    pub flags: u32,
    /// Write an exptime field even when `exptime` is 0 (then a later TTL is set in place).
    /// Sizes come from `encoded_len` with `exptime_field(exptime, force)` of the same values.
    pub force_exptime: bool,
}

/// Whether an item written with this exptime gets the field.
pub fn exptime_field(exptime: u32, force: bool) -> bool {
    exptime != 0 || force
}

impl Header {
    /// Size of the item this header makes with the given key and value lengths.
    pub fn encoded_len(&self, key_len: usize, value_len: usize) -> usize {
        encoded_len(
            key_len,
            value_len,
            self.flags,
            self.cas,
            exptime_field(self.exptime, self.force_exptime),
        )
    }
}

/// Writes the header and key; returns the layout so the caller can fill the value.
pub fn write_header(buf: &mut [u8], h: &Header, key: &[u8], value_len: usize) -> Layout {
    write_header_wide(buf, h, key, value_len, false)
}

/// `write_header`, with the cas in 8 bytes even if it would fit in 4 when `wide`.
pub fn write_header_wide(
    buf: &mut [u8],
    h: &Header,
    key: &[u8],
    value_len: usize,
    wide: bool,
) -> Layout {
    let mut bits = h.bits & !(HAS_FLAGS | DEAD | CAS_WIDE | HAS_EXPTIME);
    if h.flags != 0 {
        bits |= HAS_FLAGS;
    }
    if wide || cas_len(h.cas) == 8 {
        bits |= CAS_WIDE;
    }
    if exptime_field(h.exptime, h.force_exptime) {
        bits |= HAS_EXPTIME;
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
    buf[p..p + TIME_LEN].copy_from_slice(&stamp(h.time).to_le_bytes());
    p += TIME_LEN;
    if bits & HAS_EXPTIME != 0 {
        buf[p..p + 4].copy_from_slice(&h.exptime.to_le_bytes());
        p += 4;
    }
    if h.flags != 0 {
        buf[p..p + 4].copy_from_slice(&h.flags.to_le_bytes());
        p += 4;
    }
    if bits & CAS_WIDE != 0 {
        buf[p..p + 8].copy_from_slice(&h.cas.to_le_bytes());
        p += 8;
    } else {
        buf[p..p + 4].copy_from_slice(&(h.cas as u32).to_le_bytes());
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

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
}

pub fn cas(buf: &[u8], l: &Layout) -> u64 {
    let at = cas_at(l);
    if l.bits & CAS_WIDE != 0 {
        u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
    } else {
        u32_at(buf, at) as u64
    }
}
/// Callers check `cas_fits` first.
pub fn set_cas(buf: &mut [u8], l: &Layout, v: u64) {
    debug_assert!(cas_fits(l, v));
    let at = cas_at(l);
    if l.bits & CAS_WIDE != 0 {
        buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
    } else {
        buf[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
    }
}
pub fn exptime(buf: &[u8], l: &Layout) -> u32 {
    if l.bits & HAS_EXPTIME == 0 {
        0
    } else {
        u32_at(buf, l.fixed + TIME_LEN)
    }
}
/// Callers check `exptime_fits` first.
pub fn set_exptime(buf: &mut [u8], l: &Layout, v: u32) {
    debug_assert!(exptime_fits(l, v));
    if l.bits & HAS_EXPTIME != 0 {
        let at = l.fixed + TIME_LEN;
        buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}
/// Last access or update time, as of `now` (see the module comment).
pub fn time(buf: &[u8], l: &Layout, now: u32) -> u32 {
    decode_time(u16::from_le_bytes([buf[l.fixed], buf[l.fixed + 1]]), now)
}
pub fn set_time(buf: &mut [u8], l: &Layout, v: u32) {
    buf[l.fixed..l.fixed + TIME_LEN].copy_from_slice(&stamp(v).to_le_bytes());
}
pub fn flags(buf: &[u8], l: &Layout) -> u32 {
    if l.bits & HAS_FLAGS == 0 {
        0
    } else {
        u32_at(buf, flags_at(l))
    }
}

/// Bytes of the time field.
const TIME_LEN: usize = 2;
/// Stamps up to this many seconds ahead of `now` read as ahead, not as ~18 hours old: a
/// worker may stamp an item with a clock read a moment after another's `now`.
const TIME_AHEAD: u32 = 1024;
/// Idle times up to this are kept exact (12 hours); `Store::reclaim` keeps longer ones here.
pub const IDLE_CAP: u32 = 12 * 3600;

fn stamp(t: u32) -> u16 {
    t as u16
}

/// The time with low 16 bits `stamp` nearest before `now` (up to `TIME_AHEAD` after it).
pub fn decode_time(stamp: u16, now: u32) -> u32 {
    let back = u32::from((now as u16).wrapping_sub(stamp));
    if back > (1 << 16) - TIME_AHEAD {
        now.wrapping_add((1 << 16) - back)
    } else {
        now.saturating_sub(back)
    }
}

/// Whether the item was idle longer than `IDLE_CAP` at `now`: its stamp must then be moved
/// (`cap_idle`) before its idle time outgrows what 16 bits tell apart.
pub fn idle_past_cap(buf: &[u8], l: &Layout, now: u32) -> bool {
    now.saturating_sub(time(buf, l, now)) > IDLE_CAP
}

/// Moves the stamp of an item idle longer than `IDLE_CAP` at `now` forward to `IDLE_CAP`
/// ago. Returns whether it moved.
pub fn cap_idle(buf: &mut [u8], l: &Layout, now: u32) -> bool {
    if !idle_past_cap(buf, l, now) {
        return false;
    }
    set_time(buf, l, now - IDLE_CAP);
    true
}

/// Smallest item: empty key and value, no exptime, 4-byte cas.
pub const MIN_ITEM: usize = 9;
/// Largest filler `write_filler` makes (2-byte value length).
pub const MAX_FILLER: usize = MIN_ITEM + 1 + 0x3fff;

/// Fills `buf` (empty, or `MIN_ITEM..=MAX_FILLER` bytes) with one dead item, so walks over
/// a segment skip it: bytes in front of a value received in place.
pub fn write_filler(buf: &mut [u8]) {
    let n = buf.len();
    if n == 0 {
        return;
    }
    debug_assert!((MIN_ITEM..=MAX_FILLER).contains(&n));
    // value_len's varint takes one byte up to 127, two from 128.
    let (key_len, value_len) = match n {
        _ if n <= MIN_ITEM + 127 => (0, n - MIN_ITEM),
        _ if n == MIN_ITEM + 128 => (1, 127),
        _ => (0, n - MIN_ITEM - 1),
    };
    let h = Header {
        bits: 0,
        cas: 0,
        exptime: 0,
        time: 0,
        flags: 0,
        force_exptime: false,
    };
    write_header(buf, &h, &[0u8; 1][..key_len], value_len);
    buf[0] |= DEAD;
    debug_assert_eq!(parse(buf).total(), n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: u32 = 1_700_000_000;

    #[test]
    fn roundtrip_and_budget() {
        let cases = [0u64, 1, u32::MAX as u64, u32::MAX as u64 + 1, u64::MAX];
        for (i, &c) in cases.iter().enumerate() {
            for (klen, vlen, flags) in [
                (11, 100, 0u32),
                (1, 0, 1),
                (250, 1 << 20, u32::MAX),
                (250, 0, 0),
                (1, 1 << 20, 0),
            ] {
                let key = vec![b'k'; klen];
                let exp = [0, 1, u32::MAX][i % 3];
                let force = klen % 2 == 0;
                let n = encoded_len(klen, vlen, flags, c, exptime_field(exp, force));
                let mut buf = vec![0u8; n];
                let h = Header {
                    bits: FETCHED | DEAD | HAS_EXPTIME,
                    cas: c,
                    exptime: exp,
                    time: NOW - 6,
                    flags,
                    force_exptime: force,
                };
                assert_eq!(h.encoded_len(klen, vlen), n);
                let l = write_header(&mut buf, &h, &key, vlen);
                let p = parse(&buf);
                assert_eq!(p.total(), n);
                assert_eq!(p.value, l.value);
                assert_eq!(p.key_len, klen);
                assert_eq!(p.value_len, vlen);
                assert_eq!(p.bits & DEAD, 0);
                assert_eq!(p.bits & FETCHED, FETCHED);
                assert_eq!(p.bits & CAS_WIDE != 0, c > u32::MAX as u64);
                assert_eq!(p.bits & HAS_EXPTIME != 0, exp != 0 || force);
                assert_eq!(cas(&buf, &p), c);
                assert_eq!(exptime(&buf, &p), exp);
                assert_eq!(time(&buf, &p, NOW), NOW - 6);
                assert_eq!(super::flags(&buf, &p), flags);
                assert_eq!(&buf[p.key..p.key + klen], &key[..]);
                // In-place updates keep the neighbours intact.
                let new_cas = if cas_fits(&p, u64::MAX) {
                    u64::MAX - 1
                } else {
                    7
                };
                // Without an exptime field only 0 can be written in place.
                assert_eq!(exptime_fits(&p, 8), exp != 0 || force);
                assert!(exptime_fits(&p, 0));
                let new_exp = if exptime_fits(&p, 8) { 8 } else { 0 };
                set_cas(&mut buf, &p, new_cas);
                set_exptime(&mut buf, &p, new_exp);
                set_time(&mut buf, &p, NOW + 9);
                assert_eq!(cas(&buf, &p), new_cas);
                assert_eq!(exptime(&buf, &p), new_exp);
                assert_eq!(time(&buf, &p, NOW + 9), NOW + 9);
                assert_eq!(super::flags(&buf, &p), flags);
                assert_eq!(&buf[p.key..p.key + klen], &key[..]);
            }
        }
        // The headline item: 11-byte key, 100-byte value, no exptime, no flags, cas < 2^32 =>
        // 9 bytes of header; an exptime costs 4 more, a wide cas 4 more, flags 4 more.
        assert_eq!(encoded_len(11, 100, 0, 1 << 20, false), 9 + 111);
        assert_eq!(encoded_len(11, 100, 0, 1 << 20, true), 13 + 111);
        assert_eq!(encoded_len(11, 100, 0, 1 << 40, true), 17 + 111);
        assert_eq!(encoded_len(11, 100, 1, 1 << 20, false), 13 + 111);
        assert_eq!(max_header_len(11, 100, 0), 17 + 11);
        assert_eq!(max_header_len(11, 100, 7), 21 + 11);
    }

    #[test]
    fn a_narrow_cas_refuses_wide_updates_and_a_forced_wide_one_takes_them() {
        let mut buf = vec![0u8; 64];
        let h = Header {
            bits: 0,
            cas: 5,
            exptime: 0,
            time: 0,
            flags: 0,
            force_exptime: false,
        };
        let narrow = write_header(&mut buf, &h, b"k", 0);
        assert!(cas_fits(&narrow, u32::MAX as u64));
        assert!(!cas_fits(&narrow, u32::MAX as u64 + 1));
        let wide = write_header_wide(&mut buf, &h, b"k", 0, true);
        assert_eq!(wide.total(), narrow.total() + 4);
        assert!(cas_fits(&wide, u64::MAX));
        assert_eq!(cas(&buf, &parse(&buf)), 5);
    }

    #[test]
    fn fillers_cover_every_gap_size() {
        let edge = MIN_ITEM + 127;
        for n in [
            0,
            MIN_ITEM,
            100,
            edge,
            edge + 1,
            edge + 2,
            300,
            2100,
            MAX_FILLER,
        ] {
            let mut buf = vec![0xAAu8; n];
            write_filler(&mut buf);
            if n > 0 {
                let l = parse(&buf);
                assert_eq!(l.total(), n);
                assert_ne!(l.bits & DEAD, 0);
            }
        }
    }

    #[test]
    fn the_time_reads_back_exactly_for_eighteen_hours_and_a_little_ahead() {
        for back in [0u32, 1, 59, 3600, IDLE_CAP, 64_000, (1 << 16) - TIME_AHEAD] {
            assert_eq!(decode_time(stamp(NOW - back), NOW), NOW - back, "{back}");
        }
        for ahead in [1u32, 2, TIME_AHEAD - 1] {
            assert_eq!(decode_time(stamp(NOW + ahead), NOW), NOW + ahead, "{ahead}");
        }
        // Beyond the window a stamp aliases: what `cap_idle` exists to prevent.
        assert_eq!(decode_time(stamp(NOW - (1 << 16) - 5), NOW), NOW - 5);
        // Near the epoch nothing reads as before it.
        assert_eq!(decode_time(stamp(70_000), 10), 0);
    }

    #[test]
    fn cap_idle_keeps_idle_times_readable() {
        let h = Header {
            bits: 0,
            cas: 1,
            exptime: 0,
            time: NOW,
            flags: 0,
            force_exptime: false,
        };
        let mut buf = vec![0u8; 32];
        let l = write_header(&mut buf, &h, b"k", 0);
        // A walk every few hours over 5 days: idle times read exactly up to the cap, then
        // as the cap (without it the stamp would alias after ~18 hours).
        let mut now = NOW;
        let mut t = NOW;
        for step in 0..40u32 {
            now += 3 * 3600 + step;
            let capped = cap_idle(&mut buf, &l, now);
            assert_eq!(capped, now - t > IDLE_CAP);
            if capped {
                t = now - IDLE_CAP;
            }
            assert_eq!(time(&buf, &l, now), t);
            assert_eq!(now - t, (now - NOW).min(IDLE_CAP));
        }
        // A read sets the exact time again.
        set_time(&mut buf, &l, now);
        assert!(!cap_idle(&mut buf, &l, now + 10));
        assert_eq!(time(&buf, &l, now + 10), now);
    }

    /// Any header: (key length, value length, flags, exptime, cas, idle seconds, forced
    /// exptime field, state bits).
    fn any_header() -> impl Strategy<Value = (usize, usize, u32, u32, u64, u32, bool, u8)> {
        (
            0usize..=250,
            prop_oneof![0usize..200, 0usize..70_000],
            prop_oneof![Just(0u32), any::<u32>()],
            prop_oneof![Just(0u32), any::<u32>()],
            prop_oneof![0u64..=u32::MAX as u64, any::<u64>()],
            0u32..=(1 << 16) - TIME_AHEAD,
            any::<bool>(),
            any::<u8>(),
        )
    }

    proptest! {
        /// Every header variant (with or without exptime and flags, 4- or 8-byte cas, any
        /// value length) parses back to what was written, items laid end to end walk back
        /// item by item, and in-place updates leave the other fields alone.
        #[test]
        fn any_items_round_trip(items in proptest::collection::vec(any_header(), 1..8)) {
            let sizes: Vec<usize> = items
                .iter()
                .map(|&(k, v, f, e, c, _, force, _)| encoded_len(k, v, f, c, exptime_field(e, force)))
                .collect();
            let mut buf = vec![0u8; sizes.iter().sum()];
            let mut off = 0;
            for (i, &(k, v, f, e, c, idle, force, bits)) in items.iter().enumerate() {
                let key: Vec<u8> = (0..k).map(|j| (i + j) as u8).collect();
                let h = Header { bits, cas: c, exptime: e, time: NOW - idle, flags: f, force_exptime: force };
                prop_assert_eq!(h.encoded_len(k, v), sizes[i]);
                let l = write_header(&mut buf[off..], &h, &key, v);
                buf[off + l.value..off + l.total()].fill(i as u8);
                prop_assert_eq!(l.total(), sizes[i]);
                off += sizes[i];
            }
            let mut off = 0;
            for (i, &(k, v, f, e, c, idle, force, bits)) in items.iter().enumerate() {
                let item = &mut buf[off..off + sizes[i]];
                let l = parse(item);
                prop_assert_eq!(l.total(), sizes[i]);
                prop_assert_eq!((l.key_len, l.value_len), (k, v));
                let kept = STALE | TOKEN_SENT | FETCHED | ACCESSED;
                prop_assert_eq!(l.bits & kept, bits & kept);
                prop_assert_eq!(l.bits & DEAD, 0);
                prop_assert_eq!(l.bits & HAS_EXPTIME != 0, exptime_field(e, force));
                prop_assert_eq!(l.bits & CAS_WIDE != 0, c > u32::MAX as u64);
                prop_assert_eq!(cas(item, &l), c);
                prop_assert_eq!(exptime(item, &l), e);
                prop_assert_eq!(flags(item, &l), f);
                prop_assert_eq!(time(item, &l, NOW), NOW - idle);
                prop_assert!(item[l.key..l.key + k].iter().enumerate().all(|(j, &b)| b == (i + j) as u8));
                prop_assert!(item[l.value..].iter().all(|&b| b == i as u8));
                // In place: a cas that fits, an exptime that fits, a new time.
                let new_cas = if cas_fits(&l, u64::MAX) { c ^ (1 << 40) } else { c ^ 1 };
                let new_exp = if exptime_fits(&l, 5) { e ^ 5 } else { 0 };
                set_cas(item, &l, new_cas);
                set_exptime(item, &l, new_exp);
                set_time(item, &l, NOW + 3);
                prop_assert_eq!(parse(item).total(), sizes[i]);
                prop_assert_eq!(cas(item, &l), new_cas);
                prop_assert_eq!(exptime(item, &l), new_exp);
                prop_assert_eq!(time(item, &l, NOW + 3), NOW + 3);
                prop_assert_eq!(flags(item, &l), f);
                prop_assert!(item[l.value..].iter().all(|&b| b == i as u8));
                off += sizes[i];
            }
        }
    }
}
