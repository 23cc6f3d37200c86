//! Space-separated tokens, split the way memcached's `tokenize_command` does (only b' ' separates;
//! tabs and `\r` stay inside tokens).

/// Lazily yields the space-separated tokens of a byte string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// The tokens of `rest`.
    pub fn new(rest: &'a [u8]) -> Self {
        Tokens { rest }
    }

    /// The unsplit bytes not yet yielded (may start with spaces).
    pub fn remainder(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let s = &self.rest[start..];
        let end = memchr::memchr(b' ', s).unwrap_or(s.len());
        self.rest = &s[end..];
        Some(&s[..end])
    }
}

/// A key longer than [`crate::KEY_MAX_LENGTH`] in a multi-key get.
///
/// memcached stops at such a key, throws away every VALUE it has built for this command (but
/// keeps side effects of the earlier keys: LRU bumps, gat touches, stats) and answers only
/// `CLIENT_ERROR bad command line format` ([`crate::reply::CLIENT_ERROR_BAD_FORMAT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyTooLong;

/// The keys of a get/gets/gat/gats/bget line, in order, without allocation.
/// Yields `Err(KeyTooLong)` once and then stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    tokens: Tokens<'a>,
    failed: bool,
}

impl<'a> Keys<'a> {
    /// The tokens of `rest`.
    pub fn new(rest: &'a [u8]) -> Self {
        Keys {
            tokens: Tokens::new(rest),
            failed: false,
        }
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = Result<&'a [u8], KeyTooLong>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let k = self.tokens.next()?;
        if k.len() > crate::KEY_MAX_LENGTH {
            self.failed = true;
            return Some(Err(KeyTooLong));
        }
        Some(Ok(k))
    }
}

/// The first tokens of a line with memcached's token count (`ntokens`, which includes the
/// terminal pseudo-token and is capped at 24 because `MAX_TOKENS` is 24).
pub(crate) struct Line<'a> {
    pub t: [&'a [u8]; 8],
    /// memcached's `ntokens`: min(real tokens, 23) + 1.
    pub ntokens: usize,
    /// `tokens[ntokens - 2]`: the last token memcached looked at (noreply / HTTP checks).
    pub last: &'a [u8],
}

impl<'a> Line<'a> {
    pub fn split(line: &'a [u8]) -> Self {
        let mut t: [&'a [u8]; 8] = [b""; 8];
        let mut n = 0;
        let mut last: &'a [u8] = b"";
        for tok in Tokens::new(line) {
            if n < 8 {
                t[n] = tok;
            }
            last = tok;
            n += 1;
            if n == 23 {
                break;
            }
        }
        Line {
            t,
            ntokens: n + 1,
            last,
        }
    }

    /// `tokens[i]`, empty for the terminal token or beyond.
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i + 1 < self.ntokens && i < 8 {
            self.t[i]
        } else {
            b""
        }
    }

    /// memcached's `set_noreply_maybe`.
    #[inline]
    pub fn noreply(&self) -> bool {
        self.last == b"noreply"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_spaces_only() {
        let v: Vec<&[u8]> = Tokens::new(b"  a\tb  c\r ").collect();
        assert_eq!(v, vec![&b"a\tb"[..], b"c\r"]);
        assert_eq!(Tokens::new(b"   ").next(), None);
    }

    #[test]
    fn line_caps_token_count() {
        let mut s = Vec::new();
        for i in 0..30 {
            s.extend_from_slice(format!("t{i} ").as_bytes());
        }
        let l = Line::split(&s);
        assert_eq!(l.ntokens, 24);
        assert_eq!(l.last, b"t22");
        let l = Line::split(b"delete k noreply");
        assert_eq!(l.ntokens, 4);
        assert!(l.noreply());
        assert_eq!(l.get(1), b"k");
        assert_eq!(l.get(3), b"");
    }

    #[test]
    fn keys_stop_at_too_long() {
        let long = vec![b'x'; 251];
        let mut line = b"a ".to_vec();
        line.extend_from_slice(&long);
        line.extend_from_slice(b" c");
        let v: Vec<_> = Keys::new(&line).collect();
        assert_eq!(v, vec![Ok(&b"a"[..]), Err(KeyTooLong)]);
    }
}
