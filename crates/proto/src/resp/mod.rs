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

pub mod cluster;
mod reply;
pub mod resp3;
pub use reply::*;

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

/// The error reply `-ERR Protocol error: invalid multibulk length`.
pub const ERR_INVALID_MULTIBULK: &[u8] = b"-ERR Protocol error: invalid multibulk length\r\n";
/// The error reply `-ERR Protocol error: invalid bulk length`.
pub const ERR_INVALID_BULK: &[u8] = b"-ERR Protocol error: invalid bulk length\r\n";
/// The error reply `-ERR Protocol error: too big inline request`.
pub const ERR_TOO_BIG_INLINE: &[u8] = b"-ERR Protocol error: too big inline request\r\n";
/// The error reply `-ERR Protocol error: too big mbulk count string`.
pub const ERR_TOO_BIG_MBULK: &[u8] = b"-ERR Protocol error: too big mbulk count string\r\n";
/// The error reply `-ERR Protocol error: too big bulk count string`.
pub const ERR_TOO_BIG_BULK: &[u8] = b"-ERR Protocol error: too big bulk count string\r\n";
/// The error reply `-ERR Protocol error: unbalanced quotes in request`.
pub const ERR_UNBALANCED: &[u8] = b"-ERR Protocol error: unbalanced quotes in request\r\n";
/// The error reply `-ERR Protocol error: unauthenticated multibulk length`.
pub const ERR_UNAUTH_MULTIBULK: &[u8] =
    b"-ERR Protocol error: unauthenticated multibulk length\r\n";
/// The error reply `-ERR Protocol error: unauthenticated bulk length`.
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
    Incomplete {
        /// The buffer size needed, when known.
        total: Option<usize>,
    },
    /// Protocol error: write `reply`, then close if `close`.
    Error {
        /// redis-server's error reply.
        reply: &'static [u8],
        /// Close after writing it (always true).
        close: bool,
    },
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
    // Length lines are a few bytes: a plain loop ends them sooner than memchr2 starts.
    for (i, &c) in b.iter().take(SHORT_LINE).enumerate() {
        if c == term || c == 0 {
            return (c == term).then_some(i);
        }
    }
    let rest = b.get(SHORT_LINE..)?;
    memchr::memchr2(term, 0, rest)
        .map(|i| i + SHORT_LINE)
        .filter(|&i| b[i] == term)
}

/// How far [`find_term`] looks byte by byte.
const SHORT_LINE: usize = 16;

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
    // A saved progress always has `pos > 0`.
    if progress.pos != 0 && !matches!(r, RespParse::Incomplete { .. }) {
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

/// The length line at `pos` (`*N` or `$N`, type byte not checked) when it is what clients
/// send: plain decimal digits, no leading zero, `\r` and one more byte after them. Then
/// (N, position after the line), as [`length_line`] and [`parse_ll`] would find; None
/// leaves every other line to them.
#[inline(always)]
fn simple_length(buf: &[u8], pos: usize) -> Option<(i64, usize)> {
    let digits = buf.get(pos + 1..)?;
    let mut n: i64 = 0;
    // 18 digits cannot overflow.
    for (i, &d) in digits.iter().enumerate().take(19) {
        match d {
            b'0'..=b'9' if i < 18 => n = n * 10 + i64::from(d - b'0'),
            b'\r' if i > 0 && (i == 1 || digits[0] != b'0') && i + 1 < digits.len() => {
                return Some((n, pos + i + 3));
            }
            _ => return None,
        }
    }
    None
}

fn parse_multibulk<'a>(buf: &'a [u8], limits: &Limits, progress: &mut Progress) -> RespParse<'a> {
    let (argc, mut done, mut pos, mut first) = if progress.pos > 0 && progress.pos <= buf.len() {
        (progress.argc, progress.done, progress.pos, progress.first)
    } else {
        let (count, pos) = match simple_length(buf, 0) {
            Some(v) => v,
            None => {
                let (cr, pos) = match length_line(buf, 0, limits, ERR_TOO_BIG_MBULK) {
                    Ok(v) => v,
                    Err(r) => return r,
                };
                match parse_ll(&buf[1..cr]) {
                    Some(n) => (n, pos),
                    None => return error(ERR_INVALID_MULTIBULK),
                }
            }
        };
        if count > limits.max_multibulk_len {
            return error(ERR_INVALID_MULTIBULK);
        }
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
        let simple = match buf.get(pos) {
            Some(b'$') => simple_length(buf, pos),
            _ => None,
        };
        let (len, start) = match simple {
            Some(v) => v,
            None => {
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
                match parse_ll(&buf[pos + 1..cr]) {
                    Some(n) => (n, start),
                    None => return error(ERR_INVALID_BULK),
                }
            }
        };
        let len = match len {
            n if (0..=limits.max_bulk_len).contains(&n) => n as usize,
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

#[doc(hidden)]
pub mod drive {
    //! Router-like driver for the fuzz target and tests: feeds input in chunks and checks
    //! the parser's invariants. Panics if one breaks.
    use super::*;

    /// Calls `f` with the command `args` as parsed from its multibulk encoding.
    pub fn with_command<R>(args: &[&[u8]], f: impl FnOnce(&RespRequest<'_>) -> R) -> R {
        let mut buf = Vec::new();
        write_command(&mut buf, args.len(), args.iter().copied());
        let RespParse::Request(r, _) = parse_request(&buf, &Limits::default()) else {
            panic!("not a command: {args:?}")
        };
        f(&r)
    }

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
mod tests;
