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
}
