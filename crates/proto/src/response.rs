//! memcached replies as a client or proxy reads them: what one reply line is ([`parse_line`]),
//! where one reply ends in a byte stream and where its items are ([`Framer`]), whether it
//! may answer its request at all ([`Expect`], [`AskedKeys`]), and how the
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

mod expect;
pub mod tally;
use expect::echoes_ok;
pub use expect::{AskedKeys, Expect};

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

/// A reply line longer than this is not memcached's: its longest are `VALUE` lines (a key
/// of at most 250 bytes and three numbers) and meta lines with their flags, under 1 KB.
pub const MAX_LINE: usize = 2048;

/// The largest value a [`Framer`] takes unless told otherwise ([`Framer::max_value`]).
pub const DEFAULT_MAX_VALUE: usize = 64 * 1024 * 1024;

/// Why a framer answered [`Frame::Invalid`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a reply of the protocol: a line without CRLF or longer than [`MAX_LINE`], a
    /// malformed `VALUE` or `VA` line, data not followed by CRLF.
    Garbage,
    /// A reply of the protocol, but not one the request may get ([`Expect`]).
    Unexpected,
    /// An item of a key the get did not ask for, or not in the order asked.
    UnaskedKey,
    /// A value longer than the framer's limit; its announced length.
    TooLarge(usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Garbage => f.write_str("not a memcached reply"),
            Refusal::Unexpected => f.write_str("not a reply to the request"),
            Refusal::UnaskedKey => f.write_str("an item of a key not asked for"),
            Refusal::TooLarge(n) => write!(f, "a value of {n} bytes, over the limit"),
        }
    }
}

/// Finds memcached reply boundaries and, for a get reply, its items, in one pass, checking
/// each reply against what its request may get ([`Expect`], [`AskedKeys`]). Remembers how
/// far into a long get reply it already checked, so a reply arriving in many reads is
/// scanned once. After [`Frame::Invalid`] the stream cannot be read on.
#[derive(Clone, Debug)]
pub struct Framer {
    /// Bytes of the current reply already known to be whole VALUE items.
    pos: usize,
    items: Vec<Item>,
    /// The first asked key the next item may be of.
    next_key: usize,
    max_value: usize,
    refused: Option<Refusal>,
}

impl Default for Framer {
    fn default() -> Framer {
        Framer::new()
    }
}

impl Framer {
    /// A framer at a reply boundary, taking values up to [`DEFAULT_MAX_VALUE`].
    pub fn new() -> Framer {
        Framer {
            pos: 0,
            items: Vec::new(),
            next_key: 0,
            max_value: DEFAULT_MAX_VALUE,
            refused: None,
        }
    }

    /// The same, refusing values longer than `max` bytes as soon as they are announced.
    pub fn max_value(mut self, max: usize) -> Framer {
        self.max_value = max;
        self
    }

    /// Frames the first reply in `buf` (which starts at a reply boundary), the answer to a
    /// request that `expect`s it and, for a get, asked for `keys`. After `Complete(n)`,
    /// [`Framer::items`] are that reply's items until the next call; the caller drops `n`
    /// bytes before calling again. `Invalid` as soon as the bytes cannot become such a reply
    /// ([`Framer::refusal`] says why).
    pub fn next(&mut self, buf: &[u8], expect: Expect, keys: AskedKeys<'_>) -> Frame {
        if self.pos == 0 {
            self.items.clear();
            self.next_key = 0;
        }
        loop {
            let rest = &buf[self.pos..];
            let in_get = self.pos > 0;
            let Some(nl) = memchr(b'\n', &rest[..rest.len().min(MAX_LINE + 1)]) else {
                if rest.len() > MAX_LINE {
                    return self.refuse(Refusal::Garbage);
                }
                if !expect.may_start(rest, in_get) {
                    return self.refuse(Refusal::Unexpected);
                }
                return Frame::Incomplete(None);
            };
            let Some(line) = rest[..nl].strip_suffix(b"\r") else {
                return self.refuse(Refusal::Garbage);
            };
            let line_end = self.pos + nl + 1;
            if matches!(expect, Expect::Meta { .. }) && !echoes_ok(line, keys) {
                return self.refuse(Refusal::Unexpected);
            }
            let Ok(line) = parse_line(line) else {
                return self.refuse(Refusal::Garbage);
            };
            match line {
                Line::Value {
                    key,
                    flags,
                    cas,
                    len,
                } => {
                    if !expect.items() {
                        return self.refuse(Refusal::Unexpected);
                    }
                    let (asked, end) = match self.item_ok(buf, expect, keys, key, len, line_end) {
                        Ok(found) => found,
                        Err(frame) => return frame,
                    };
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
                    self.next_key = asked;
                    self.pos = end;
                }
                // A lease token in place of an item: framed like one, not an item itself.
                Line::LeaseValue { key, len, .. } => {
                    if !expect.lease() {
                        return self.refuse(Refusal::Unexpected);
                    }
                    let (asked, end) = match self.item_ok(buf, expect, keys, key, len, line_end) {
                        Ok(found) => found,
                        Err(frame) => return frame,
                    };
                    self.next_key = asked;
                    self.pos = end;
                }
                Line::Va { len } => {
                    if in_get || !expect.va() {
                        return self.refuse(Refusal::Unexpected);
                    }
                    if len > self.max_value {
                        return self.refuse(Refusal::TooLarge(len));
                    }
                    let end = line_end + len + 2;
                    if buf.len() < end {
                        return Frame::Incomplete(Some(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return self.refuse(Refusal::Garbage);
                    }
                    return Frame::Complete(end);
                }
                // END closes a get reply; an error line answers anything (and may cut a get
                // reply short, which ends it just the same).
                Line::End if in_get || expect.items() => return self.complete(line_end),
                Line::Error => return self.complete(line_end),
                Line::Other(l) if !in_get && expect.accepts(l) => return self.complete(line_end),
                Line::End | Line::Other(_) => return self.refuse(Refusal::Unexpected),
            }
        }
    }

    /// Checks an item's key and length before its data is waited for, then that its data is
    /// all in `buf` and ends in CRLF: Ok(the asked key's index after it, where the item ends).
    fn item_ok(
        &mut self,
        buf: &[u8],
        expect: Expect,
        keys: AskedKeys<'_>,
        key: &[u8],
        len: usize,
        line_end: usize,
    ) -> Result<(usize, usize), Frame> {
        let asked = match expect {
            Expect::Any => self.next_key,
            _ => match keys.find(key, self.next_key) {
                Some(i) => i + 1,
                None => return Err(self.refuse(Refusal::UnaskedKey)),
            },
        };
        if len > self.max_value {
            return Err(self.refuse(Refusal::TooLarge(len)));
        }
        let end = line_end + len + 2;
        if buf.len() < end {
            return Err(Frame::Incomplete(Some(end)));
        }
        if &buf[end - 2..end] != b"\r\n" {
            return Err(self.refuse(Refusal::Garbage));
        }
        Ok((asked, end))
    }

    fn complete(&mut self, end: usize) -> Frame {
        self.pos = 0;
        Frame::Complete(end)
    }

    fn refuse(&mut self, why: Refusal) -> Frame {
        self.refused = Some(why);
        Frame::Invalid
    }

    /// Why the last [`Frame::Invalid`] was answered.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refused
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
    /// A framer for RESP when `redis`, else for memcached taking values up to
    /// `max_value` bytes.
    pub fn new(redis: bool, max_value: usize) -> ReplyFramer {
        if redis {
            ReplyFramer::Resp(RespFramer::default())
        } else {
            ReplyFramer::Memcached(Framer::new().max_value(max_value))
        }
    }

    /// Frames the first reply in `buf`; see [`Framer::next`]. RESP replies are checked for
    /// their syntax only.
    #[inline]
    pub fn next(&mut self, buf: &[u8], expect: Expect, keys: AskedKeys<'_>) -> Frame {
        match self {
            ReplyFramer::Memcached(f) => f.next(buf, expect, keys),
            ReplyFramer::Resp(f) => f.next(buf),
        }
    }

    /// Why the last `Invalid` was answered, when the framer says.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ReplyFramer::Memcached(f) => f.refusal(),
            ReplyFramer::Resp(_) => None,
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
