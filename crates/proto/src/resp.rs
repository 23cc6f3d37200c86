//! RESP2 codec for Redis pools: request framing as redis-server 7 does it, reply framing for
//! backend replies, and reply writers. Pure: no I/O, no allocation proportional to a claimed
//! length.
//!
//! The router keeps a client's bytes in a buffer and calls [`parse_request`] in a loop:
//!
//! * [`RespParse::Request`]`(req, consumed)`: one whole command. Its arguments borrow the
//!   buffer (see [`RespRequest::args`]); execute it, then drop `consumed` bytes.
//! * [`RespParse::Skip`]`(n)`: redis-server ignores these bytes without a reply (an empty
//!   inline line, `*0`, `*-1`); drop them and parse again.
//! * [`RespParse::Incomplete`]`{ total }`: read more; `total` is the size the buffer must reach
//!   when it is known (inside a bulk argument), so large values are not re-parsed per read.
//! * [`RespParse::Error`]: write `reply` (redis-server's exact bytes) and close the connection
//!   (`close` is always true: redis-server closes after every protocol error).
//!
//! Quirks kept on purpose because redis-server 7.0 has them (checked live): the byte after a
//! length line's `\r` is skipped unchecked, the two bytes after bulk data are skipped unchecked,
//! a NUL byte before the line end makes the line "not yet complete" (redis uses `strchr`), the
//! 64 KiB limits count the whole unparsed buffer, and inline lines are split like
//! `sdssplitargs` (quotes, `\xHH` escapes).

use std::fmt;

/// Bounds applied while parsing requests. `Default` is redis-server 7.0's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted `*<count>` (redis 7: `INT_MAX`; redis ≤ 6: 1024*1024).
    pub max_multibulk_len: i64,
    /// `proto-max-bulk-len` (512 MB).
    pub max_bulk_len: i64,
    /// `PROTO_INLINE_MAX_SIZE`: unparsed bytes without a line end before an error (64 KiB).
    pub max_inline_len: usize,
    /// A password is required and the client has not authenticated yet: redis then refuses
    /// counts above 10 and bulk lengths above 16384.
    pub unauthenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_multibulk_len: i32::MAX as i64,
            max_bulk_len: 512 * 1024 * 1024,
            max_inline_len: 64 * 1024,
            unauthenticated: false,
        }
    }
}

pub const ERR_INVALID_MULTIBULK: &[u8] = b"-ERR Protocol error: invalid multibulk length\r\n";
pub const ERR_INVALID_BULK: &[u8] = b"-ERR Protocol error: invalid bulk length\r\n";
pub const ERR_TOO_BIG_INLINE: &[u8] = b"-ERR Protocol error: too big inline request\r\n";
pub const ERR_TOO_BIG_MBULK: &[u8] = b"-ERR Protocol error: too big mbulk count string\r\n";
pub const ERR_TOO_BIG_BULK: &[u8] = b"-ERR Protocol error: too big bulk count string\r\n";
pub const ERR_UNBALANCED: &[u8] = b"-ERR Protocol error: unbalanced quotes in request\r\n";
pub const ERR_UNAUTH_MULTIBULK: &[u8] =
    b"-ERR Protocol error: unauthenticated multibulk length\r\n";
pub const ERR_UNAUTH_BULK: &[u8] = b"-ERR Protocol error: unauthenticated bulk length\r\n";

const EXPECTED_PREFIX: &[u8] = b"-ERR Protocol error: expected '$', got '";
const EXPECTED_LEN: usize = EXPECTED_PREFIX.len() + 4;

/// `-ERR Protocol error: expected '$', got 'X'` for every byte X (redis turns `\r`/`\n` into
/// spaces so the reply stays one line).
static EXPECTED_DOLLAR: [[u8; EXPECTED_LEN]; 256] = {
    let mut table = [[0u8; EXPECTED_LEN]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < EXPECTED_PREFIX.len() {
            table[b][i] = EXPECTED_PREFIX[i];
            i += 1;
        }
        table[b][i] = if b == b'\r' as usize || b == b'\n' as usize {
            b' '
        } else {
            b as u8
        };
        table[b][i + 1] = b'\'';
        table[b][i + 2] = b'\r';
        table[b][i + 3] = b'\n';
        b += 1;
    }
    table
};

/// Result of [`parse_request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RespParse<'a> {
    /// One whole command and the number of bytes it used.
    Request(RespRequest<'a>, usize),
    /// Bytes redis-server drops without a reply.
    Skip(usize),
    /// Read more; `total` is the needed buffer length when known.
    Incomplete { total: Option<usize> },
    /// Protocol error: write `reply`, then close if `close`.
    Error { reply: &'static [u8], close: bool },
}

/// Arguments kept inline in [`RespRequest`] for O(1) access; later ones are found by scanning.
const INLINE_ARGS: usize = 8;

/// One command. Cheap to build: no heap allocation unless it is an inline command with quotes.
#[derive(Clone, PartialEq, Eq)]
pub struct RespRequest<'a> {
    form: Form<'a>,
    argc: usize,
    /// (start, end) of the first [`INLINE_ARGS`] arguments within the form's bytes.
    first: [(u32, u32); INLINE_ARGS],
}

#[derive(Clone, PartialEq, Eq)]
enum Form<'a> {
    /// The whole multibulk frame as the client sent it.
    Multibulk(&'a [u8]),
    /// An inline line without quotes: arguments are whitespace-separated slices.
    Inline(&'a [u8]),
    /// An inline line with quotes or escapes, re-encoded as a multibulk frame.
    Owned(Box<[u8]>),
}

impl fmt::Debug for RespRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for a in self.args() {
            l.entry(&String::from_utf8_lossy(a));
        }
        l.finish()
    }
}

impl<'a> RespRequest<'a> {
    fn bytes(&self) -> &[u8] {
        match &self.form {
            Form::Multibulk(b) | Form::Inline(b) => b,
            Form::Owned(b) => b,
        }
    }

    /// Number of arguments, command name included (always ≥ 1).
    pub fn argc(&self) -> usize {
        self.argc
    }

    /// True when the client used the inline form.
    pub fn is_inline(&self) -> bool {
        !matches!(self.form, Form::Multibulk(_))
    }

    /// The command name as sent (compare case-insensitively).
    pub fn name(&self) -> &[u8] {
        self.arg(0).unwrap_or_default()
    }

    /// Argument `i` (0 is the command name). O(1) for the first 8, a scan after that.
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        if i >= self.argc {
            return None;
        }
        if i < INLINE_ARGS {
            let (s, e) = self.first[i];
            return Some(&self.bytes()[s as usize..e as usize]);
        }
        self.args().nth(i)
    }

    /// All arguments in order, command name first.
    pub fn args(&self) -> Args<'_> {
        let (bytes, pos) = match &self.form {
            Form::Multibulk(b) => (*b, skip_line(b, 0)),
            Form::Inline(b) => (*b, 0),
            Form::Owned(b) => (&b[..], skip_line(b, 0)),
        };
        Args {
            bytes,
            pos,
            left: self.argc,
            inline: matches!(self.form, Form::Inline(_)),
        }
    }

    /// The client's multibulk frame, to forward unchanged (None for inline commands).
    pub fn raw_multibulk(&self) -> Option<&'a [u8]> {
        match self.form {
            Form::Multibulk(b) => Some(b),
            _ => None,
        }
    }

    /// Appends the command as a multibulk frame (the original bytes when possible).
    pub fn write_multibulk(&self, out: &mut Vec<u8>) {
        match &self.form {
            Form::Multibulk(b) => out.extend_from_slice(b),
            Form::Owned(b) => out.extend_from_slice(b),
            Form::Inline(_) => write_command(out, self.argc, self.args()),
        }
    }
}

/// Iterator over a request's arguments.
#[derive(Clone, Debug)]
pub struct Args<'b> {
    bytes: &'b [u8],
    pos: usize,
    left: usize,
    inline: bool,
}

impl<'b> Iterator for Args<'b> {
    type Item = &'b [u8];

    fn next(&mut self) -> Option<&'b [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (s, e, next) = if self.inline {
            inline_token(self.bytes, self.pos)
        } else {
            bulk_at(self.bytes, self.pos)
        };
        self.pos = next;
        Some(&self.bytes[s..e])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Args<'_> {}

/// Position after the line starting at `pos` of an already validated frame (`\r` + one byte).
fn skip_line(b: &[u8], pos: usize) -> usize {
    let cr = pos + memchr::memchr(b'\r', &b[pos..]).expect("validated frame");
    cr + 2
}

/// (start, end, next) of the bulk argument at `pos` of an already validated frame.
fn bulk_at(b: &[u8], pos: usize) -> (usize, usize, usize) {
    let cr = pos + memchr::memchr(b'\r', &b[pos..]).expect("validated frame");
    let len = b[pos + 1..cr]
        .iter()
        .fold(0usize, |n, &d| n * 10 + usize::from(d - b'0'));
    let start = cr + 2;
    (start, start + len, start + len + 2)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// (start, end, next) of the next whitespace-separated token of a quote-free line.
fn inline_token(b: &[u8], mut pos: usize) -> (usize, usize, usize) {
    while pos < b.len() && is_space(b[pos]) {
        pos += 1;
    }
    let start = pos;
    while pos < b.len() && !is_space(b[pos]) {
        pos += 1;
    }
    (start, pos, pos)
}

/// redis `string2ll`: optional `-`, no `+`, no leading zeros, no `-0`, no overflow.
pub fn parse_ll(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] => return if neg { None } else { Some(0) },
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Index of the first `term` in `b` as redis's `strchr` would find it (a NUL ends the search).
fn find_term(b: &[u8], term: u8) -> Option<usize> {
    memchr::memchr2(term, 0, b).filter(|&i| b[i] == term)
}

/// Parses the first command in `buf`. Never panics; allocates only for quoted inline commands.
pub fn parse_request<'a>(buf: &'a [u8], limits: &Limits) -> RespParse<'a> {
    parse_request_resume(buf, limits, &mut Progress::default())
}

/// Where a partly received multibulk command stopped, so the next call after more bytes
/// arrive does not scan the complete arguments again (a command of many small arguments
/// read in many pieces would otherwise cost quadratic time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// 0: nothing known. Else the position after the last complete argument.
    pos: usize,
    argc: usize,
    done: usize,
    first: [(u32, u32); INLINE_ARGS],
}

/// [`parse_request`] that remembers, in `progress`, how far an incomplete multibulk command
/// was checked. Keep one `Progress` per connection; between calls the caller may only append
/// to `buf` (a result other than `Incomplete` resets `progress`, so dropping consumed bytes
/// then is fine). Results are the same as [`parse_request`]'s on the same bytes.
pub fn parse_request_resume<'a>(
    buf: &'a [u8],
    limits: &Limits,
    progress: &mut Progress,
) -> RespParse<'a> {
    let r = match buf.first() {
        None => RespParse::Incomplete { total: None },
        Some(b'*') => parse_multibulk(buf, limits, progress),
        Some(_) => parse_inline(buf, limits),
    };
    if !matches!(r, RespParse::Incomplete { .. }) {
        *progress = Progress::default();
    }
    r
}

fn error(reply: &'static [u8]) -> RespParse<'static> {
    RespParse::Error { reply, close: true }
}

/// Finds a length line starting at `pos` (`*N` or `$N`): Ok((cr, next)) or an early result.
fn length_line<'a>(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
    too_big: &'static [u8],
) -> Result<(usize, usize), RespParse<'a>> {
    let rest = &buf[pos..];
    match find_term(rest, b'\r') {
        None if rest.len() > limits.max_inline_len => Err(error(too_big)),
        None => Err(RespParse::Incomplete { total: None }),
        // redis needs one more byte after '\r' and skips it without looking at it.
        Some(cr) if cr + 2 > rest.len() => Err(RespParse::Incomplete { total: None }),
        Some(cr) => Ok((pos + cr, pos + cr + 2)),
    }
}

fn parse_multibulk<'a>(buf: &'a [u8], limits: &Limits, progress: &mut Progress) -> RespParse<'a> {
    let (argc, mut done, mut pos, mut first) = if progress.pos > 0 && progress.pos <= buf.len() {
        (progress.argc, progress.done, progress.pos, progress.first)
    } else {
        let (cr, pos) = match length_line(buf, 0, limits, ERR_TOO_BIG_MBULK) {
            Ok(v) => v,
            Err(r) => return r,
        };
        let count = match parse_ll(&buf[1..cr]) {
            Some(n) if n <= limits.max_multibulk_len => n,
            _ => return error(ERR_INVALID_MULTIBULK),
        };
        if count > 10 && limits.unauthenticated {
            return error(ERR_UNAUTH_MULTIBULK);
        }
        if count <= 0 {
            return RespParse::Skip(pos);
        }
        (count as usize, 0, pos, [(0u32, 0u32); INLINE_ARGS])
    };
    let save = |progress: &mut Progress, done, pos, first| {
        *progress = Progress {
            pos,
            argc,
            done,
            first,
        };
    };
    while done < argc {
        let (cr, start) = match length_line(buf, pos, limits, ERR_TOO_BIG_BULK) {
            Ok(v) => v,
            Err(r) => {
                save(progress, done, pos, first);
                return r;
            }
        };
        if buf[pos] != b'$' {
            return error(&EXPECTED_DOLLAR[usize::from(buf[pos])]);
        }
        let len = match parse_ll(&buf[pos + 1..cr]) {
            Some(n) if (0..=limits.max_bulk_len).contains(&n) => n as usize,
            _ => return error(ERR_INVALID_BULK),
        };
        if len > 16384 && limits.unauthenticated {
            return error(ERR_UNAUTH_BULK);
        }
        let end = start + len;
        // The two bytes after the data are skipped unchecked, as redis does.
        let next = end + 2;
        if next > buf.len() {
            save(progress, done, pos, first);
            return RespParse::Incomplete { total: Some(next) };
        }
        if let Some(slot) = first.get_mut(done) {
            // Offsets are u32: refuse frames whose first arguments lie past 4 GiB.
            match (u32::try_from(start), u32::try_from(end)) {
                (Ok(s), Ok(e)) => *slot = (s, e),
                _ => return error(ERR_INVALID_BULK),
            }
        }
        pos = next;
        done += 1;
    }
    RespParse::Request(
        RespRequest {
            form: Form::Multibulk(&buf[..pos]),
            argc,
            first,
        },
        pos,
    )
}

fn parse_inline<'a>(buf: &'a [u8], limits: &Limits) -> RespParse<'a> {
    let nl = match find_term(buf, b'\n') {
        Some(nl) => nl,
        None if buf.len() > limits.max_inline_len => return error(ERR_TOO_BIG_INLINE),
        None => return RespParse::Incomplete { total: None },
    };
    let consumed = nl + 1;
    if nl > u32::MAX as usize {
        return error(ERR_TOO_BIG_INLINE);
    }
    let mut line = &buf[..nl];
    if let Some((b'\r', l)) = line.split_last() {
        line = l;
    }
    if line.iter().any(|&b| b == b'"' || b == b'\'') {
        return match split_quoted(line) {
            Some((frame, argc)) if argc > 0 => {
                let mut first = [(0u32, 0u32); INLINE_ARGS];
                let mut it = Args {
                    bytes: &frame,
                    pos: skip_line(&frame, 0),
                    left: argc,
                    inline: false,
                };
                for slot in first.iter_mut().take(argc) {
                    let (s, e, next) = bulk_at(it.bytes, it.pos);
                    *slot = (s as u32, e as u32);
                    it.pos = next;
                }
                RespParse::Request(
                    RespRequest {
                        form: Form::Owned(frame),
                        argc,
                        first,
                    },
                    consumed,
                )
            }
            Some(_) => RespParse::Skip(consumed),
            None => error(ERR_UNBALANCED),
        };
    }
    let mut first = [(0u32, 0u32); INLINE_ARGS];
    let mut argc = 0;
    let mut pos = 0;
    loop {
        let (s, e, next) = inline_token(line, pos);
        if s == e {
            break;
        }
        if argc < INLINE_ARGS {
            first[argc] = (s as u32, e as u32);
        }
        argc += 1;
        pos = next;
    }
    if argc == 0 {
        return RespParse::Skip(consumed);
    }
    RespParse::Request(
        RespRequest {
            form: Form::Inline(line),
            argc,
            first,
        },
        consumed,
    )
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `sdssplitargs` on a line with quotes, re-encoded as a multibulk frame.
/// None: unbalanced quotes. The line is at most the buffered bytes, so this is bounded.
fn split_quoted(line: &[u8]) -> Option<(Box<[u8]>, usize)> {
    let mut args: Vec<Vec<u8>> = Vec::new();
    let mut p = 0;
    let at = |i: usize| line.get(i).copied();
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            break;
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = at(p);
            if inq {
                match c {
                    None => return None,
                    Some(b'\\')
                        if at(p + 1) == Some(b'x')
                            && at(p + 2).and_then(hex_val).is_some()
                            && at(p + 3).and_then(hex_val).is_some() =>
                    {
                        let hi = at(p + 2).and_then(hex_val)?;
                        let lo = at(p + 3).and_then(hex_val)?;
                        cur.push(hi * 16 + lo);
                        p += 3;
                    }
                    Some(b'\\') if at(p + 1).is_some() => {
                        p += 1;
                        cur.push(match line[p] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        // A closing quote must be followed by a space or the end.
                        if at(p + 1).is_some_and(|n| !is_space(n)) {
                            return None;
                        }
                        p += 1;
                        break;
                    }
                    Some(other) => cur.push(other),
                }
            } else if insq {
                match c {
                    None => return None,
                    Some(b'\\') if at(p + 1) == Some(b'\'') => {
                        p += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if at(p + 1).is_some_and(|n| !is_space(n)) {
                            return None;
                        }
                        p += 1;
                        break;
                    }
                    Some(other) => cur.push(other),
                }
            } else {
                match c {
                    None => break,
                    Some(b) if is_space(b) => break,
                    Some(b'"') => inq = true,
                    Some(b'\'') => insq = true,
                    Some(other) => cur.push(other),
                }
            }
            p += 1;
        }
        args.push(cur);
    }
    let mut out = Vec::with_capacity(line.len() + 16 * args.len() + 16);
    write_command(&mut out, args.len(), args.iter().map(|a| &a[..]));
    Some((out.into_boxed_slice(), args.len()))
}

// ---------------------------------------------------------------------------------------
// Replies

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

/// End of the CRLF-terminated line starting at `pos`: Ok(Some(index of '\r')).
fn reply_line(buf: &[u8], pos: usize) -> Result<Option<usize>, RespError> {
    match memchr::memchr(b'\n', &buf[pos..]) {
        None => Ok(None),
        Some(nl) if nl == 0 || buf[pos + nl - 1] != b'\r' => Err(RespError::BadTerminator),
        Some(nl) => Ok(Some(pos + nl - 1)),
    }
}

/// Length of the first complete reply in `buf` (nested arrays included), `None` if more bytes
/// are needed. Iterative, so deep nesting cannot overflow the stack; never allocates.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, RespError> {
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

/// A complete reply seen from outside (for merging split commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyView<'a> {
    Simple(&'a [u8]),
    Error(&'a [u8]),
    Integer(i64),
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

#[doc(hidden)]
pub mod drive {
    //! Router-like driver for the fuzz target and tests: feeds input in chunks and checks
    //! the parser's invariants. Panics if one breaks.
    use super::*;

    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub struct Outcome {
        pub requests: Vec<Vec<Vec<u8>>>,
        pub error: Option<&'static [u8]>,
    }

    pub fn run(input: &[u8], chunk: usize, limits: &Limits) -> Outcome {
        let chunk = chunk.max(1);
        let mut out = Outcome::default();
        let mut buf = Vec::new();
        let mut progress = Progress::default();
        for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                let parsed = parse_request(&buf, limits);
                assert_eq!(parse_request_resume(&buf, limits, &mut progress), parsed);
                match parsed {
                    RespParse::Request(req, used) => {
                        assert!(used > 0 && used <= buf.len());
                        assert!(req.argc() >= 1);
                        let args: Vec<Vec<u8>> = req.args().map(<[u8]>::to_vec).collect();
                        assert_eq!(args.len(), req.argc());
                        for (i, a) in args.iter().enumerate() {
                            assert_eq!(req.arg(i), Some(&a[..]));
                        }
                        assert_eq!(req.arg(args.len()), None);
                        // Re-encoding must parse back to the same arguments.
                        let mut mb = Vec::new();
                        req.write_multibulk(&mut mb);
                        match parse_request(&mb, &Limits::default()) {
                            RespParse::Request(again, n) => {
                                assert_eq!(n, mb.len());
                                assert!(again.args().eq(args.iter().map(|a| &a[..])));
                            }
                            other => panic!("re-encoded request: {other:?}"),
                        }
                        out.requests.push(args);
                        buf.drain(..used);
                    }
                    RespParse::Skip(n) => {
                        assert!(n > 0 && n <= buf.len());
                        buf.drain(..n);
                    }
                    RespParse::Incomplete { total } => {
                        if let Some(t) = total {
                            assert!(t > buf.len());
                        }
                        break;
                    }
                    RespParse::Error { reply, close } => {
                        assert!(close && reply.starts_with(b"-ERR ") && reply.ends_with(b"\r\n"));
                        assert_eq!(reply_len(reply), Ok(Some(reply.len())));
                        out.error = Some(reply);
                        return out;
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lim() -> Limits {
        Limits::default()
    }

    fn args_of(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
        match parse_request(buf, &lim()) {
            RespParse::Request(r, n) => (r.args().map(<[u8]>::to_vec).collect(), n),
            other => panic!("{other:?}"),
        }
    }

    fn err_of(buf: &[u8], limits: &Limits) -> &'static [u8] {
        match parse_request(buf, limits) {
            RespParse::Error { reply, close } => {
                assert!(close);
                reply
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn incomplete(buf: &[u8]) -> Option<usize> {
        match parse_request(buf, &lim()) {
            RespParse::Incomplete { total } => total,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn v(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_basic() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\nrest";
        let (a, n) = args_of(buf);
        assert_eq!(a, v(&["SET", "k", ""]));
        assert_eq!(n, buf.len() - 4);
        match parse_request(buf, &lim()) {
            RespParse::Request(r, _) => {
                assert_eq!(r.raw_multibulk(), Some(&buf[..n]));
                assert_eq!(r.name(), b"SET");
                assert!(!r.is_inline());
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn many_args_beyond_inline_slots() {
        let mut buf = Vec::new();
        let items: Vec<String> = (0..20).map(|i| format!("a{i}")).collect();
        write_command(&mut buf, items.len(), items.iter().map(|s| s.as_bytes()));
        let RespParse::Request(r, n) = parse_request(&buf, &lim()) else {
            panic!()
        };
        assert_eq!(n, buf.len());
        for (i, it) in items.iter().enumerate() {
            assert_eq!(r.arg(i), Some(it.as_bytes()));
        }
        assert_eq!(r.arg(20), None);
    }

    // Expected replies below were observed from redis-server 7.0.15 (nc / python socket).
    #[test]
    fn multibulk_count_errors() {
        for bad in [
            &b"*abc\r\n"[..],
            b"*-0\r\n",
            b"*01\r\n",
            b"*+1\r\n",
            b"*\r\n",
            b"*1 \r\n",
            b"* 1\r\n",
            b"*2147483648\r\n",
            b"*1\n$4\r\nPING\r\n",
            b"*-99999999999999999999\r\n",
        ] {
            assert_eq!(err_of(bad, &lim()), ERR_INVALID_MULTIBULK);
        }
        // INT_MAX itself is accepted (redis 7), then more bytes are awaited.
        assert_eq!(incomplete(b"*2147483647\r\n"), None);
        assert_eq!(incomplete(b"*1048577\r\n"), None);
        let old = Limits {
            max_multibulk_len: 1024 * 1024,
            ..lim()
        };
        assert_eq!(err_of(b"*1048577\r\n", &old), ERR_INVALID_MULTIBULK);
        assert!(matches!(
            parse_request(b"*1048576\r\n", &old),
            RespParse::Incomplete { .. }
        ));
    }

    #[test]
    fn non_positive_counts_are_skipped() {
        assert_eq!(parse_request(b"*0\r\nPING\r\n", &lim()), RespParse::Skip(4));
        assert_eq!(parse_request(b"*-1\r\n", &lim()), RespParse::Skip(5));
        assert_eq!(
            parse_request(b"*-2147483649\r\n", &lim()),
            RespParse::Skip(14)
        );
    }

    #[test]
    fn bulk_length_errors() {
        for bad in [
            &b"*1\r\n$536870913\r\n"[..],
            b"*1\r\n$-1\r\n",
            b"*1\r\n$abc\r\n",
            b"*1\r\n$04\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$-0\r\n",
            b"*1\r\n$4 \r\n",
        ] {
            assert_eq!(err_of(bad, &lim()), ERR_INVALID_BULK);
        }
        // 512 MB exactly is fine: nothing is allocated, the total is announced.
        assert_eq!(
            incomplete(b"*1\r\n$536870912\r\n"),
            Some(16 + 536870912 + 2)
        );
    }

    #[test]
    fn expected_dollar() {
        assert_eq!(
            err_of(b"*1\r\nx4\r\nPING\r\n", &lim()),
            b"-ERR Protocol error: expected '$', got 'x'\r\n"
        );
        assert_eq!(
            err_of(b"*1\r\n\r\n4\r\n", &lim()),
            b"-ERR Protocol error: expected '$', got ' '\r\n"
        );
        assert_eq!(
            err_of(b"*1\r\n\n4\r\n", &lim()),
            b"-ERR Protocol error: expected '$', got ' '\r\n"
        );
        assert_eq!(
            err_of(b"*1\r\n\xff4\r\n", &lim()),
            b"-ERR Protocol error: expected '$', got '\xff'\r\n"
        );
        // A NUL hides the line end from redis's strchr: still waiting.
        assert_eq!(incomplete(b"*1\r\n\x004\r\nPING\r\n"), None);
    }

    #[test]
    fn too_big_count_strings() {
        let mut b = b"*".to_vec();
        b.extend(std::iter::repeat_n(b'1', 65535));
        assert_eq!(incomplete(&b), None);
        b.push(b'1');
        assert_eq!(err_of(&b, &lim()), ERR_TOO_BIG_MBULK);
        let mut b = b"*1\r\n$".to_vec();
        b.extend(std::iter::repeat_n(b'1', 65535));
        assert_eq!(incomplete(&b), None);
        b.push(b'1');
        assert_eq!(err_of(&b, &lim()), ERR_TOO_BIG_BULK);
    }

    #[test]
    fn unauthenticated_bounds() {
        let l = Limits {
            unauthenticated: true,
            ..lim()
        };
        assert_eq!(err_of(b"*11\r\n", &l), ERR_UNAUTH_MULTIBULK);
        assert!(matches!(
            parse_request(b"*10\r\n", &l),
            RespParse::Incomplete { .. }
        ));
        assert_eq!(err_of(b"*1\r\n$16385\r\n", &l), ERR_UNAUTH_BULK);
        assert!(matches!(
            parse_request(b"*1\r\n$16384\r\n", &l),
            RespParse::Incomplete { .. }
        ));
    }

    #[test]
    fn crlf_quirks_match_redis() {
        // Bytes after '\r' and after bulk data are skipped unchecked.
        assert_eq!(args_of(b"*1\r\n$4\r\nPINGXY"), (v(&["PING"]), 14));
        assert_eq!(args_of(b"*1\rX$4\r\nPING\r\n").0, v(&["PING"]));
        assert_eq!(args_of(b"*1\r\n$4\rXPING\r\n").0, v(&["PING"]));
        assert_eq!(
            args_of(b"*2\r\n$4\r\nECHO\r\n$1\r\n\x00\r\n").0,
            vec![b"ECHO".to_vec(), vec![0]]
        );
        for partial in [
            &b"*1\r\n"[..],
            b"*1\r",
            b"*1\r\n$4\r\nPING",
            b"*1\r\n$4\r\nPING\r",
            b"*1\r\n$0\r\n",
        ] {
            assert!(matches!(
                parse_request(partial, &lim()),
                RespParse::Incomplete { .. }
            ));
        }
        assert_eq!(incomplete(b"*1\r\n$4\r\nPI"), Some(14));
    }

    #[test]
    fn inline_commands() {
        assert_eq!(args_of(b"PING\r\n"), (v(&["PING"]), 6));
        assert_eq!(args_of(b"PING\n"), (v(&["PING"]), 5));
        assert_eq!(args_of(b"PING\rX\n").0, v(&["PING", "X"]));
        assert_eq!(args_of(b"ECHO  a\t b \r\n").0, v(&["ECHO", "a", "b"]));
        assert_eq!(parse_request(b"\r\nPING\r\n", &lim()), RespParse::Skip(2));
        assert_eq!(parse_request(b"   \r\n", &lim()), RespParse::Skip(5));
        assert_eq!(incomplete(b"PI\x00NG\r\n"), None);
        assert_eq!(incomplete(b"PING"), None);
        let RespParse::Request(r, _) = parse_request(b"set k v\r\n", &lim()) else {
            panic!()
        };
        assert!(r.is_inline() && r.raw_multibulk().is_none());
        let mut mb = Vec::new();
        r.write_multibulk(&mut mb);
        assert_eq!(mb, b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }

    #[test]
    fn inline_quotes_like_sdssplitargs() {
        assert_eq!(args_of(b"ECHO \"a\\x41\\n\"\r\n").0, v(&["ECHO", "aA\n"]));
        assert_eq!(args_of(b"ECHO 'a\\'b'\r\n").0, v(&["ECHO", "a'b"]));
        assert_eq!(
            args_of(b"ECHO \"\\t\\r\\x4g\\q\"\r\n").0,
            v(&["ECHO", "\t\rx4gq"])
        );
        assert_eq!(args_of(b"ECHO \"\"\r\n").0, v(&["ECHO", ""]));
        assert_eq!(args_of(b"ECHO '' x\r\n").0, v(&["ECHO", "", "x"]));
        assert_eq!(args_of(b"ECHO \"a\"\t\"b\"\r\n").0, v(&["ECHO", "a", "b"]));
        assert_eq!(args_of(b"set a\"b c\" d\r\n").0, v(&["set", "ab c", "d"]));
        for bad in [
            &b"PING \"a\r\n"[..],
            b"ECHO 'a\\\\'\r\n",
            b"ECHO \"a\"b\r\n",
            b"ECHO 'a'b\r\n",
        ] {
            assert_eq!(err_of(bad, &lim()), ERR_UNBALANCED);
        }
    }

    #[test]
    fn inline_too_big() {
        let b = vec![b'P'; 65536];
        assert_eq!(incomplete(&b), None);
        assert_eq!(err_of(&vec![b'P'; 65537], &lim()), ERR_TOO_BIG_INLINE);
        // With its line end present, a long line is taken (as redis does once it has read it).
        let mut b = vec![b'P'; 70000];
        b.extend_from_slice(b"\r\n");
        assert_eq!(args_of(&b).1, 70002);
    }

    #[test]
    fn reply_len_cases() {
        assert_eq!(reply_len(b"+OK\r\n"), Ok(Some(5)));
        assert_eq!(reply_len(b"-ERR x\r\nmore"), Ok(Some(8)));
        assert_eq!(reply_len(b":-12\r\n"), Ok(Some(6)));
        assert_eq!(reply_len(b"$-1\r\n"), Ok(Some(5)));
        assert_eq!(reply_len(b"$3\r\nabc\r\n+"), Ok(Some(9)));
        assert_eq!(reply_len(b"*-1\r\n"), Ok(Some(5)));
        assert_eq!(reply_len(b"*0\r\n"), Ok(Some(4)));
        assert_eq!(reply_len(b"*2\r\n*1\r\n:1\r\n$1\r\na\r\n"), Ok(Some(19)));
        assert_eq!(reply_len(b"*2\r\n*1\r\n:1\r\n"), Ok(None));
        assert_eq!(reply_len(b"$3\r\nabc\r"), Ok(None));
        assert_eq!(reply_len(b""), Ok(None));
        assert_eq!(reply_len(b"+OK"), Ok(None));
        assert_eq!(reply_len(b"$3\r\nabcde"), Err(RespError::BadTerminator));
        assert_eq!(reply_len(b"+OK\n"), Err(RespError::BadTerminator));
        assert_eq!(reply_len(b"!3\r\n"), Err(RespError::BadType(b'!')));
        assert_eq!(reply_len(b"$x\r\n"), Err(RespError::BadLength));
        assert_eq!(reply_len(b":1.5\r\n"), Err(RespError::BadLength));
        assert_eq!(reply_len(b"*-2\r\n"), Err(RespError::BadLength));
        assert_eq!(reply_len(b"$536870913\r\n"), Err(RespError::BadLength));
        // Deep nesting needs no stack.
        let mut deep = b"*1\r\n".repeat(100_000);
        assert_eq!(reply_len(&deep), Ok(None));
        deep.extend_from_slice(b":1\r\n");
        assert_eq!(reply_len(&deep), Ok(Some(deep.len())));
    }

    #[test]
    fn writers() {
        let mut o = Vec::new();
        write_bulk(&mut o, b"ab");
        write_nil(&mut o);
        write_array_header(&mut o, 3);
        write_error(&mut o, b"ERR bad\r\nthing");
        write_integer(&mut o, -7);
        write_simple(&mut o, b"OK");
        assert_eq!(
            o,
            b"$2\r\nab\r\n$-1\r\n*3\r\n-ERR bad  thing\r\n:-7\r\n+OK\r\n"
        );
        assert_eq!(view_reply(b"-ERR x\r\n"), Ok(ReplyView::Error(b"ERR x")));
        assert_eq!(
            view_reply(b"$2\r\nab\r\n"),
            Ok(ReplyView::Bulk(Some(b"ab")))
        );
        assert_eq!(
            view_reply(b"*2\r\n:1\r\n:2\r\n"),
            Ok(ReplyView::Array(Some((2, &b":1\r\n:2\r\n"[..]))))
        );
        let elems: Vec<_> = array_elements(b":1\r\n$1\r\nx\r\n").collect();
        assert_eq!(elems, vec![Ok(&b":1\r\n"[..]), Ok(&b"$1\r\nx\r\n"[..])]);
    }

    #[test]
    fn parse_ll_like_string2ll() {
        assert_eq!(parse_ll(b"0"), Some(0));
        assert_eq!(parse_ll(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_ll(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_ll(bad), None, "{bad:?}");
        }
    }

    /// Seeds also used by the fuzz target: must not break the driver's invariants.
    #[test]
    fn fuzz_seeds() {
        let seeds: &[&[u8]] = &[
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            b"PING\r\n\r\nECHO \"a\\x41\" 'b'\r\n*0\r\n*-1\r\nQUIT\n",
            b"*1\r\n$4\r\nPINGXY*1\r\n$1\r\n\xff\r\n",
            b"*2\r\n$3\r\nGET\r\n$-1\r\n",
            b"*1\r\nx\r\n",
            b"ECHO \"unbalanced\r\n",
        ];
        for s in seeds {
            for chunk in [1, 3, 7, s.len()] {
                let whole = drive::run(s, s.len(), &lim());
                assert_eq!(drive::run(s, chunk, &lim()), whole);
            }
        }
        assert_eq!(drive::run(seeds[0], 1, &lim()).requests.len(), 2);
        assert_eq!(drive::run(seeds[1], 1, &lim()).requests.len(), 3);
        assert_eq!(
            drive::run(seeds[4], 1, &lim()).error,
            Some(&EXPECTED_DOLLAR[b'x' as usize][..])
        );
    }

    #[derive(Clone, Debug)]
    enum Model {
        Simple(Vec<u8>),
        Error(Vec<u8>),
        Int(i64),
        Bulk(Option<Vec<u8>>),
        Array(Option<Vec<Model>>),
    }

    fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            any::<u8>().prop_filter("no line end", |b| *b != b'\r' && *b != b'\n'),
            0..12,
        )
    }

    fn model() -> impl Strategy<Value = Model> {
        let leaf = prop_oneof![
            line_bytes().prop_map(Model::Simple),
            line_bytes().prop_map(Model::Error),
            any::<i64>().prop_map(Model::Int),
            prop::option::of(prop::collection::vec(any::<u8>(), 0..40)).prop_map(Model::Bulk),
            Just(Model::Array(None)),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop::collection::vec(inner, 0..6).prop_map(|v| Model::Array(Some(v)))
        })
    }

    fn serialize(m: &Model, out: &mut Vec<u8>) {
        match m {
            Model::Simple(s) => write_simple(out, s),
            Model::Error(s) => {
                out.push(b'-');
                out.extend_from_slice(s);
                out.extend_from_slice(b"\r\n");
            }
            Model::Int(n) => write_integer(out, *n),
            Model::Bulk(None) => write_nil(out),
            Model::Bulk(Some(b)) => write_bulk(out, b),
            Model::Array(None) => out.extend_from_slice(b"*-1\r\n"),
            Model::Array(Some(v)) => {
                write_array_header(out, v.len());
                for e in v {
                    serialize(e, out);
                }
            }
        }
    }

    fn arg_list() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..12)
    }

    const PIECES: &[&[u8]] = &[
        b"*", b"$", b"\r\n", b"\r", b"\n", b"1", b"2", b"-1", b"0", b"\"", b"'", b"\\x4", b" ",
        b"a", b"\0",
    ];

    fn is_incomplete(p: RespParse<'_>) -> bool {
        matches!(p, RespParse::Incomplete { .. })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..300), chunk in 1usize..20, unauth: bool) {
            let l = Limits { unauthenticated: unauth, max_inline_len: 64, ..lim() };
            drive::run(&data, chunk, &l);
            let _ = reply_len(&data);
        }

        #[test]
        fn protocol_like_bytes_never_panic(parts in prop::collection::vec(prop::sample::select(PIECES), 0..60), chunk in 1usize..10) {
            let data: Vec<u8> = parts.concat();
            drive::run(&data, chunk, &Limits { max_inline_len: 32, ..lim() });
            let _ = reply_len(&data);
        }

        #[test]
        fn multibulk_round_trip_byte_by_byte(args in arg_list()) {
            let mut buf = Vec::new();
            write_command(&mut buf, args.len(), args.iter().map(|a| &a[..]));
            for cut in 0..buf.len() {
                prop_assert!(is_incomplete(parse_request(&buf[..cut], &lim())), "cut {}", cut);
            }
            let RespParse::Request(r, n) = parse_request(&buf, &lim()) else { panic!() };
            prop_assert_eq!(n, buf.len());
            prop_assert!(r.args().eq(args.iter().map(|a| &a[..])));
        }

        #[test]
        fn resume_matches_stateless(data in prop::collection::vec(prop::sample::select(PIECES), 0..60), chunk in 1usize..10) {
            let data: Vec<u8> = data.concat();
            let l = Limits { max_inline_len: 32, ..lim() };
            let mut progress = Progress::default();
            let mut buf = Vec::new();
            for piece in data.chunks(chunk) {
                buf.extend_from_slice(piece);
                loop {
                    let fresh = parse_request(&buf, &l);
                    let resumed = parse_request_resume(&buf, &l, &mut progress);
                    prop_assert_eq!(&fresh, &resumed);
                    let used = match fresh {
                        RespParse::Request(_, n) | RespParse::Skip(n) => n,
                        RespParse::Incomplete { .. } => break,
                        RespParse::Error { .. } => return Ok(()),
                    };
                    buf.drain(..used);
                }
            }
        }

        #[test]
        fn big_multibulk_resumes(args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..5), 1..40)) {
            let mut buf = Vec::new();
            write_command(&mut buf, args.len(), args.iter().map(|a| &a[..]));
            let mut progress = Progress::default();
            for cut in 1..buf.len() {
                prop_assert!(is_incomplete(parse_request_resume(&buf[..cut], &lim(), &mut progress)));
            }
            let RespParse::Request(r, n) = parse_request_resume(&buf, &lim(), &mut progress) else { panic!() };
            prop_assert_eq!(n, buf.len());
            prop_assert!(r.args().eq(args.iter().map(|a| &a[..])));
            prop_assert_eq!(progress, Progress::default());
        }

        #[test]
        fn inline_round_trip(args in prop::collection::vec("[a-zA-Z0-9_:]{1,10}", 1..10)) {
            let line = format!("{}\r\n", args.join(" "));
            let buf = line.as_bytes();
            for cut in 0..buf.len() - 1 {
                prop_assert!(is_incomplete(parse_request(&buf[..cut], &lim())));
            }
            let RespParse::Request(r, n) = parse_request(buf, &lim()) else { panic!() };
            prop_assert_eq!(n, buf.len());
            prop_assert!(r.args().eq(args.iter().map(|a| a.as_bytes())));
        }

        #[test]
        fn reply_len_agrees_with_serialization(m in model(), tail in prop::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = Vec::new();
            serialize(&m, &mut buf);
            let len = buf.len();
            for cut in 0..len {
                prop_assert_eq!(reply_len(&buf[..cut]), Ok(None));
            }
            buf.extend_from_slice(&tail);
            prop_assert_eq!(reply_len(&buf), Ok(Some(len)));
        }
    }
}
