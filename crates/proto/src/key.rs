//! The one rule for what memcached accepts as a key in a text command, for the tools that
//! make keys up (the invalidator's templates, the delete spools) rather than parse them.

use crate::KEY_MAX_LENGTH;

/// Why a key cannot be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadKey {
    /// Longer than `KEY_MAX_LENGTH`.
    TooLong,
    /// Empty, or contains a space or control byte, which would split the text-protocol command.
    BadByte,
}

/// Whether memcached accepts `key` in a text command.
pub fn check_key(key: &[u8]) -> Result<(), BadKey> {
    if key.len() > KEY_MAX_LENGTH {
        return Err(BadKey::TooLong);
    }
    if key.is_empty() || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(BadKey::BadByte);
    }
    Ok(())
}

/// memcached's uriencode, as its key dumps and `watch` lines print keys: letters, digits and
/// `-._~` as they are, any other byte as `%XX`.
pub fn url_encode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits() {
        assert_eq!(check_key(&[b'k'; KEY_MAX_LENGTH]), Ok(()));
        assert_eq!(check_key(&[b'k'; KEY_MAX_LENGTH + 1]), Err(BadKey::TooLong));
        assert_eq!(check_key(b""), Err(BadKey::BadByte));
        assert_eq!(check_key(b"a b"), Err(BadKey::BadByte));
        assert_eq!(check_key(b"a\x7f"), Err(BadKey::BadByte));
        assert_eq!(check_key("\u{fc}ber".as_bytes()), Ok(()));
    }

    #[test]
    fn keys_are_url_encoded_as_memcached_does() {
        let mut out = Vec::new();
        url_encode(&mut out, b"a~._-:/%\x01\xff Z9");
        assert_eq!(out, b"a~._-%3A%2F%25%01%FF%20Z9");
    }
}
