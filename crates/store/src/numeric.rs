//! memcached's `safe_strtoull` applied to a stored value (which memcached keeps followed by
//! "\r\n", so a number ending exactly at the value end is accepted).

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

pub fn parse_u64(v: &[u8]) -> Option<u64> {
    let mut p = 0;
    while p < v.len() && is_space(v[p]) {
        p += 1;
    }
    let mut neg = false;
    if p < v.len() && (v[p] == b'+' || v[p] == b'-') {
        neg = v[p] == b'-';
        p += 1;
    }
    let start = p;
    let mut n: u64 = 0;
    while p < v.len() && v[p].is_ascii_digit() {
        n = n.checked_mul(10)?.checked_add((v[p] - b'0') as u64)?;
        p += 1;
    }
    if p == start {
        return None;
    }
    if p < v.len() && !is_space(v[p]) {
        return None;
    }
    if neg {
        n = n.wrapping_neg();
    }
    // strtoull accepts "-N" by negating; memcached rejects it when the result looks negative.
    if (n as i64) < 0 && v.contains(&b'-') {
        return None;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::parse_u64;

    #[test]
    fn strtoull_rules() {
        assert_eq!(parse_u64(b"10"), Some(10));
        assert_eq!(parse_u64(b"  7"), Some(7));
        assert_eq!(parse_u64(b"9 "), Some(9));
        assert_eq!(parse_u64(b"12 abc"), Some(12));
        assert_eq!(parse_u64(b"+3"), Some(3));
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-5"), None);
        assert_eq!(parse_u64(b"12abc"), None);
        assert_eq!(parse_u64(b"abc"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"   "), None);
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }
}
