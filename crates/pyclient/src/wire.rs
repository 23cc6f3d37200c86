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

/// The flags (`f`) and key (`k`) tokens of a `VA` line. A hit without its key (a server that
/// ignores `k`) cannot be matched to a request: the reply is bad.
fn va_tokens(line: &[u8]) -> Result<(u32, &[u8]), WireError> {
    let mut flags = 0;
    let mut key = None;
    for t in line.split(|&b| b == b' ').skip(2).filter(|t| !t.is_empty()) {
        match t[0] {
            b'f' => flags = flags_of(&t[1..], line)?,
            b'k' if t.len() > 1 => key = Some(&t[1..]),
            _ => {}
        }
    }
    Ok((flags, key.ok_or_else(|| WireError::of(line))?))
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

/// Where the first line of `buf` ends: the index of its CR, or None while its CRLF has not
/// arrived. The bytes before `from` are known to hold no CRLF. A line longer than
/// [`MAX_LINE`] is garbage.
pub fn line_end(buf: &[u8], from: usize) -> Result<Option<usize>, WireError> {
    // a search for LF needs no set-up, where memmem's for CRLF cost more than the short
    // lines it searched
    let mut at = from;
    let cr = loop {
        match memchr::memchr(b'\n', &buf[at..]) {
            Some(i) if at + i > from && buf[at + i - 1] == b'\r' => break Some(at + i - 1),
            Some(i) => at += i + 1,
            None => break None,
        }
    };
    match cr {
        Some(cr) if cr <= MAX_LINE => Ok(Some(cr)),
        None if buf.len() <= MAX_LINE + 1 => Ok(None),
        _ => Err(WireError(b"SERVER_ERROR reply line too long".to_vec())),
    }
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

/// What a reply parser needs: more bytes (at least `want` in all, counted from the reply's
/// start, when a data block's length says so), or nothing more, the reply being bad.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    More { want: usize },
    Bad(WireError),
}

impl From<WireError> for Stop {
    fn from(e: WireError) -> Stop {
        Stop::Bad(e)
    }
}

/// Reads lines and data blocks off the bytes of one reply received so far.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn line(&mut self) -> Result<&'a [u8], Stop> {
        let rest = &self.buf[self.at..];
        match line_end(rest, 0)? {
            Some(cr) => {
                self.at += cr + 2;
                Ok(&rest[..cr])
            }
            None => Err(Stop::More { want: 0 }),
        }
    }

    fn data(&mut self, n: usize) -> Result<&'a [u8], Stop> {
        let need = n
            .checked_add(2)
            .ok_or_else(|| WireError(b"SERVER_ERROR value too long".to_vec()))?;
        let rest = &self.buf[self.at..];
        if rest.len() < need {
            return Err(Stop::More {
                want: self.at.saturating_add(need),
            });
        }
        check_data_end(&rest[..need])?;
        self.at += need;
        Ok(&rest[..n])
    }
}

/// Which reply a request gets; see [`ReplyParser`] for what each parses into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `mg <key> f v [c]` / `get[s] <key>`: [`Reply::Value`].
    Get,
    /// [`req_get_many`]: [`Reply::Items`].
    GetMany,
    /// A store: [`Reply::Bool`] (stored or not).
    Store,
    /// `md` / `delete`: [`Reply::Bool`] (it existed).
    Delete,
    /// `mg <key> T<ttl>` / `touch`: [`Reply::Bool`] (it existed).
    Touch,
    /// `flush_all` and the like: [`Reply::Bool`], `OK` only.
    Ok,
    /// That many stores, not quiet: [`Reply::Failed`] (a `SERVER_ERROR` fails its store).
    SetMany(usize),
    /// That many append / add / touch triples: [`Reply::Failed`], the triples neither store
    /// of which took.
    AddTokenMany(usize),
    /// `md <key> q` ... `mn` / that many `delete`s: [`Reply::Count`] of keys that existed.
    DeleteMany(usize),
    /// `ma` / `incr` / `decr`: [`Reply::Number`], None when not found (or, meta, not
    /// created).
    Arith,
    /// A lease get, meta only: [`Reply::Lease`].
    Lease,
    /// `mg <key>` / `get <key>`: [`Reply::Bool`] (it is there).
    Exists,
    /// A lease get and an exists pipelined after it: [`Reply::LeaseExists`].
    LeaseExists,
    /// `mn`: [`Reply::Bool`], whether the server speaks meta (any line is an answer).
    Probe,
    /// `version`: [`Reply::Text`].
    Version,
    /// `stats`: [`Reply::Stats`].
    Stats,
    /// Any one line: [`Reply::Line`].
    Line,
}

/// A fetched item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Where the data lies in the reply's bytes.
    pub data: Span,
    pub flags: u32,
    pub cas: u64,
}

/// A meta lease get's answer, with its win (`W`), stale (`X`) and taken (`Z`) flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    pub data: Vec<u8>,
    pub flags: u32,
    pub cas: u64,
    pub win: bool,
    pub stale: bool,
    pub taken: bool,
    /// A value, not a vivified stub: an empty item with flags 0 that someone holds (marked
    /// stale or not, still no one's value).
    pub hit: bool,
}

/// A parsed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Value(Option<Item>),
    /// The hits, in the order they came: where their key and data lie in the reply's bytes
    /// (see [`Span::of`]), and their flags. Not copied: a fetch of many keys may be large.
    Items(Vec<(Span, Span, u32)>),
    Bool(bool),
    /// The indexes of the requests that failed.
    Failed(Vec<usize>),
    Count(usize),
    Number(Option<u64>),
    Lease(Lease),
    LeaseExists(Lease, bool),
    Text(String),
    Stats(Vec<(String, String)>),
    Line(Vec<u8>),
}

/// Where some bytes lie in the bytes of a reply, counted from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// Where `part` (a slice of `whole`) lies in `whole`.
    fn within(whole: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - whole.as_ptr() as usize;
        debug_assert!(
            start + part.len() <= whole.len(),
            "not a slice of the reply"
        );
        Span {
            start,
            end: start + part.len(),
        }
    }

    /// These bytes of `reply` (all the bytes the reply was parsed from, or more).
    pub fn of(self, reply: &[u8]) -> &[u8] {
        &reply[self.start..self.end]
    }
}

fn bad(line: &[u8]) -> Stop {
    Stop::Bad(WireError::of(line))
}

fn classify(line: &[u8]) -> Result<Line<'_>, Stop> {
    parse_line(line).map_err(|_| bad(line))
}

/// The token of `letter` among a meta line's flags (after the status and, for `VA`, the size).
fn meta_flags(line: &[u8], skip: usize) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ')
        .skip(skip)
        .filter(|t| !t.is_empty())
}

/// The `f`, `c`, `W`, `X` and `Z` flags of a `VA` line.
fn va_item(line: &[u8]) -> Result<(u32, u64, [bool; 3]), Stop> {
    let (mut flags, mut cas, mut wxz) = (0, 0, [false; 3]);
    for t in meta_flags(line, 2) {
        match t[0] {
            b'f' => flags = flags_of(&t[1..], line)?,
            b'c' => cas = strtoull(&t[1..]).ok_or_else(|| bad(line))?,
            b'W' => wxz[0] = true,
            b'X' => wxz[1] = true,
            b'Z' => wxz[2] = true,
            _ => {}
        }
    }
    Ok((flags, cas, wxz))
}

fn answer(line: &[u8], table: &[(&[u8], bool)]) -> Option<bool> {
    table.iter().find(|(l, _)| *l == line).map(|&(_, v)| v)
}

const STORED: &[(&[u8], bool)] = &[
    (b"HD", true),
    (b"STORED", true),
    (b"NS", false),
    (b"NOT_STORED", false),
    (b"EX", false),
    (b"EXISTS", false),
    (b"NF", false),
    (b"NOT_FOUND", false),
];
const DELETED: &[(&[u8], bool)] = &[
    (b"HD", true),
    (b"DELETED", true),
    (b"NF", false),
    (b"NOT_FOUND", false),
];
const TOUCHED: &[(&[u8], bool)] = &[
    (b"HD", true),
    (b"TOUCHED", true),
    (b"EN", false),
    (b"NOT_FOUND", false),
];
const OK: &[(&[u8], bool)] = &[(b"OK", true)];

/// One of many stores: a `SERVER_ERROR` (it carries no key) fails this store only.
fn store_of_many(line: &[u8]) -> Result<bool, Stop> {
    match answer(line, STORED) {
        Some(ok) => Ok(ok),
        None if line.starts_with(b"SERVER_ERROR") => Ok(false),
        None => Err(bad(line)),
    }
}

fn one_line(c: &mut Cursor<'_>, table: &[(&[u8], bool)]) -> Result<bool, Stop> {
    let line = c.line()?;
    answer(line, table).ok_or_else(|| bad(line))
}

fn get_reply(c: &mut Cursor<'_>, meta: bool) -> Result<Option<Item>, Stop> {
    let line = c.line()?;
    match (classify(line)?, meta) {
        (Line::Va { len }, true) => {
            let (flags, cas, _) = va_item(line)?;
            let data = Span::within(c.buf, c.data(len)?);
            Ok(Some(Item { data, flags, cas }))
        }
        (Line::Other(b"EN"), true) | (Line::End, false) => Ok(None),
        (
            Line::Value {
                flags, cas, len, ..
            },
            false,
        ) => {
            let flags = flags_of(flags, line)?;
            let cas = match cas {
                Some(t) => strtoull(t).ok_or_else(|| bad(line))?,
                None => 0,
            };
            let data = Span::within(c.buf, c.data(len)?);
            end_line(c)?;
            Ok(Some(Item { data, flags, cas }))
        }
        _ => Err(bad(line)),
    }
}

fn end_line(c: &mut Cursor<'_>) -> Result<(), Stop> {
    let end = c.line()?;
    if end == b"END" {
        Ok(())
    } else {
        Err(bad(end))
    }
}

fn lease_reply(c: &mut Cursor<'_>) -> Result<Lease, Stop> {
    let line = c.line()?;
    match classify(line)? {
        Line::Other(b"EN") => Ok(Lease::default()),
        Line::Va { len } => {
            let (flags, cas, [win, stale, taken]) = va_item(line)?;
            let data = c.data(len)?.to_vec();
            let stub = data.is_empty() && flags == 0 && (win || taken);
            Ok(Lease {
                data,
                flags,
                cas,
                win,
                stale,
                taken,
                hit: !stub,
            })
        }
        _ => Err(bad(line)),
    }
}

fn exists_reply(c: &mut Cursor<'_>, meta: bool) -> Result<bool, Stop> {
    let line = c.line()?;
    match (classify(line)?, meta) {
        (Line::Other(b"HD"), true) => Ok(true),
        (Line::Other(b"EN"), true) | (Line::End, false) => Ok(false),
        (Line::Value { len, .. }, false) => {
            c.data(len)?;
            end_line(c)?;
            Ok(true)
        }
        _ => Err(bad(line)),
    }
}

fn number(tok: &[u8], line: &[u8]) -> Result<u64, Stop> {
    strtoull(tok.trim_ascii()).ok_or_else(|| bad(line))
}

fn arith_reply(c: &mut Cursor<'_>, meta: bool) -> Result<Option<u64>, Stop> {
    let line = c.line()?;
    if meta {
        return match classify(line)? {
            Line::Va { len } => {
                let data = c.data(len)?;
                number(data, line).map(Some)
            }
            Line::Other(b"NF" | b"NS") => Ok(None),
            _ => Err(bad(line)),
        };
    }
    match line {
        b"NOT_FOUND" => Ok(None),
        [d, ..] if d.is_ascii_digit() => number(line, line).map(Some),
        _ => Err(bad(line)),
    }
}

/// Parses one reply of a [`Kind`] from the bytes received so far, as far as they go: a
/// multi-part reply (a fetch of many keys, many stores, stats) keeps the parts it has read, so
/// each call reads only what arrived since, and a part is read whole or not at all.
#[derive(Clone, Debug)]
pub struct ReplyParser {
    kind: Kind,
    meta: bool,
    /// Where the next part starts.
    at: usize,
    /// Parts read (items, lines or triples).
    parts: usize,
    acc: Reply,
    done: bool,
}

impl ReplyParser {
    pub fn new(kind: Kind, meta: bool) -> ReplyParser {
        let acc = match kind {
            Kind::GetMany => Reply::Items(Vec::new()),
            Kind::SetMany(_) | Kind::AddTokenMany(_) => Reply::Failed(Vec::new()),
            Kind::DeleteMany(_) => Reply::Count(0),
            Kind::Stats => Reply::Stats(Vec::new()),
            _ => Reply::Bool(false),
        };
        ReplyParser {
            kind,
            meta,
            at: 0,
            parts: 0,
            acc,
            done: false,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Reads on in `buf`, all the bytes received since the reply began (those already read
    /// included). `Ok(())`: the reply is whole; [`ReplyParser::consumed`] says where it ended.
    pub fn advance(&mut self, buf: &[u8]) -> Result<(), Stop> {
        while !self.done {
            let mut c = Cursor { buf, at: self.at };
            self.part(&mut c)?;
            self.at = c.at;
        }
        Ok(())
    }

    /// The bytes the reply took, once whole.
    pub fn consumed(&self) -> usize {
        self.at
    }

    /// The reply, once whole (then the parser is spent).
    pub fn take(&mut self) -> Reply {
        std::mem::replace(&mut self.acc, Reply::Bool(false))
    }

    /// Reads one part, and changes nothing unless it is whole.
    fn part(&mut self, c: &mut Cursor<'_>) -> Result<(), Stop> {
        let meta = self.meta;
        let whole = |r: Reply, p: &mut ReplyParser| {
            p.acc = r;
            p.done = true;
        };
        match self.kind {
            Kind::Get => whole(Reply::Value(get_reply(c, meta)?), self),
            Kind::Store => whole(Reply::Bool(one_line(c, STORED)?), self),
            Kind::Delete => whole(Reply::Bool(one_line(c, DELETED)?), self),
            Kind::Touch => whole(Reply::Bool(one_line(c, TOUCHED)?), self),
            Kind::Ok => whole(Reply::Bool(one_line(c, OK)?), self),
            Kind::Arith => whole(Reply::Number(arith_reply(c, meta)?), self),
            Kind::Lease => whole(Reply::Lease(lease_reply(c)?), self),
            Kind::Exists => whole(Reply::Bool(exists_reply(c, meta)?), self),
            Kind::LeaseExists => {
                let lease = lease_reply(c)?;
                let there = exists_reply(c, meta)?;
                whole(Reply::LeaseExists(lease, there), self)
            }
            Kind::Probe => whole(Reply::Bool(c.line()? == b"MN"), self),
            Kind::Line => whole(Reply::Line(c.line()?.to_vec()), self),
            Kind::Version => {
                let line = c.line()?;
                let v = line.strip_prefix(b"VERSION ").ok_or_else(|| bad(line))?;
                whole(Reply::Text(String::from_utf8_lossy(v).into_owned()), self)
            }
            Kind::GetMany => {
                let line = c.line()?;
                let item = match get_many_line(line, meta)? {
                    ManyLine::Item { key, flags, len } => Some((key, flags, c.data(len)?)),
                    ManyLine::Miss => None,
                    ManyLine::End => {
                        self.done = true;
                        None
                    }
                };
                if let (Some((key, flags, data)), Reply::Items(items)) = (item, &mut self.acc) {
                    items.push((Span::within(c.buf, key), Span::within(c.buf, data), flags));
                }
            }
            Kind::Stats => {
                let line = c.line()?;
                if line == b"END" {
                    self.done = true;
                    return Ok(());
                }
                let stat = line
                    .strip_prefix(b"STAT ")
                    .and_then(|rest| {
                        let sp = rest.iter().position(|&b| b == b' ')?;
                        Some((&rest[..sp], &rest[sp + 1..]))
                    })
                    .ok_or_else(|| bad(line))?;
                if let Reply::Stats(stats) = &mut self.acc {
                    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    stats.push((text(stat.0), text(stat.1)));
                }
            }
            Kind::SetMany(n) | Kind::AddTokenMany(n) if self.parts == n => self.done = true,
            Kind::SetMany(_) => {
                let ok = store_of_many(c.line()?)?;
                self.failed_unless(ok);
            }
            Kind::AddTokenMany(_) => {
                let appended = store_of_many(c.line()?)?;
                let added = store_of_many(c.line()?)?;
                let line = c.line()?;
                if answer(line, TOUCHED).is_none() && !line.starts_with(b"SERVER_ERROR") {
                    return Err(bad(line));
                }
                self.failed_unless(appended || added);
            }
            Kind::DeleteMany(n) if meta => {
                let line = c.line()?;
                match line {
                    b"MN" => {
                        // the parts read were the misses
                        self.acc = Reply::Count(n.saturating_sub(self.parts));
                        self.done = true;
                    }
                    b"NF" => self.parts += 1,
                    _ => return Err(bad(line)),
                }
            }
            Kind::DeleteMany(n) => {
                if self.parts == n {
                    self.done = true;
                    return Ok(());
                }
                let line = c.line()?;
                let found = match line {
                    b"DELETED" => true,
                    b"NOT_FOUND" => false,
                    _ => return Err(bad(line)),
                };
                self.parts += 1;
                if let (true, Reply::Count(k)) = (found, &mut self.acc) {
                    *k += 1;
                }
            }
        }
        Ok(())
    }

    fn failed_unless(&mut self, ok: bool) {
        if let (false, Reply::Failed(failed)) = (ok, &mut self.acc) {
            failed.push(self.parts);
        }
        self.parts += 1;
    }
}

/// The reply to `track listen`: the listener's id, or None if the server has no tracking
/// (memcached and `memfleet route` answer `ERROR`). A `SERVER_ERROR` (too many listeners) is an
/// error: it may pass.
pub fn tracking_line(line: &[u8]) -> Result<Option<u64>, WireError> {
    if let Some(id) = line.strip_prefix(b"TRACKING ") {
        return strtoull(id).map(Some).ok_or_else(|| WireError::of(line));
    }
    if line.starts_with(b"ERROR") || line.starts_with(b"CLIENT_ERROR") {
        return Ok(None);
    }
    Err(WireError::of(line))
}

/// A tracking listener's notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// `IV <key>`, or `IV <base64> b` decoded.
    Key(Vec<u8>),
    /// `IV_ALL`: everything from this server.
    All,
}

/// A notice line; None if it is not one.
pub fn notice_line(line: &[u8]) -> Option<Notice> {
    if line == b"IV_ALL" {
        return Some(Notice::All);
    }
    let mut parts = line.strip_prefix(b"IV ")?.split(|&b| b == b' ');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(key), None, None) if !key.is_empty() => Some(Notice::Key(key.to_vec())),
        (Some(b64), Some(b"b"), None) => {
            // strict: memcached's decoder skips bytes outside the alphabet
            let alphabet = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=');
            if b64.is_empty() || b64.len() % 4 != 0 || !b64.iter().all(alphabet) {
                return None;
            }
            let mut out = vec![0; b64.len() / 4 * 3];
            let n = proto::base64_decode(b64, &mut out)?;
            out.truncate(n);
            Some(Notice::Key(out))
        }
        _ => None,
    }
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
        for keyless in [&b"VA 1 f0"[..], b"VA 1", b"VA 1 f0 k"] {
            assert!(get_many_line(keyless, true).is_err());
        }
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

    /// Whether a parser of `kind` waits for more of `buf` (a bad reply waits for nothing).
    fn needs_more(kind: Kind, meta: bool, buf: &[u8]) -> bool {
        matches!(
            ReplyParser::new(kind, meta).advance(buf),
            Err(Stop::More { .. })
        )
    }

    #[test]
    fn replies_are_complete_once_every_promised_byte_is_there() {
        let meta_many = b"VA 2 f0 ka\r\nhi\r\nEN\r\nVA 1 kb\r\nx\r\nMN\r\n";
        assert!(!needs_more(Kind::GetMany, true, meta_many));
        for cut in 0..meta_many.len() {
            assert!(
                needs_more(Kind::GetMany, true, &meta_many[..cut]),
                "cut at {cut}"
            );
        }
        let text_one = b"VALUE k 0 2\r\nhi\r\nEND\r\n";
        assert!(!needs_more(Kind::Get, false, text_one));
        for cut in 0..text_one.len() {
            assert!(
                needs_more(Kind::Get, false, &text_one[..cut]),
                "cut at {cut}"
            );
        }
        assert!(!needs_more(Kind::Get, true, b"VA 2 f1\r\nhi\r\n"));
        assert!(needs_more(Kind::Get, true, b"VA 2 f1\r\nhi\r"));
        assert!(!needs_more(Kind::Get, true, b"EN\r\n"));
        // garbage, error lines and endless lines need no more bytes: the parser reports them
        assert!(!needs_more(Kind::GetMany, true, b"SERVER_ERROR x\r\n"));
        assert!(!needs_more(Kind::GetMany, true, b"VA x\r\n"));
        assert!(!needs_more(Kind::GetMany, true, &vec![b'x'; MAX_LINE + 2]));
        assert!(needs_more(Kind::Store, true, b"HD"));
        assert!(!needs_more(Kind::Store, true, b"HD\r\n"));
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

    /// The whole reply `bytes` parsed at once and one byte at a time: both the same.
    fn parse(kind: Kind, meta: bool, bytes: &[u8]) -> Result<(Reply, usize), Stop> {
        let mut p = ReplyParser::new(kind, meta);
        let once = p.advance(bytes).map(|()| (p.take(), p.consumed()));
        let mut p = ReplyParser::new(kind, meta);
        let mut by_byte = Err(Stop::More { want: 0 });
        for end in 0..=bytes.len() {
            match p.advance(&bytes[..end]) {
                Ok(()) => {
                    by_byte = Ok((p.take(), p.consumed()));
                    break;
                }
                Err(Stop::More { want }) => {
                    assert!(want == 0 || want > end, "{want} {end}");
                    by_byte = Err(Stop::More { want });
                }
                Err(e) => {
                    by_byte = Err(e);
                    break;
                }
            }
        }
        assert_eq!(once, by_byte, "{kind:?} {}", String::from_utf8_lossy(bytes));
        once
    }

    fn ok(kind: Kind, meta: bool, bytes: &[u8]) -> Reply {
        let (r, used) = parse(kind, meta, bytes).unwrap();
        assert_eq!(used, bytes.len());
        r
    }

    fn is_bad(kind: Kind, meta: bool, bytes: &[u8]) -> bool {
        matches!(parse(kind, meta, bytes), Err(Stop::Bad(_)))
    }

    /// A hit whose data is `len` bytes at `start` of the reply.
    fn item(start: usize, len: usize, flags: u32, cas: u64) -> Reply {
        Reply::Value(Some(Item {
            data: Span {
                start,
                end: start + len,
            },
            flags,
            cas,
        }))
    }

    #[test]
    fn single_gets() {
        assert_eq!(
            ok(Kind::Get, true, b"VA 2 f3 c9\r\nhi\r\n"),
            item(12, 2, 3, 9)
        );
        assert_eq!(ok(Kind::Get, true, b"EN\r\n"), Reply::Value(None));
        assert_eq!(
            ok(Kind::Get, false, b"VALUE k 5 2 77\r\nhi\r\nEND\r\n"),
            item(16, 2, 5, 77)
        );
        assert_eq!(ok(Kind::Get, false, b"END\r\n"), Reply::Value(None));
        assert!(is_bad(Kind::Get, true, b"END\r\n"));
        assert!(is_bad(Kind::Get, false, b"VALUE k 5 2\r\nhi\r\nEN\r\n"));
        assert!(is_bad(Kind::Get, false, b"VALUE k 5 2 zz\r\nhi\r\nEND\r\n"));
        assert!(is_bad(Kind::Get, true, b"VA 2 fx\r\nhi\r\n"));
        assert!(is_bad(Kind::Get, true, b"VA 2\r\nhiX\r\n"));
        assert_eq!(
            parse(Kind::Get, true, b"VA 2 f0\r\nh"),
            Err(Stop::More { want: 13 })
        );
    }

    fn items(reply: Reply, bytes: &[u8]) -> Vec<(Vec<u8>, Vec<u8>, u32)> {
        let Reply::Items(items) = reply else {
            panic!("{reply:?}")
        };
        items
            .into_iter()
            .map(|(k, d, f)| (k.of(bytes).to_vec(), d.of(bytes).to_vec(), f))
            .collect()
    }

    #[test]
    fn many_gets_keep_what_they_read() {
        let reply = b"VA 2 f1 ka\r\nhi\r\nEN\r\nVA 0 kb\r\n\r\nMN\r\n";
        assert_eq!(
            items(ok(Kind::GetMany, true, reply), reply),
            vec![
                (b"a".to_vec(), b"hi".to_vec(), 1),
                (b"b".to_vec(), b"".to_vec(), 0)
            ]
        );
        let reply = b"VALUE a 4 1\r\nx\r\nEND\r\n";
        assert_eq!(
            items(ok(Kind::GetMany, false, reply), reply),
            vec![(b"a".to_vec(), b"x".to_vec(), 4)]
        );
        assert!(is_bad(Kind::GetMany, true, b"VA 2 ka\r\nhi\r\nEND\r\n"));
        // a hit whose key did not come back cannot be matched to a request
        assert!(is_bad(Kind::GetMany, true, b"VA 1 f0\r\nx\r\nMN\r\n"));
        // bytes after the reply are the next one's
        assert_eq!(parse(Kind::GetMany, true, b"MN\r\nHD\r\n").unwrap().1, 4);
    }

    #[test]
    fn one_line_answers() {
        assert_eq!(ok(Kind::Store, true, b"HD\r\n"), Reply::Bool(true));
        assert_eq!(
            ok(Kind::Store, false, b"NOT_STORED\r\n"),
            Reply::Bool(false)
        );
        assert!(is_bad(Kind::Store, true, b"SERVER_ERROR oom\r\n"));
        assert_eq!(ok(Kind::Delete, false, b"DELETED\r\n"), Reply::Bool(true));
        assert_eq!(ok(Kind::Delete, true, b"NF\r\n"), Reply::Bool(false));
        assert!(is_bad(Kind::Delete, true, b"EN\r\n"));
        assert_eq!(ok(Kind::Touch, true, b"EN\r\n"), Reply::Bool(false));
        assert_eq!(ok(Kind::Touch, false, b"TOUCHED\r\n"), Reply::Bool(true));
        assert_eq!(ok(Kind::Ok, false, b"OK\r\n"), Reply::Bool(true));
        assert!(is_bad(Kind::Ok, false, b"ERROR\r\n"));
        assert_eq!(ok(Kind::Probe, true, b"MN\r\n"), Reply::Bool(true));
        assert_eq!(ok(Kind::Probe, true, b"ERROR\r\n"), Reply::Bool(false));
        assert_eq!(
            ok(Kind::Line, true, b"NOT_FOUND\r\n"),
            Reply::Line(b"NOT_FOUND".to_vec())
        );
        assert_eq!(
            ok(Kind::Version, true, b"VERSION 1.6.18\r\n"),
            Reply::Text("1.6.18".to_owned())
        );
        assert!(is_bad(Kind::Version, true, b"ERROR\r\n"));
        assert_eq!(ok(Kind::Store, false, b"EXISTS\r\n"), Reply::Bool(false));
        assert!(is_bad(Kind::Store, false, b"SERVER_ERROR x\r\n"));
    }

    #[test]
    fn many_stores_and_deletes() {
        assert_eq!(
            ok(Kind::SetMany(3), true, b"HD\r\nSERVER_ERROR oom\r\nNS\r\n"),
            Reply::Failed(vec![1, 2])
        );
        assert_eq!(ok(Kind::SetMany(0), true, b""), Reply::Failed(vec![]));
        assert!(is_bad(Kind::SetMany(2), false, b"STORED\r\nERROR\r\n"));
        assert_eq!(
            ok(
                Kind::AddTokenMany(2),
                true,
                b"NS\r\nHD\r\nHD\r\nNS\r\nNS\r\nEN\r\n"
            ),
            Reply::Failed(vec![1])
        );
        assert!(is_bad(Kind::AddTokenMany(1), true, b"HD\r\nNS\r\nVA 1\r\n"));
        assert_eq!(
            ok(Kind::DeleteMany(3), true, b"NF\r\nMN\r\n"),
            Reply::Count(2)
        );
        assert!(is_bad(Kind::DeleteMany(3), true, b"NF\r\nHD\r\n"));
        assert_eq!(
            ok(
                Kind::DeleteMany(3),
                false,
                b"DELETED\r\nNOT_FOUND\r\nDELETED\r\n"
            ),
            Reply::Count(2)
        );
        assert_eq!(ok(Kind::DeleteMany(0), false, b""), Reply::Count(0));
        assert!(is_bad(Kind::DeleteMany(1), false, b"NF\r\n"));
    }

    #[test]
    fn arithmetic() {
        assert_eq!(
            ok(Kind::Arith, true, b"VA 2\r\n42\r\n"),
            Reply::Number(Some(42))
        );
        assert_eq!(ok(Kind::Arith, true, b"NF\r\n"), Reply::Number(None));
        assert_eq!(ok(Kind::Arith, true, b"NS\r\n"), Reply::Number(None));
        assert!(is_bad(Kind::Arith, true, b"VA 2\r\nzz\r\n"));
        assert_eq!(ok(Kind::Arith, false, b"7 \r\n"), Reply::Number(Some(7)));
        assert_eq!(
            ok(Kind::Arith, false, b"18446744073709551615\r\n"),
            Reply::Number(Some(u64::MAX))
        );
        assert_eq!(
            ok(Kind::Arith, false, b"NOT_FOUND\r\n"),
            Reply::Number(None)
        );
        assert!(is_bad(Kind::Arith, false, b"CLIENT_ERROR bad\r\n"));
        assert!(is_bad(Kind::Arith, false, b"1x\r\n"));
    }

    #[test]
    fn leases_and_markers() {
        let Reply::Lease(l) = ok(Kind::Lease, true, b"VA 0 f0 c5 W\r\n\r\n") else {
            panic!()
        };
        assert!(l.win && !l.hit && l.cas == 5);
        let Reply::Lease(l) = ok(Kind::Lease, true, b"VA 1 f2 c5 W X\r\nv\r\n") else {
            panic!()
        };
        assert!(l.win && l.stale && l.hit && l.flags == 2 && l.data == b"v");
        assert_eq!(
            ok(Kind::Lease, true, b"EN\r\n"),
            Reply::Lease(Lease::default())
        );
        assert!(is_bad(Kind::Lease, true, b"VALUE k 0 1\r\nv\r\nEND\r\n"));
        assert_eq!(ok(Kind::Exists, true, b"HD\r\n"), Reply::Bool(true));
        assert_eq!(ok(Kind::Exists, true, b"EN\r\n"), Reply::Bool(false));
        assert_eq!(
            ok(Kind::Exists, false, b"VALUE m 0 1\r\nx\r\nEND\r\n"),
            Reply::Bool(true)
        );
        assert_eq!(ok(Kind::Exists, false, b"END\r\n"), Reply::Bool(false));
        assert!(is_bad(Kind::Exists, true, b"VA 1\r\nx\r\n"));
        assert_eq!(
            ok(Kind::LeaseExists, true, b"EN\r\nHD\r\n"),
            Reply::LeaseExists(Lease::default(), true)
        );
    }

    #[test]
    fn stats() {
        assert_eq!(
            ok(
                Kind::Stats,
                true,
                b"STAT pid 12\r\nSTAT version 1.6 x\r\nEND\r\n"
            ),
            Reply::Stats(vec![
                ("pid".to_owned(), "12".to_owned()),
                ("version".to_owned(), "1.6 x".to_owned())
            ])
        );
        assert!(is_bad(Kind::Stats, true, b"STAT pid\r\nEND\r\n"));
        assert!(is_bad(Kind::Stats, true, b"SERVER_ERROR x\r\n"));
    }

    use proptest::strategy::Strategy;

    const KINDS: [Kind; 17] = [
        Kind::Get,
        Kind::GetMany,
        Kind::Store,
        Kind::Delete,
        Kind::Touch,
        Kind::Ok,
        Kind::SetMany(3),
        Kind::AddTokenMany(2),
        Kind::DeleteMany(3),
        Kind::Arith,
        Kind::Lease,
        Kind::Exists,
        Kind::LeaseExists,
        Kind::Probe,
        Kind::Version,
        Kind::Stats,
        Kind::Line,
    ];

    proptest::proptest! {
        /// The first CRLF at or after `from`, as a plain search finds it.
        #[test]
        fn line_end_finds_the_first_crlf(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(b'\r'),
                proptest::strategy::Just(b'\n'),
                proptest::strategy::Just(b'x'),
            ], 0..MAX_LINE + 40),
            from in 0usize..MAX_LINE + 40,
        ) {
            let from = from.min(bytes.len());
            let first = bytes[from..].windows(2).position(|w| w == b"\r\n").map(|i| from + i);
            let want = match first {
                Some(cr) if cr <= MAX_LINE => Some(Some(cr)),
                None if bytes.len() <= MAX_LINE + 1 => Some(None),
                _ => None,
            };
            proptest::prop_assert_eq!(line_end(&bytes, from).ok(), want);
        }

        /// Any bytes, in any chunks: the parser neither panics nor reads past what it has, what
        /// it returns lies within the bytes the reply took, and chunking does not change the
        /// outcome.
        #[test]
        fn any_bytes_in_any_chunks(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(b"\r\n".to_vec()),
                proptest::strategy::Just(b"VA 3 f1 kx\r\n".to_vec()),
                proptest::strategy::Just(b"VA 1 f0\r\nx\r\n".to_vec()),
                proptest::strategy::Just(b"VALUE x 1 3\r\n".to_vec()),
                proptest::strategy::Just(b"END\r\n".to_vec()),
                proptest::strategy::Just(b"MN\r\n".to_vec()),
                proptest::strategy::Just(b"EN\r\n".to_vec()),
                proptest::strategy::Just(b"HD\r\n".to_vec()),
                proptest::strategy::Just(b"STAT a b\r\n".to_vec()),
                proptest::collection::vec(proptest::num::u8::ANY, 0..8),
            ], 0..12).prop_map(|parts: Vec<Vec<u8>>| parts.concat()),
            kind in 0..KINDS.len(),
            meta in proptest::bool::ANY,
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let kind = KINDS[kind];
            let once = {
                let mut p = ReplyParser::new(kind, meta);
                p.advance(&bytes).map(|()| (p.take(), p.consumed()))
            };
            let mut p = ReplyParser::new(kind, meta);
            let mut end = 0;
            let mut chunked = p.advance(&bytes[..0]).map(|()| (p.take(), p.consumed()));
            for cut in cuts.iter().copied().chain([bytes.len()]) {
                if !matches!(chunked, Err(Stop::More { .. })) {
                    break;
                }
                end = (end + cut).min(bytes.len());
                chunked = p.advance(&bytes[..end]).map(|()| (p.take(), p.consumed()));
            }
            if let Ok((reply, used)) = &once {
                proptest::prop_assert!(*used <= bytes.len());
                let spans: Vec<Span> = match reply {
                    Reply::Items(items) => items.iter().flat_map(|&(k, d, _)| [k, d]).collect(),
                    Reply::Value(Some(item)) => vec![item.data],
                    _ => Vec::new(),
                };
                for span in spans {
                    proptest::prop_assert!(span.start <= span.end && span.end <= *used, "{:?}", span);
                }
            }
            proptest::prop_assert_eq!(once, chunked);
        }
    }

    #[test]
    fn tracking_replies_and_notices() {
        assert_eq!(tracking_line(b"TRACKING 42"), Ok(Some(42)));
        assert_eq!(tracking_line(b"ERROR"), Ok(None));
        assert_eq!(tracking_line(b"CLIENT_ERROR bad command"), Ok(None));
        assert!(tracking_line(b"SERVER_ERROR too many listeners").is_err());
        assert!(tracking_line(b"TRACKING x").is_err());
        assert_eq!(notice_line(b"IV_ALL"), Some(Notice::All));
        assert_eq!(notice_line(b"IV k1"), Some(Notice::Key(b"k1".to_vec())));
        assert_eq!(
            notice_line(b"IV a2V5 b"),
            Some(Notice::Key(b"key".to_vec()))
        );
        assert_eq!(notice_line(b"IV a2U= b"), Some(Notice::Key(b"ke".to_vec())));
        for bad in [
            &b"IV"[..],
            b"IV ",
            b"IV a b c",
            b"IV a2V* b",
            b"IV a2V b",
            b"IV a2V5 x",
            b"TRACKING 1",
            b"",
        ] {
            assert_eq!(notice_line(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
