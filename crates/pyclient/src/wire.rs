//! memcached requests the client sends and the reply lines it reads, sans I/O. Lines are
//! classified with [`proto::response::parse_line`]; a line that is not an answer the request
//! can get is a [`WireError`], which the bindings raise as `MemfleetServerError`.

use proto::response::{parse_line, Line};
use proto::strtoull;

/// The longest reply line read before the reply is called garbage (a `VA`/`VALUE` line is a
/// key of at most 250 bytes and a few numbers).
pub const MAX_LINE: usize = 8192;

/// A reply the request cannot get: an error line (`SERVER_ERROR ...`) or garbage. Holds the
/// line as sent, which is what the user sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub Vec<u8>);

impl WireError {
    fn of(line: &[u8]) -> WireError {
        WireError(line.to_vec())
    }
}

/// One line of the reply to a multi-key fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManyLine<'a> {
    /// A hit: `len` data bytes and CRLF follow.
    Item {
        key: &'a [u8],
        flags: u32,
        len: usize,
    },
    /// A meta miss (`EN`): nothing follows it.
    Miss,
    /// The end of the reply (`MN`, text `END`).
    End,
}

/// `mg <key> f v k q` per key then `mn` (meta), or one `get k1 k2 ...` (text).
pub fn req_get_many<K: AsRef<[u8]>>(keys: &[K], meta: bool) -> Vec<u8> {
    let size: usize = keys.iter().map(|k| k.as_ref().len() + 12).sum();
    let mut out = Vec::with_capacity(size + 8);
    if meta {
        for k in keys {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(k.as_ref());
            out.extend_from_slice(b" f v k q\r\n");
        }
        out.extend_from_slice(b"mn\r\n");
    } else {
        out.extend_from_slice(b"get");
        for k in keys {
            out.push(b' ');
            out.extend_from_slice(k.as_ref());
        }
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The request of a single fetch (`mg <key> f v`, or `get <key>`).
pub fn req_get(key: &[u8], meta: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 10);
    out.extend_from_slice(if meta { b"mg " } else { b"get " });
    out.extend_from_slice(key);
    out.extend_from_slice(if meta { b" f v\r\n" } else { b"\r\n" });
    out
}

fn flags_of(tok: &[u8], line: &[u8]) -> Result<u32, WireError> {
    strtoull(tok)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| WireError::of(line))
}

/// The flags (`f`) and key (`k`) tokens of a `VA` line; the key is empty if not returned.
fn va_tokens(line: &[u8]) -> Result<(u32, &[u8]), WireError> {
    let mut flags = 0;
    let mut key: &[u8] = b"";
    for t in line.split(|&b| b == b' ').skip(2).filter(|t| !t.is_empty()) {
        match t[0] {
            b'f' => flags = flags_of(&t[1..], line)?,
            b'k' => key = &t[1..],
            _ => {}
        }
    }
    Ok((flags, key))
}

/// One line of the reply to [`req_get_many`].
pub fn get_many_line(line: &[u8], meta: bool) -> Result<ManyLine<'_>, WireError> {
    let parsed = parse_line(line).map_err(|_| WireError::of(line))?;
    match (parsed, meta) {
        (Line::Va { len }, true) => {
            let (flags, key) = va_tokens(line)?;
            Ok(ManyLine::Item { key, flags, len })
        }
        (Line::Other(b"EN"), true) => Ok(ManyLine::Miss),
        (Line::Other(b"MN"), true) | (Line::End, false) => Ok(ManyLine::End),
        (
            Line::Value {
                key, flags, len, ..
            },
            false,
        ) => Ok(ManyLine::Item {
            key,
            flags: flags_of(flags, line)?,
            len,
        }),
        _ => Err(WireError::of(line)),
    }
}

/// The first line of the reply to [`req_get`]: `Some((len, flags))` for a hit, whose data
/// follows (then, in text, `END`), `None` for a miss.
pub fn get_line(line: &[u8], meta: bool) -> Result<Option<(usize, u32)>, WireError> {
    match get_many_line(line, meta)? {
        ManyLine::Item { len, flags, .. } => Ok(Some((len, flags))),
        ManyLine::Miss if meta => Ok(None),
        ManyLine::End if !meta => Ok(None),
        _ => Err(WireError::of(line)),
    }
}

/// Where the first line of `buf` ends: the index of its CR, or None while its CRLF has not
/// arrived. The bytes before `from` are known to hold no CRLF. A line longer than
/// [`MAX_LINE`] is garbage.
pub fn line_end(buf: &[u8], from: usize) -> Result<Option<usize>, WireError> {
    match memchr::memmem::find(&buf[from..], b"\r\n") {
        Some(i) if from + i <= MAX_LINE => Ok(Some(from + i)),
        None if buf.len() <= MAX_LINE + 1 => Ok(None),
        _ => Err(WireError(b"SERVER_ERROR reply line too long".to_vec())),
    }
}

/// Whether `buf` holds a whole reply to [`req_get`] (`many`: to [`req_get_many`]), or one that
/// cannot be read as one: then receiving more is pointless and the parser reports it.
pub fn reply_complete(buf: &[u8], meta: bool, many: bool) -> bool {
    let mut at = 0;
    loop {
        let cr = match line_end(&buf[at..], 0) {
            Ok(Some(cr)) => cr,
            Ok(None) => return false,
            Err(_) => return true,
        };
        let line = &buf[at..at + cr];
        at += cr + 2;
        match get_many_line(line, meta) {
            Ok(ManyLine::Item { len, .. }) => {
                at = match at.checked_add(len).and_then(|a| a.checked_add(2)) {
                    Some(a) if a <= buf.len() => a,
                    _ => return false,
                };
                // a meta get's value ends its reply; a text get's is followed by END
                if meta && !many {
                    return true;
                }
            }
            Ok(ManyLine::Miss) if many => {}
            Ok(_) | Err(_) => return true,
        }
    }
}

/// [`reply_complete`] for a single fetch.
pub fn get_reply_complete(buf: &[u8], meta: bool) -> bool {
    reply_complete(buf, meta, false)
}

/// [`reply_complete`] for a multi-key fetch.
pub fn get_many_reply_complete(buf: &[u8], meta: bool) -> bool {
    reply_complete(buf, meta, true)
}

/// [`reply_complete`] for a meta request answered by a line, or a `VA` line and its value.
pub fn meta_reply_complete(buf: &[u8], _meta: bool) -> bool {
    reply_complete(buf, true, false)
}

/// The value length of a meta `VA <len> ...` line; None for any other line.
pub fn va_len(line: &[u8]) -> Option<usize> {
    match parse_line(line) {
        Ok(Line::Va { len }) => Some(len),
        _ => None,
    }
}

/// Whether `buf` holds a whole line (or more than a line may hold).
pub fn line_complete(buf: &[u8], _meta: bool) -> bool {
    !matches!(line_end(buf, 0), Ok(None))
}

/// A data block must end with CRLF; anything else means the reply is out of step.
pub fn check_data_end(block: &[u8]) -> Result<(), WireError> {
    if block.ends_with(b"\r\n") {
        Ok(())
    } else {
        Err(WireError(
            b"SERVER_ERROR data block not ended by CRLF".to_vec(),
        ))
    }
}

/// The longest key memcached takes.
pub const MAX_KEY: usize = 250;

/// Whether memcached takes `key`: 1 to [`MAX_KEY`] bytes, none a space or control character.
pub fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY && key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// A value stored as ASCII digits (an optional `-`, then digits) that fits an i64; anything
/// else is left to Python's `int()`, which reads more forms.
pub fn ascii_int(data: &[u8]) -> Option<i64> {
    let (neg, digits) = match data.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, data),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
    Some(if neg { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_many_requests() {
        assert_eq!(
            req_get_many(&[b"a".as_slice(), b"bc"], true),
            b"mg a f v k q\r\nmg bc f v k q\r\nmn\r\n"
        );
        assert_eq!(
            req_get_many(&[b"a".as_slice(), b"bc"], false),
            b"get a bc\r\n"
        );
        assert_eq!(req_get(b"k", true), b"mg k f v\r\n");
        assert_eq!(req_get(b"k", false), b"get k\r\n");
    }

    #[test]
    fn meta_get_many_lines() {
        assert_eq!(
            get_many_line(b"VA 5 f7 kabc", true),
            Ok(ManyLine::Item {
                key: b"abc",
                flags: 7,
                len: 5
            })
        );
        assert_eq!(
            get_many_line(b"VA 0 kx", true),
            Ok(ManyLine::Item {
                key: b"x",
                flags: 0,
                len: 0
            })
        );
        assert_eq!(get_many_line(b"EN", true), Ok(ManyLine::Miss));
        assert_eq!(get_many_line(b"MN", true), Ok(ManyLine::End));
        assert!(get_many_line(b"END", true).is_err());
        assert!(get_many_line(b"VA x f1", true).is_err());
        assert!(get_many_line(b"VA 1 fz", true).is_err());
        assert!(get_many_line(b"VA 1 f99999999999", true).is_err());
        assert_eq!(
            get_many_line(b"SERVER_ERROR out of memory", true),
            Err(WireError(b"SERVER_ERROR out of memory".to_vec()))
        );
    }

    #[test]
    fn text_get_many_lines() {
        assert_eq!(
            get_many_line(b"VALUE k 3 10", false),
            Ok(ManyLine::Item {
                key: b"k",
                flags: 3,
                len: 10
            })
        );
        assert_eq!(get_many_line(b"END", false), Ok(ManyLine::End));
        assert!(get_many_line(b"MN", false).is_err());
        assert!(get_many_line(b"VALUE k", false).is_err());
        assert!(get_many_line(b"", false).is_err());
    }

    #[test]
    fn single_get_lines() {
        assert_eq!(get_line(b"VA 2 f1", true), Ok(Some((2, 1))));
        assert_eq!(get_line(b"EN", true), Ok(None));
        assert!(get_line(b"MN", true).is_err());
        assert_eq!(get_line(b"END", false), Ok(None));
        assert_eq!(get_line(b"VALUE k 4 2 99", false), Ok(Some((2, 4))));
    }

    #[test]
    fn replies_are_complete_once_every_promised_byte_is_there() {
        let meta_many = b"VA 2 f0 ka\r\nhi\r\nEN\r\nVA 1 kb\r\nx\r\nMN\r\n";
        assert!(get_many_reply_complete(meta_many, true));
        for cut in 0..meta_many.len() {
            assert!(
                !get_many_reply_complete(&meta_many[..cut], true),
                "cut at {cut}"
            );
        }
        let text_one = b"VALUE k 0 2\r\nhi\r\nEND\r\n";
        assert!(get_reply_complete(text_one, false));
        for cut in 0..text_one.len() {
            assert!(!get_reply_complete(&text_one[..cut], false), "cut at {cut}");
        }
        assert!(get_reply_complete(b"VA 2 f1\r\nhi\r\n", true));
        assert!(!get_reply_complete(b"VA 2 f1\r\nhi\r", true));
        assert!(get_reply_complete(b"EN\r\n", true));
        // garbage, error lines and endless lines need no more bytes: the parser reports them
        assert!(get_many_reply_complete(b"SERVER_ERROR x\r\n", true));
        assert!(get_many_reply_complete(b"VA x\r\n", true));
        assert!(get_many_reply_complete(&vec![b'x'; MAX_LINE + 2], true));
        assert!(!line_complete(b"HD", true));
        assert!(line_complete(b"HD\r\n", true));
    }

    #[test]
    fn lines_end_at_crlf_and_are_bounded() {
        assert_eq!(line_end(b"ab\r\ncd", 0), Ok(Some(2)));
        assert_eq!(line_end(b"abcd\r\n", 3), Ok(Some(4)));
        assert_eq!(line_end(b"ab\r", 0), Ok(None));
        assert!(line_end(&vec![b'x'; MAX_LINE + 2], 0).is_err());
        assert!(check_data_end(b"ab\r\n").is_ok());
        assert!(check_data_end(b"abcd").is_err());
    }

    #[test]
    fn keys_memcached_takes() {
        assert!(valid_key(b"a"));
        assert!(valid_key(&[b'k'; MAX_KEY]));
        assert!(!valid_key(&[b'k'; MAX_KEY + 1]));
        assert!(!valid_key(b""));
        for bad in [b"a b".as_slice(), b"a\r", b"\x7f", b"a\x00"] {
            assert!(!valid_key(bad), "{bad:?}");
        }
        assert!(valid_key("caf\u{e9}".as_bytes()));
    }

    #[test]
    fn ascii_ints() {
        assert_eq!(ascii_int(b"0"), Some(0));
        assert_eq!(ascii_int(b"-42"), Some(-42));
        assert_eq!(
            ascii_int(b"999999999999999999"),
            Some(999_999_999_999_999_999)
        );
        for other in [
            b"".as_slice(),
            b"-",
            b"1 ",
            b"+1",
            b"1_000",
            b"9999999999999999999",
        ] {
            assert_eq!(ascii_int(other), None, "{other:?}");
        }
    }

    #[test]
    fn meta_replies() {
        assert_eq!(va_len(b"VA 12 f0 c9 W"), Some(12));
        assert_eq!(va_len(b"HD"), None);
        assert_eq!(va_len(b"VA x"), None);
        assert!(meta_reply_complete(b"HD\r\n", true));
        assert!(!meta_reply_complete(b"VA 2 W\r\nx", true));
        assert!(meta_reply_complete(b"VA 2 W\r\nxy\r\n", true));
        assert!(meta_reply_complete(b"EN\r\n", true));
    }
}
