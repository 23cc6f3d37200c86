//! RESP2 replies: framing a backend's reply stream ([`reply_len`], [`RespFramer`]), looking
//! into a complete reply, and writing replies and commands.

use std::fmt;

use memchr::memchr;

use super::parse_ll;
use crate::frame::{Frame, MAX_REPLY_LINE};

/// A backend reply that is not valid RESP2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespError {
    /// Unknown type byte.
    BadType(u8),
    /// A length or integer that is not a number, or out of range.
    BadLength,
    /// Bulk data not followed by CRLF, or a line with a bare `\n`.
    BadTerminator,
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::BadType(b) => write!(f, "bad RESP type byte 0x{b:02x}"),
            RespError::BadLength => f.write_str("bad RESP length"),
            RespError::BadTerminator => f.write_str("bad RESP terminator"),
        }
    }
}

impl std::error::Error for RespError {}

/// Largest bulk reply accepted from a backend (redis's proto-max-bulk-len).
const MAX_REPLY_BULK: i64 = 512 * 1024 * 1024;

/// How far [`reply_line`] looks byte by byte.
const SHORT_LINE: usize = 16;

/// End of the CRLF-terminated line starting at `pos`: Ok(Some(index of '\r')).
pub(super) fn reply_line(buf: &[u8], pos: usize) -> Result<Option<usize>, RespError> {
    let rest = &buf[pos..];
    // Most reply lines are a few bytes (`+OK`, `$3`): a plain loop finds their end sooner
    // than memchr starts.
    let nl = match rest.iter().take(SHORT_LINE).position(|&b| b == b'\n') {
        Some(nl) => Some(nl),
        None => rest
            .get(SHORT_LINE..)
            .and_then(|r| memchr::memchr(b'\n', r))
            .map(|i| i + SHORT_LINE),
    };
    match nl {
        None => Ok(None),
        Some(nl) if nl == 0 || buf[pos + nl - 1] != b'\r' => Err(RespError::BadTerminator),
        Some(nl) => Ok(Some(pos + nl - 1)),
    }
}

/// Length of the first complete reply in `buf` (nested arrays included), `None` if more bytes
/// are needed. Iterative, so deep nesting cannot overflow the stack; never allocates.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    match simple_reply_len(buf) {
        Some(n) => Ok(Some(n)),
        None => general_reply_len(buf),
    }
}

pub(super) fn general_reply_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
    let mut pos = 0;
    // Elements still to read: an array replaces itself with its children.
    let mut pending: u64 = 1;
    while pending > 0 {
        let Some(&t) = buf.get(pos) else {
            return Ok(None);
        };
        if !matches!(t, b'+' | b'-' | b':' | b'$' | b'*') {
            return Err(RespError::BadType(t));
        }
        let Some(cr) = reply_line(buf, pos)? else {
            return Ok(None);
        };
        let line = &buf[pos + 1..cr];
        pos = cr + 2;
        pending -= 1;
        match t {
            b'+' | b'-' => {}
            b':' => {
                parse_ll(line).ok_or(RespError::BadLength)?;
            }
            b'$' => match parse_ll(line) {
                Some(-1) => {}
                Some(n) if (0..=MAX_REPLY_BULK).contains(&n) => {
                    let end = pos + n as usize;
                    if end + 2 > buf.len() {
                        return Ok(None);
                    }
                    if &buf[end..end + 2] != b"\r\n" {
                        return Err(RespError::BadTerminator);
                    }
                    pos = end + 2;
                }
                _ => return Err(RespError::BadLength),
            },
            b'*' => match parse_ll(line) {
                Some(-1) => {}
                Some(n) if n >= 0 => pending = pending.saturating_add(n as u64),
                _ => return Err(RespError::BadLength),
            },
            other => return Err(RespError::BadType(other)),
        }
    }
    Ok(Some(pos))
}

/// The length of the replies most commands get, when `buf` holds one whole and valid:
/// a short status or error line, or a bulk string whose length is plain digits. None
/// leaves everything else (and every error) to [`reply_len`]'s general path, which would
/// find the same length for these.
#[inline(always)]
pub(super) fn simple_reply_len(buf: &[u8]) -> Option<usize> {
    match *buf.first()? {
        b'+' | b'-' => {
            let line = &buf[1..buf.len().min(SHORT_LINE)];
            let nl = 1 + line.iter().position(|&b| b == b'\n')?;
            (buf[nl - 1] == b'\r').then_some(nl + 1)
        }
        b'$' => {
            let mut n: i64 = 0;
            // Up to 8 digits: always within MAX_REPLY_BULK.
            for (i, &d) in buf.iter().enumerate().skip(1).take(9) {
                match d {
                    b'0'..=b'9' if i < 9 => n = n * 10 + i64::from(d - b'0'),
                    b'\r' if i > 1 && (i == 2 || buf[1] != b'0') => {
                        let end = i + 2 + n as usize;
                        return (buf.get(i + 1) == Some(&b'\n')
                            && buf.get(end..end + 2) == Some(b"\r\n"))
                        .then_some(end + 2);
                    }
                    _ => return None,
                }
            }
            None
        }
        _ => None,
    }
}

/// A complete reply seen from outside (for merging split commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyView<'a> {
    /// `+<text>`
    Simple(&'a [u8]),
    /// `-<text>`
    Error(&'a [u8]),
    /// `:<n>`
    Integer(i64),
    /// `$<len>` data, None for `$-1`.
    Bulk(Option<&'a [u8]>),
    /// `None` for a nil array; else the element count and the bytes of all elements.
    Array(Option<(usize, &'a [u8])>),
}

/// Decodes the head of one complete reply (as delimited by [`reply_len`]).
pub fn view_reply(reply: &[u8]) -> Result<ReplyView<'_>, RespError> {
    let t = *reply.first().ok_or(RespError::BadTerminator)?;
    if !matches!(t, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(RespError::BadType(t));
    }
    let Some(cr) = reply_line(reply, 0)? else {
        return Err(RespError::BadTerminator);
    };
    let line = &reply[1..cr];
    let body = &reply[cr + 2..];
    Ok(match t {
        b'+' => ReplyView::Simple(line),
        b'-' => ReplyView::Error(line),
        b':' => ReplyView::Integer(parse_ll(line).ok_or(RespError::BadLength)?),
        b'$' => match parse_ll(line) {
            Some(-1) => ReplyView::Bulk(None),
            Some(n) if n >= 0 && body.len() >= n as usize + 2 => {
                ReplyView::Bulk(Some(&body[..n as usize]))
            }
            _ => return Err(RespError::BadLength),
        },
        b'*' => match parse_ll(line) {
            Some(-1) => ReplyView::Array(None),
            Some(n) if n >= 0 => ReplyView::Array(Some((n as usize, body))),
            _ => return Err(RespError::BadLength),
        },
        other => return Err(RespError::BadType(other)),
    })
}

/// Splits the element bytes of an array reply into its elements (each a complete reply).
pub fn array_elements(body: &[u8]) -> impl Iterator<Item = Result<&[u8], RespError>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= body.len() {
            return None;
        }
        Some(match reply_len(&body[pos..]) {
            Ok(Some(n)) => {
                let e = &body[pos..pos + n];
                pos += n;
                Ok(e)
            }
            Ok(None) => {
                pos = body.len();
                Err(RespError::BadLength)
            }
            Err(e) => {
                pos = body.len();
                Err(e)
            }
        })
    })
}

/// Frames RESP2 replies. A long array reply arriving in many reads is scanned once: the
/// framer remembers where its complete elements end.
#[derive(Clone, Debug, Default)]
pub struct RespFramer {
    /// 0, or the end of the top-level array's elements known to be complete.
    pos: usize,
    /// Top-level array elements still to frame after `pos`.
    left: u64,
}

impl RespFramer {
    /// Frames the first reply in `buf` (which starts at a reply boundary). After
    /// `Complete(n)` the caller drops `n` bytes before calling again.
    pub fn next(&mut self, buf: &[u8]) -> Frame {
        if self.pos == 0 {
            match buf.first() {
                None => return Frame::Incomplete(None),
                Some(b'*') => {
                    let Some(nl) = memchr(b'\n', buf) else {
                        return line_incomplete(buf.len());
                    };
                    if nl < 2 || buf[nl - 1] != b'\r' {
                        return Frame::Invalid;
                    }
                    match parse_ll(&buf[1..nl - 1]) {
                        Some(n) if (-1..=0).contains(&n) => return Frame::Complete(nl + 1),
                        Some(n) if n > 0 => {
                            self.pos = nl + 1;
                            self.left = n as u64;
                        }
                        _ => return Frame::Invalid,
                    }
                }
                Some(_) => {
                    return match reply_len(buf) {
                        Ok(Some(n)) => Frame::Complete(n),
                        Ok(None) => incomplete(buf, 0),
                        Err(_) => Frame::Invalid,
                    }
                }
            }
        }
        while self.left > 0 {
            match reply_len(&buf[self.pos..]) {
                Ok(Some(n)) => {
                    self.pos += n;
                    self.left -= 1;
                }
                Ok(None) => return incomplete(buf, self.pos),
                Err(_) => return Frame::Invalid,
            }
        }
        let n = self.pos;
        self.pos = 0;
        Frame::Complete(n)
    }
}

/// More bytes are needed for the reply element at `pos`: how many, when a bulk length says
/// so; a line that never ends is not RESP.
fn incomplete(buf: &[u8], pos: usize) -> Frame {
    match bulk_total(buf, pos) {
        Some(t) => Frame::Incomplete(Some(t)),
        None if buf.len() - pos > MAX_REPLY_LINE && memchr(b'\n', &buf[pos..]).is_none() => {
            Frame::Invalid
        }
        None => Frame::Incomplete(None),
    }
}

fn line_incomplete(len: usize) -> Frame {
    if len > MAX_REPLY_LINE {
        Frame::Invalid
    } else {
        Frame::Incomplete(None)
    }
}

/// When a bulk string starts at `pos` and its length line is complete: the buffer length
/// that holds all of it.
fn bulk_total(buf: &[u8], pos: usize) -> Option<usize> {
    let rest = &buf[pos..];
    if rest.first() != Some(&b'$') {
        return None;
    }
    let nl = memchr(b'\n', rest)?;
    let n = parse_ll(rest.get(1..nl.checked_sub(1)?)?)?;
    (n >= 0).then(|| pos + nl + 1 + n as usize + 2)
}

fn write_len_line(out: &mut Vec<u8>, tag: u8, n: i64) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$<len>\r\n<data>\r\n`.
pub fn write_bulk(out: &mut Vec<u8>, data: &[u8]) {
    write_len_line(out, b'$', data.len() as i64);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `$-1\r\n`.
pub fn write_nil(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// `*<n>\r\n`.
pub fn write_array_header(out: &mut Vec<u8>, n: usize) {
    write_len_line(out, b'*', n as i64);
}

/// `-<msg>\r\n`; `msg` should start with an error code such as `ERR`. Line breaks in `msg`
/// become spaces, as redis does, so the reply stays one line.
pub fn write_error(out: &mut Vec<u8>, msg: &[u8]) {
    out.push(b'-');
    out.extend(
        msg.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// `:<n>\r\n`.
pub fn write_integer(out: &mut Vec<u8>, n: i64) {
    write_len_line(out, b':', n);
}

/// `+<s>\r\n` (`s` must not contain CR or LF).
pub fn write_simple(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'+');
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

/// A command as a multibulk frame: `*argc` then each argument as a bulk.
pub fn write_command<'b>(out: &mut Vec<u8>, argc: usize, args: impl IntoIterator<Item = &'b [u8]>) {
    write_array_header(out, argc);
    for a in args {
        write_bulk(out, a);
    }
}
