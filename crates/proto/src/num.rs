//! Numeric token parsing with memcached's `safe_strto*` semantics (util.c).
//!
//! memcached calls glibc `strtol`/`strtoul`/`strtoull` (base 10): leading C whitespace is
//! skipped, one `+`/`-` sign is accepted, at least one digit is required, the number must be
//! followed by the end of the token or a whitespace byte, and values out of the 64-bit range
//! fail (ERANGE). The 32-bit variants parse 64-bit values and then *truncate* them into a 32-bit
//! destination, which we reproduce (`set k 0 0 4294967297` stores a 1-byte value).

/// C `isspace` in the "C" locale.
#[inline]
pub(crate) fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Scans like strtoull/strtoll: returns (negative, magnitude, overflowed) or None when there is
/// no digit or the number is followed by a non-space byte.
#[inline]
fn scan(tok: &[u8]) -> Option<(bool, u64, bool)> {
    let mut i = 0;
    while i < tok.len() && c_isspace(tok[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < tok.len() && (tok[i] == b'+' || tok[i] == b'-') {
        neg = tok[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut mag: u64 = 0;
    let mut overflow = false;
    while i < tok.len() && tok[i].is_ascii_digit() {
        let d = u64::from(tok[i] - b'0');
        match mag.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => mag = m,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return None;
    }
    if i < tok.len() && !c_isspace(tok[i]) {
        return None;
    }
    Some((neg, mag, overflow))
}

/// `safe_strtoull`: u64; a value that looks negative as i64 is refused if the token has a '-'.
#[inline]
pub fn strtoull(tok: &[u8]) -> Option<u64> {
    let (neg, mag, overflow) = scan(tok)?;
    if overflow {
        return None;
    }
    let v = if neg { mag.wrapping_neg() } else { mag };
    if (v as i64) < 0 && memchr::memchr(b'-', tok).is_some() {
        return None;
    }
    Some(v)
}

/// `safe_strtoul` into a `uint32_t`: parsed as unsigned long (64-bit) then truncated.
#[inline]
pub fn strtoul_u32(tok: &[u8]) -> Option<u32> {
    strtoull(tok).map(|v| v as u32)
}

/// `safe_strtoll`: i64 with ERANGE on overflow.
#[inline]
pub fn strtoll(tok: &[u8]) -> Option<i64> {
    let (neg, mag, overflow) = scan(tok)?;
    if overflow {
        return None;
    }
    if neg {
        if mag > 1u64 << 63 {
            None
        } else {
            Some((mag as i64).wrapping_neg())
        }
    } else if mag > i64::MAX as u64 {
        None
    } else {
        Some(mag as i64)
    }
}

/// `safe_strtol` into an `int32_t`: parsed as long (64-bit) then truncated.
#[inline]
pub fn strtol_i32(tok: &[u8]) -> Option<i32> {
    strtoll(tok).map(|v| v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strtol_like_glibc() {
        assert_eq!(strtol_i32(b"10"), Some(10));
        assert_eq!(strtol_i32(b"-10"), Some(-10));
        assert_eq!(strtol_i32(b"+7"), Some(7));
        assert_eq!(strtol_i32(b"\t 7"), Some(7));
        assert_eq!(strtol_i32(b"7\r"), Some(7));
        assert_eq!(strtol_i32(b"7x"), None);
        assert_eq!(strtol_i32(b""), None);
        assert_eq!(strtol_i32(b"-"), None);
        assert_eq!(strtol_i32(b"x"), None);
        // Truncation into int32_t, as memcached does.
        assert_eq!(strtol_i32(b"4294967297"), Some(1));
        assert_eq!(strtol_i32(b"2147483648"), Some(i32::MIN));
        assert_eq!(strtoll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(strtoll(b"9223372036854775808"), None);
        assert_eq!(strtoll(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(strtoll(b"-9223372036854775809"), None);
    }

    #[test]
    fn strtoull_like_memcached() {
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"-0"), Some(0));
        // Negated magnitude that stays positive as i64 is accepted (glibc + memcached quirk).
        assert_eq!(strtoull(b"-9223372036854775809"), Some(9223372036854775807));
        assert_eq!(strtoul_u32(b"4294967296"), Some(0));
        assert_eq!(strtoul_u32(b"-1"), None);
    }
}
