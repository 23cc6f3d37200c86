//! memcached replies as a client or proxy reads them: what one reply line is ([`parse_line`]),
//! where one reply ends in a byte stream and where its items are ([`Framer`]), and how the
//! replies to the parts of a split get merge back ([`merge_get`]). RESP replies are framed by
//! [`crate::resp::RespFramer`], which answers with the same [`Frame`]; [`ReplyFramer`] picks
//! one by protocol.
//!
//! Every memcached reply (text or meta) is one of:
//! - `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n` repeated, then `END\r\n`
//!   (or an error line, which memcached can send in the middle of a get);
//! - `VA <size> <flags>*\r\n<data>\r\n` (meta get / arithmetic with `v`);
//! - a single line (`STORED`, `HD`, `EN`, `MN`, `ERROR`, `SERVER_ERROR ...`, a number, ...).

use std::ops::Range;

use memchr::memchr;

pub use crate::frame::{Frame, MAX_REPLY_LINE};
use crate::resp::RespFramer;

/// One memcached reply line (without its line end), as [`parse_line`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]`: `len` data bytes and CRLF follow.
    Value {
        /// The item's key.
        key: &'a [u8],
        /// The flags token as sent.
        flags: &'a [u8],
        /// The cas token as sent (`gets`/`gats`).
        cas: Option<&'a [u8]>,
        /// Data bytes after the line (CRLF not included).
        len: usize,
    },
    /// `LVALUE <key> <token> <flags> <bytes>` (mcrouter's lease-get miss): `len` data bytes
    /// and CRLF follow.
    LeaseValue {
        /// The item's key.
        key: &'a [u8],
        /// The lease token.
        token: &'a [u8],
        /// Data bytes after the line (CRLF not included).
        len: usize,
    },
    /// `VA <size> <flags>*`: `len` data bytes and CRLF follow.
    Va {
        /// Data bytes after the line (CRLF not included).
        len: usize,
    },
    /// `END`: the end of a get reply.
    End,
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...` (see [`is_error_line`]).
    Error,
    /// Any other one-line reply (`STORED`, `HD ...`, `EN`, `MN`, a number, ...).
    Other(&'a [u8]),
}

/// A `VALUE` or `VA` line whose length is not a number: the stream is not memcached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadLine;

/// Classifies one reply line (`\r\n` already removed).
pub fn parse_line(line: &[u8]) -> Result<Line<'_>, BadLine> {
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        let mut t = rest.split(|&b| b == b' ').filter(|t| !t.is_empty());
        let (Some(key), Some(flags), Some(len)) = (t.next(), t.next(), t.next()) else {
            return Err(BadLine);
        };
        let len = parse_len(len).ok_or(BadLine)?;
        return Ok(Line::Value {
            key,
            flags,
            cas: t.next(),
            len,
        });
    }
    if let Some(rest) = line.strip_prefix(b"LVALUE ") {
        let mut t = rest.split(|&b| b == b' ').filter(|t| !t.is_empty());
        let (Some(key), Some(token), Some(_flags), Some(len)) =
            (t.next(), t.next(), t.next(), t.next())
        else {
            return Err(BadLine);
        };
        let len = parse_len(len).ok_or(BadLine)?;
        return Ok(Line::LeaseValue { key, token, len });
    }
    if let Some(rest) = line.strip_prefix(b"VA ") {
        let len = rest.split(|&b| b == b' ').find(|t| !t.is_empty());
        return Ok(Line::Va {
            len: len.and_then(parse_len).ok_or(BadLine)?,
        });
    }
    Ok(match line {
        b"END" => Line::End,
        _ if is_error_line(line) => Line::Error,
        _ => Line::Other(line),
    })
}

/// True for `ERROR`, `ERROR <text>`, `ERROR: <text>`, `CLIENT_ERROR <text>` and
/// `SERVER_ERROR <text>` (line end removed): the replies memcached sends even for `noreply`
/// requests and in the middle of a get. `ERRORX` and the like are not errors.
pub fn is_error_line(line: &[u8]) -> bool {
    fn word(line: &[u8], w: &[u8], seps: &[u8]) -> bool {
        match line.strip_prefix(w) {
            Some(rest) => rest.first().is_none_or(|b| seps.contains(b)),
            None => false,
        }
    }
    word(line, b"ERROR", b" :")
        || word(line, b"CLIENT_ERROR", b" ")
        || word(line, b"SERVER_ERROR", b" ")
}

/// [`is_error_line`] on a whole reply (its first line).
pub fn is_error_reply(reply: &[u8]) -> bool {
    let end = memchr(b'\n', reply).unwrap_or(reply.len());
    is_error_line(trim_cr(&reply[..end]))
}

/// True when `reply` is the normal answer to a get (items then `END`), false for an error.
pub fn is_get_reply(reply: &[u8]) -> bool {
    reply.starts_with(b"VALUE ") || reply == b"END\r\n"
}

/// One `VALUE` item of a get reply, as byte ranges of the reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The key.
    pub key: Range<usize>,
    /// The flags token.
    pub flags: Range<usize>,
    /// The cas token (empty without one).
    pub cas: Range<usize>,
    /// The data (without its CRLF).
    pub value: Range<usize>,
    /// The whole item: the `VALUE` line through the CRLF after the data.
    pub item: Range<usize>,
}

impl Item {
    /// The same item in a buffer where its reply starts `to` bytes later than `from`
    /// (`to` may be smaller: the item is then moved to the front).
    pub fn moved(&self, from: usize, to: usize) -> Item {
        let m = |r: &Range<usize>| r.start - from + to..r.end - from + to;
        Item {
            key: m(&self.key),
            flags: m(&self.flags),
            cas: m(&self.cas),
            value: m(&self.value),
            item: m(&self.item),
        }
    }
}

/// Finds memcached reply boundaries and, for a get reply, its items, in one pass. Remembers
/// how far into a long get reply it already checked, so a reply arriving in many reads is
/// scanned once.
#[derive(Clone, Debug, Default)]
pub struct Framer {
    /// Bytes of the current reply already known to be whole VALUE items.
    pos: usize,
    items: Vec<Item>,
}

impl Framer {
    /// A framer at a reply boundary.
    pub fn new() -> Framer {
        Framer::default()
    }

    /// Frames the first reply in `buf` (which starts at a reply boundary). After
    /// `Complete(n)`, [`Framer::items`] are that reply's items until the next call; the caller
    /// drops `n` bytes before calling again.
    pub fn next(&mut self, buf: &[u8]) -> Frame {
        if self.pos == 0 {
            self.items.clear();
        }
        loop {
            let rest = &buf[self.pos..];
            let nl = match memchr(b'\n', rest) {
                Some(nl) => nl,
                None if rest.len() > MAX_REPLY_LINE => return Frame::Invalid,
                None => return Frame::Incomplete(None),
            };
            let line = trim_cr(&rest[..nl]);
            let line_end = self.pos + nl + 1;
            match parse_line(line) {
                Err(BadLine)
                    if self.pos == 0
                        || line.starts_with(b"VALUE ")
                        || line.starts_with(b"LVALUE ") =>
                {
                    return Frame::Invalid
                }
                // A lease token in place of an item: framed like one, not an item itself.
                Ok(Line::LeaseValue { len, .. }) => {
                    let end = line_end + len + 2;
                    if buf.len() < end {
                        return Frame::Incomplete(Some(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Frame::Invalid;
                    }
                    self.pos = end;
                    continue;
                }
                Ok(Line::Value {
                    key,
                    flags,
                    cas,
                    len,
                }) => {
                    let end = line_end + len + 2;
                    if buf.len() < end {
                        return Frame::Incomplete(Some(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Frame::Invalid;
                    }
                    let at = |t: &[u8]| {
                        let s = t.as_ptr() as usize - buf.as_ptr() as usize;
                        s..s + t.len()
                    };
                    self.items.push(Item {
                        key: at(key),
                        flags: at(flags),
                        cas: cas.map_or(line_end..line_end, at),
                        value: line_end..end - 2,
                        item: self.pos..end,
                    });
                    self.pos = end;
                    continue;
                }
                Ok(Line::Va { len }) if self.pos == 0 => {
                    let end = line_end + len + 2;
                    if buf.len() < end {
                        return Frame::Incomplete(Some(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Frame::Invalid;
                    }
                    return Frame::Complete(end);
                }
                // END closes a get reply; anything else is a one-line reply (or an error line
                // that cut a get reply short, which ends it just the same).
                _ => {
                    self.pos = 0;
                    return Frame::Complete(line_end);
                }
            }
        }
    }

    /// The items of the reply the last [`Framer::next`] completed (empty for other replies).
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The whole items so far of a get reply that [`Framer::next`] found incomplete.
    pub fn items_so_far(&self) -> &[Item] {
        if self.pos == 0 {
            &[]
        } else {
            &self.items
        }
    }

    /// The caller dropped the first `n` bytes of the buffer, which hold the first `k` of
    /// [`Framer::items_so_far`] and nothing else: the reply goes on from there.
    pub fn drop_front(&mut self, k: usize, n: usize) {
        debug_assert!(k < self.items.len() && self.items[k].item.start == n);
        self.items.drain(..k);
        for item in &mut self.items {
            *item = item.moved(n, 0);
        }
        self.pos -= n;
    }
}

/// One backend connection's reply framing, by protocol.
#[derive(Clone, Debug)]
pub enum ReplyFramer {
    /// memcached text and meta replies.
    Memcached(Framer),
    /// RESP2 replies.
    Resp(RespFramer),
}

impl ReplyFramer {
    /// A framer for RESP when `redis`, else for memcached.
    pub fn new(redis: bool) -> ReplyFramer {
        if redis {
            ReplyFramer::Resp(RespFramer::default())
        } else {
            ReplyFramer::Memcached(Framer::new())
        }
    }

    /// Frames the first reply in `buf`; see [`Framer::next`].
    #[inline]
    pub fn next(&mut self, buf: &[u8]) -> Frame {
        match self {
            ReplyFramer::Memcached(f) => f.next(buf),
            ReplyFramer::Resp(f) => f.next(buf),
        }
    }

    /// The items of the memcached get reply just completed (always empty for RESP).
    #[inline]
    pub fn items(&self) -> &[Item] {
        match self {
            ReplyFramer::Memcached(f) => f.items(),
            ReplyFramer::Resp(_) => &[],
        }
    }

    /// The whole items so far of an incomplete memcached get reply (always empty for RESP).
    pub fn items_so_far(&self) -> &[Item] {
        match self {
            ReplyFramer::Memcached(f) => f.items_so_far(),
            ReplyFramer::Resp(_) => &[],
        }
    }

    /// See [`Framer::drop_front`].
    pub fn drop_front(&mut self, k: usize, n: usize) {
        if let ReplyFramer::Memcached(f) = self {
            f.drop_front(k, n);
        }
    }
}

/// The reply of one server to its part of a split get, with its items (from [`Framer`]).
#[derive(Clone, Copy, Debug)]
pub struct Fragment<'a> {
    /// The whole reply.
    pub reply: &'a [u8],
    /// Its items, ranges of `reply`.
    pub items: &'a [Item],
}

/// Merges the replies to a get split over servers in the order the client asked for the
/// keys. `keys` are the requested keys in order with the index of the fragment that asked
/// for each. A fragment that is not a get reply (an error) answers the whole request, as
/// nutcracker does; items a server sent that line up with no key still go out, last.
pub fn merge_get<'k>(
    keys: impl IntoIterator<Item = (&'k [u8], usize)>,
    frags: &[Fragment<'_>],
    out: &mut Vec<u8>,
) {
    if let Some(bad) = frags.iter().find(|f| !is_get_reply(f.reply)) {
        out.extend_from_slice(bad.reply);
        return;
    }
    let mut cursor = vec![0usize; frags.len()];
    for (key, f) in keys {
        let frag = &frags[f];
        if let Some(item) = frag.items.get(cursor[f]) {
            if &frag.reply[item.key.clone()] == key {
                out.extend_from_slice(&frag.reply[item.item.clone()]);
                cursor[f] += 1;
            }
        }
    }
    for (frag, &done) in frags.iter().zip(&cursor) {
        for item in &frag.items[done..] {
            out.extend_from_slice(&frag.reply[item.item.clone()]);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A length token: 1 to 10 decimal digits.
fn parse_len(t: &[u8]) -> Option<usize> {
    if t.is_empty() || t.len() > 10 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(t.iter().fold(0, |n, &d| n * 10 + usize::from(d - b'0')))
}

#[cfg(test)]
mod tests;
