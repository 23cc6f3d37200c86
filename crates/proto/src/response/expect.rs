//! What a request may be answered with. A reply of any other shape means the backend is
//! broken, or out of step (one extra reply shifts every later one onto the wrong request),
//! so [`super::Framer`] refuses it instead of handing it to a client as its answer.

use crate::Request;

/// The replies a request may get, besides an error line (`ERROR`, `CLIENT_ERROR ...`,
/// `SERVER_ERROR ...`), which may answer anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// get, gets, gat, gats: `VALUE` items of the keys asked, in the order asked, then `END`.
    Get,
    /// mcrouter's lease-get: as a get, or a lease token (`LVALUE`), then `END`.
    LeaseGet,
    /// set, add, replace, append, prepend, cas: `STORED NOT_STORED EXISTS NOT_FOUND`.
    Store,
    /// mcrouter's lease-set: as a storage command, or `STALE_STORED`.
    LeaseSet,
    /// delete: `DELETED NOT_FOUND`.
    Delete,
    /// incr, decr: the new value (digits) or `NOT_FOUND`.
    Arith,
    /// touch: `TOUCHED NOT_FOUND`.
    Touch,
    /// flush_all: `OK`.
    Ok,
    /// A meta command (`mg ms md ma me mn`): its two-letter codes. `quiet`: sent with `q`
    /// and followed by `mn`, so `MN` may come too (and ends the answer).
    Meta {
        /// The command's name.
        cmd: [u8; 2],
        /// Followed by `mn`.
        quiet: bool,
    },
    /// Any reply of the protocol: RESP replies (their framer checks only syntax), tests.
    Any,
}

/// Leading words of a reply line: exact (the whole line) or followed by more.
type Words = &'static [(&'static [u8], bool)];

const ERRORS: Words = &[
    (b"ERROR", false),
    (b"CLIENT_ERROR", false),
    (b"SERVER_ERROR", false),
];
const GET: Words = &[(b"VALUE ", false), (b"END", true)];
const LEASE_GET: Words = &[(b"VALUE ", false), (b"LVALUE ", false), (b"END", true)];
const STORE: Words = &[
    (b"STORED", true),
    (b"NOT_STORED", true),
    (b"EXISTS", true),
    (b"NOT_FOUND", true),
];
const LEASE_SET: Words = &[
    (b"STORED", true),
    (b"NOT_STORED", true),
    (b"EXISTS", true),
    (b"NOT_FOUND", true),
    (b"STALE_STORED", true),
];
const DELETE: Words = &[(b"DELETED", true), (b"NOT_FOUND", true)];
const TOUCH: Words = &[(b"TOUCHED", true), (b"NOT_FOUND", true)];
const NOT_FOUND: Words = &[(b"NOT_FOUND", true)];
const OK: Words = &[(b"OK", true)];

/// The codes each meta command may answer (memcached's protocol.txt).
fn meta_codes(cmd: [u8; 2]) -> &'static [&'static [u8; 2]] {
    match &cmd {
        b"mg" => &[b"VA", b"HD", b"EN"],
        b"ms" => &[b"HD", b"NS", b"EX", b"NF"],
        b"md" => &[b"HD", b"NF", b"EX"],
        b"ma" => &[b"VA", b"HD", b"NF", b"NS", b"EX"],
        b"me" => &[b"ME", b"EN"],
        b"mn" => &[b"MN"],
        _ => &[],
    }
}

impl Expect {
    /// What a forwarded request may be answered with; `None` for requests a proxy answers
    /// itself (version, stats, ...).
    pub fn of(req: &Request<'_>) -> Option<Expect> {
        let meta = |cmd: &[u8; 2], quiet| Expect::Meta { cmd: *cmd, quiet };
        Some(match req {
            Request::Get { .. } | Request::Gat { .. } => Expect::Get,
            Request::LeaseGet { .. } => Expect::LeaseGet,
            Request::Store { .. } => Expect::Store,
            Request::LeaseSet { .. } => Expect::LeaseSet,
            Request::Delete { .. } => Expect::Delete,
            Request::Arith { .. } => Expect::Arith,
            Request::Touch { .. } => Expect::Touch,
            Request::FlushAll { .. } => Expect::Ok,
            Request::MetaGet { flags, .. } => meta(b"mg", flags.noreply()),
            Request::MetaSet { flags, .. } => meta(b"ms", flags.noreply()),
            Request::MetaDelete { flags, .. } => meta(b"md", flags.noreply()),
            Request::MetaArithmetic { flags, .. } => meta(b"ma", flags.noreply()),
            Request::MetaDebug { .. } => meta(b"me", false),
            _ => return None,
        })
    }

    /// Whether `VALUE` items may come.
    pub(super) fn items(self) -> bool {
        matches!(self, Expect::Get | Expect::LeaseGet | Expect::Any)
    }

    /// Whether a lease token (`LVALUE`) may come.
    pub(super) fn lease(self) -> bool {
        matches!(self, Expect::LeaseGet | Expect::Any)
    }

    /// Whether `VA <size>` and its data may come.
    pub(super) fn va(self) -> bool {
        match self {
            Expect::Meta { cmd, .. } => meta_codes(cmd).contains(&b"VA"),
            Expect::Any => true,
            _ => false,
        }
    }

    /// Whether `line` (CRLF removed; not an item, `VA` or error line) may be the reply.
    #[inline]
    pub(super) fn accepts(self, line: &[u8]) -> bool {
        match self {
            Expect::Arith => {
                line == b"NOT_FOUND"
                    || (!line.is_empty() && line.len() <= 20 && line.iter().all(u8::is_ascii_digit))
            }
            Expect::Meta { cmd, quiet } => {
                let (code, rest) = line.split_at(line.len().min(2));
                (rest.is_empty() || rest[0] == b' ')
                    && code != b"VA"
                    && (meta_codes(cmd).iter().any(|c| c[..] == *code) || (quiet && code == b"MN"))
            }
            Expect::Any => true,
            _ => self.words().iter().any(|&(w, _)| line == w),
        }
    }

    /// Whether `partial`, the start of a reply line whose end has not come yet, can still
    /// become a reply this request may get; `in_get`: items came before it.
    pub(super) fn may_start(self, partial: &[u8], in_get: bool) -> bool {
        let starts = |&(w, exact): &(&[u8], bool)| {
            let n = partial.len().min(w.len());
            partial[..n] == w[..n]
                && (!exact || partial.len() <= w.len() || partial[w.len()..] == *b"\r")
        };
        if ERRORS.iter().any(starts) {
            return true;
        }
        if in_get {
            let words = if self.lease() { LEASE_GET } else { GET };
            return words.iter().any(starts);
        }
        match self {
            Expect::Any => true,
            Expect::Arith if partial.first().is_some_and(u8::is_ascii_digit) => {
                let digits = partial.strip_suffix(b"\r").unwrap_or(partial);
                digits.len() <= 20 && digits.iter().all(u8::is_ascii_digit)
            }
            Expect::Meta { cmd, quiet } => {
                let n = partial.len().min(2);
                let code = |c: &[u8; 2]| {
                    partial[..n] == c[..n]
                        && partial.get(2).is_none_or(|&b| b == b' ' || b == b'\r')
                };
                meta_codes(cmd).iter().any(|c| code(c)) || (quiet && code(b"MN"))
            }
            _ => self.words().iter().any(starts),
        }
    }

    /// The leading words of this request's replies (meta and numbers apart).
    fn words(self) -> Words {
        match self {
            Expect::Get => GET,
            Expect::LeaseGet => LEASE_GET,
            Expect::Store => STORE,
            Expect::LeaseSet => LEASE_SET,
            Expect::Delete => DELETE,
            Expect::Touch => TOUCH,
            Expect::Arith => NOT_FOUND,
            Expect::Ok => OK,
            Expect::Meta { .. } | Expect::Any => &[],
        }
    }
}

/// The keys a get asked for, in the order asked: its items must be of these keys, in this
/// order (misses left out; a key asked twice may come twice). For a meta command, two
/// entries or none: the `O` token and the key (as sent) that its reply may echo ([`echoes_ok`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct AskedKeys<'a> {
    bytes: &'a [u8],
    ends: &'a [u32],
}

impl<'a> AskedKeys<'a> {
    /// No keys: any item is refused.
    pub const NONE: AskedKeys<'static> = AskedKeys {
        bytes: &[],
        ends: &[],
    };

    /// The keys stored one after the other in `bytes`, key `i` ending at `ends[i]`.
    pub fn new(bytes: &'a [u8], ends: &'a [u32]) -> AskedKeys<'a> {
        AskedKeys { bytes, ends }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Key `i`.
    pub fn get(&self, i: usize) -> &'a [u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// The first key from `from` on that is `key`: where an item of `key` belongs.
    pub(super) fn find(&self, key: &[u8], from: usize) -> Option<usize> {
        (from..self.len()).find(|&i| self.get(i) == key)
    }
}

/// Whether a meta reply line (`HD`, `VA <size>`, `EN`, ...; CRLF removed) echoes what its
/// request sent: an `O` or `k` flag in it must carry the request's opaque or key (memcached
/// echoes both, so a reply to another request shows; a flag left out is not checked, for
/// servers that do not echo on a miss). `echo`: see [`AskedKeys`]; empty checks nothing.
pub(super) fn echoes_ok(line: &[u8], echo: AskedKeys<'_>) -> bool {
    // Error lines carry text, not flags; `ME`'s words are its own.
    if echo.len() != 2 || super::is_error_line(line) || line.starts_with(b"ME ") {
        return true;
    }
    let (opaque, key) = (echo.get(0), echo.get(1));
    line.split(|&b| b == b' ')
        .skip(1)
        .all(|t| match t.split_first() {
            Some((b'O', v)) => !opaque.is_empty() && v == opaque,
            Some((b'k', v)) => !key.is_empty() && v == key,
            _ => true,
        })
}

#[cfg(test)]
mod tests;
