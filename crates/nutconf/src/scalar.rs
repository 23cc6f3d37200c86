//! Scalar values read the way nutcracker's C reads them: `nc_atoi` wrapping, `strtol`
//! octal, the literal `true`/`false`, and the "set once" rule every directive follows.

/// A directive given twice is refused.
pub(super) fn once<T>(slot: &mut Option<T>, v: T) -> Result<(), &'static str> {
    if slot.is_some() {
        return Err("is a duplicate");
    }
    *slot = Some(v);
    Ok(())
}

/// nc_atoi: ASCII digits only, into a C int (wrapping as the C does), negative = invalid.
pub(super) fn nc_atoi(s: &str) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    let mut v: i32 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.wrapping_mul(10).wrapping_add(i32::from(b - b'0'));
    }
    u32::try_from(v).ok()
}

pub(super) fn parse_num(s: &str) -> Result<u32, &'static str> {
    nc_atoi(s).ok_or("is not a number")
}

pub(super) fn parse_bool(s: &str) -> Result<bool, &'static str> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("is not \"true\" or \"false\""),
    }
}

/// A TCP port as nutcracker takes one: a number in 1..=65535.
pub(super) fn valid_port(s: &str) -> Option<u16> {
    nc_atoi(s)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
}

/// C `strtol(s, NULL, 8)`: leading blanks, optional sign, the longest octal prefix;
/// `None` on overflow (errno ERANGE).
pub(super) fn strtol_octal(s: &str) -> Option<i64> {
    let s = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(|b| (b'0'..=b'7').contains(b)) {
        v = v.checked_mul(8)?.checked_add(i64::from(b - b'0'))?;
    }
    Some(if neg { -v } else { v })
}
