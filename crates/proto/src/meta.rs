//! Meta commands (mg ms md ma mn me): flag validation as in memcached's
//! `_meta_flag_preparse` and the per-command checks of proto_text.c.

use crate::num::{strtol_i32, strtoul_u32, strtoull};
use crate::reply as r;
use crate::tokens::{Line, Tokens};
use crate::{err, Limits, Parse, Request, StoreCmd, KEY_MAX_LENGTH};

/// Longest decoded base64 key: 250 encoded bytes hold at most 62 blocks of 3 bytes.
const DECODED_KEY_MAX: usize = 188;
/// memcached's MFLAG_MAX_OPT_LENGTH (a limit on `ntokens`).
const MAX_META_NTOKENS: usize = 20;
/// memcached's MFLAG_MAX_OPAQUE_LENGTH (whole token, including the `O`).
const MAX_OPAQUE_TOKEN: usize = 32;

/// A meta command key: the bytes as sent, or base64-decoded (flag `b`) into an inline buffer.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    raw: &'a [u8],
    buf: [u8; DECODED_KEY_MAX],
    len: u8,
    binary: bool,
}

impl<'a> Key<'a> {
    /// A plain (not base64) key.
    pub fn raw(raw: &'a [u8]) -> Self {
        Key {
            raw,
            buf: [0; DECODED_KEY_MAX],
            len: 0,
            binary: false,
        }
    }

    fn decoded(raw: &'a [u8]) -> Option<Self> {
        let mut k = Key::raw(raw);
        let n = base64_decode(raw, &mut k.buf)?;
        k.len = n as u8;
        k.binary = true;
        Some(k)
    }

    /// The key as stored (decoded when binary).
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        if self.binary {
            &self.buf[..usize::from(self.len)]
        } else {
            self.raw
        }
    }

    /// True when the key came base64-encoded (`b` flag): echo it encoded, mark the item binary.
    #[inline]
    pub fn is_binary(&self) -> bool {
        self.binary
    }

    /// The key token exactly as the client sent it.
    #[inline]
    pub fn wire(&self) -> &'a [u8] {
        self.raw
    }
}

impl PartialEq for Key<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.binary == o.binary && self.as_bytes() == o.as_bytes()
    }
}
impl Eq for Key<'_> {}

impl std::fmt::Debug for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("bytes", &String::from_utf8_lossy(self.as_bytes()))
            .field("binary", &self.binary)
            .finish()
    }
}

/// memcached's base64 decoder (base64.c): bytes outside the alphabet are skipped, `=` counts
/// as a digit, decoding stops after the first padded block, more than two `=` in that block
/// is an error. Returns the decoded length; None where memcached returns 0.
pub fn base64_decode(src: &[u8], out: &mut [u8]) -> Option<usize> {
    #[inline]
    fn val(b: u8) -> Option<u8> {
        match b {
            b'A'..=b'Z' => Some(b - b'A'),
            b'a'..=b'z' => Some(b - b'a' + 26),
            b'0'..=b'9' => Some(b - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            b'=' => Some(0),
            _ => None,
        }
    }
    let count = src.iter().filter(|&&b| val(b).is_some()).count();
    if count == 0 || count % 4 != 0 || count / 4 * 3 > out.len() {
        return None;
    }
    let mut pos = 0;
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &b in src {
        let Some(v) = val(b) else { continue };
        if b == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out[pos] = (block[0] << 2) | (block[1] >> 4);
            out[pos + 1] = (block[1] << 4) | (block[2] >> 2);
            out[pos + 2] = (block[2] << 6) | block[3];
            pos += 3;
            n = 0;
            if pad > 0 {
                match pad {
                    1 => pos -= 1,
                    2 => pos -= 2,
                    _ => return None,
                }
                break;
            }
        }
    }
    Some(pos)
}

/// Validated meta flags. The tokens stay in request order ([`MetaFlags::iter`]) so replies can
/// echo `O`/`k`/... in order; values memcached parses up front are decoded here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    raw: &'a [u8],
    seen: u128,
    /// `T<ttl>` (int32 as memcached parses it).
    pub exptime: Option<i64>,
    /// `N<ttl>`: autovivify on miss with this TTL.
    pub vivify: Option<i64>,
    /// `R<ttl>`: recache threshold.
    pub recache: Option<i64>,
    /// `F<flags>` (0 when absent).
    pub client_flags: u32,
    /// `C<cas>`.
    pub cas: Option<u64>,
    /// `D<delta>` (ma; memcached's default is 1).
    pub delta: Option<u64>,
    /// `J<initial>` (ma; default 0).
    pub initial: Option<u64>,
    /// `M<mode>` byte (validated per command).
    pub mode: Option<u8>,
    /// `E<cas>`: the CAS value to give the item (an extension from memcached after 1.6.18).
    pub new_cas: Option<u64>,
}

impl<'a> MetaFlags<'a> {
    /// Whether flag `f` was given.
    #[inline]
    pub fn has(&self, f: u8) -> bool {
        f < 127 && self.seen & (1u128 << f) != 0
    }

    /// `q`: suppress the nominal reply (EN for mg, HD for ms/md/ma, ...).
    #[inline]
    pub fn noreply(&self) -> bool {
        self.has(b'q')
    }

    /// Flags in request order as (flag byte, token after the flag byte).
    #[inline]
    pub fn iter(&self) -> MetaFlagIter<'a> {
        MetaFlagIter(Tokens::new(self.raw))
    }

    /// The raw flag tokens (space separated).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// The `O` token's value (without the `O`).
    pub fn opaque(&self) -> Option<&'a [u8]> {
        self.iter().find(|&(f, _)| f == b'O').map(|(_, v)| v)
    }
}

/// Iterator over (flag byte, rest of token).
#[derive(Clone, Debug)]
pub struct MetaFlagIter<'a>(Tokens<'a>);

impl<'a> Iterator for MetaFlagIter<'a> {
    type Item = (u8, &'a [u8]);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|t| (t[0], &t[1..]))
    }
}

/// `_meta_flag_preparse`: validate flags, decode the key if `b`.
fn preparse<'a>(raw: &'a [u8], key: &mut Key<'a>) -> Result<MetaFlags<'a>, &'static [u8]> {
    let mut f = MetaFlags {
        raw,
        seen: 0,
        exptime: None,
        vivify: None,
        recache: None,
        client_flags: 0,
        cas: None,
        delta: None,
        initial: None,
        mode: None,
        new_cas: None,
    };
    // memcached remembers the last error message but keeps parsing (except for
    // duplicate/unknown flags, which stop at once); F failures keep the default message.
    let mut has_error = false;
    let mut errstr: &'static [u8] = r::CLIENT_ERROR_BAD_FORMAT;
    for tok in Tokens::new(raw) {
        let o = tok[0];
        if o >= 127 || f.has(o) {
            return Err(r::CLIENT_ERROR_DUPLICATE_FLAG);
        }
        f.seen |= 1u128 << o;
        let arg = &tok[1..];
        let mut fail = |msg: Option<&'static [u8]>| {
            has_error = true;
            if let Some(m) = msg {
                errstr = m;
            }
        };
        match o {
            b'b' => match Key::decoded(key.raw) {
                Some(k) => *key = k,
                None => fail(Some(r::CLIENT_ERROR_DECODING_KEY)),
            },
            b'N' | b'T' | b'R' => match strtol_i32(arg) {
                Some(v) => {
                    let v = Some(i64::from(v));
                    match o {
                        b'N' => f.vivify = v,
                        b'T' => f.exptime = v,
                        _ => f.recache = v,
                    }
                }
                None => fail(Some(r::CLIENT_ERROR_BAD_TOKEN)),
            },
            b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u'
            | b'q' | b'I' => {}
            // Extensions from memcached releases after 1.6.18 (which rejects them as invalid):
            // `x` on md removes the value but keeps the item; `E` sets the new CAS explicitly.
            b'x' => {}
            b'E' => match strtoull(arg) {
                Some(v) => f.new_cas = Some(v),
                None => fail(Some(r::CLIENT_ERROR_BAD_TOKEN)),
            },
            b'F' => match strtoul_u32(arg) {
                Some(v) => f.client_flags = v,
                None => fail(None),
            },
            b'C' => match strtoull(arg) {
                Some(v) => f.cas = Some(v),
                None => fail(Some(r::CLIENT_ERROR_BAD_TOKEN)),
            },
            b'M' => {
                if tok.len() != 2 {
                    fail(Some(r::CLIENT_ERROR_M_TOKEN_LENGTH));
                } else {
                    f.mode = Some(tok[1]);
                }
            }
            b'J' => match strtoull(arg) {
                Some(v) => f.initial = Some(v),
                None => fail(Some(r::CLIENT_ERROR_INVALID_INITIAL)),
            },
            b'D' => match strtoull(arg) {
                Some(v) => f.delta = Some(v),
                None => fail(Some(r::CLIENT_ERROR_INVALID_DELTA_VALUE)),
            },
            _ => return Err(r::CLIENT_ERROR_INVALID_FLAG),
        }
    }
    if has_error {
        Err(errstr)
    } else {
        Ok(f)
    }
}

fn opaque_too_long(raw: &[u8]) -> bool {
    Tokens::new(raw).any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE_TOKEN)
}

/// Skips `n` tokens of `rest` and returns what follows.
fn skip_tokens(rest: &[u8], n: usize) -> &[u8] {
    let mut t = Tokens::new(rest);
    for _ in 0..n {
        t.next();
    }
    t.remainder()
}

pub(crate) fn parse_meta<'a>(
    buf: &'a [u8],
    sub: u8,
    l: &Line<'a>,
    rest: &'a [u8],
    after: usize,
    limits: &Limits,
) -> Parse<'a> {
    let n = l.ntokens;
    match sub {
        b'n' => return Parse::Request(Request::MetaNoop, after),
        b'e' => return meta_debug(l, after),
        b'g' | b's' | b'd' | b'a' => {}
        _ => return err(r::ERROR, after),
    }
    if n < 3 {
        return err(r::ERROR, after);
    }
    let raw_key = l.get(1);
    if raw_key.len() > KEY_MAX_LENGTH {
        return err(r::CLIENT_ERROR_BAD_FORMAT, after);
    }
    let mut key = Key::raw(raw_key);
    match sub {
        b'g' => {
            if n > MAX_META_NTOKENS {
                return err(r::CLIENT_ERROR_MG_FLAGS_TOO_LONG, after);
            }
            let raw = skip_tokens(rest, 1);
            match preparse(raw, &mut key) {
                Ok(flags) => Parse::Request(
                    Request::MetaGet {
                        key,
                        flags,
                        late_error: opaque_too_long(raw).then_some(r::CLIENT_ERROR_OPAQUE_TOO_LONG),
                    },
                    after,
                ),
                Err(e) => err(e, after),
            }
        }
        b'd' => {
            if n > MAX_META_NTOKENS {
                return err(r::CLIENT_ERROR_FLAGS_TOO_LONG, after);
            }
            let raw = skip_tokens(rest, 1);
            match preparse(raw, &mut key) {
                Ok(_) if opaque_too_long(raw) => err(r::CLIENT_ERROR_OPAQUE_TOO_LONG, after),
                Ok(flags) => Parse::Request(Request::MetaDelete { key, flags }, after),
                Err(_) => err(r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG, after),
            }
        }
        b'a' => {
            if n > MAX_META_NTOKENS {
                return err(r::CLIENT_ERROR_FLAGS_TOO_LONG, after);
            }
            let raw = skip_tokens(rest, 1);
            let flags = match preparse(raw, &mut key) {
                Ok(f) => f,
                Err(_) => return err(r::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG, after),
            };
            let incr = match flags.mode {
                None | Some(b'I') | Some(b'+') => true,
                Some(b'D') | Some(b'-') => false,
                Some(_) => return err(r::CLIENT_ERROR_MA_MODE, after),
            };
            Parse::Request(
                Request::MetaArithmetic {
                    key,
                    flags,
                    incr,
                    late_error: opaque_too_long(raw).then_some(r::CLIENT_ERROR_OPAQUE_TOO_LONG),
                },
                after,
            )
        }
        _ => meta_set(buf, l, rest, after, key, limits),
    }
}

fn meta_set<'a>(
    buf: &'a [u8],
    l: &Line<'a>,
    rest: &'a [u8],
    after: usize,
    mut key: Key<'a>,
    limits: &Limits,
) -> Parse<'a> {
    let n = l.ntokens;
    if n == 3 {
        return err(r::CLIENT_ERROR_BAD_FORMAT, after);
    }
    if n > MAX_META_NTOKENS {
        return err(r::CLIENT_ERROR_FLAGS_TOO_LONG, after);
    }
    let vlen = match strtol_i32(l.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return err(r::CLIENT_ERROR_BAD_FORMAT, after),
    };
    // From here on memcached swallows the data block after an error.
    let refuse = |reply: &'static [u8], unlink: Option<Key<'a>>| Parse::Error {
        reply,
        consumed: after,
        swallow: vlen + 2,
        close: false,
        unlink,
    };
    let raw = skip_tokens(rest, 2);
    let flags = match preparse(raw, &mut key) {
        Ok(f) => f,
        Err(e) => return refuse(e, None),
    };
    let cmd = match flags.mode {
        None | Some(b'S') => StoreCmd::Set,
        Some(b'E') => StoreCmd::Add,
        Some(b'A') => StoreCmd::Append,
        Some(b'P') => StoreCmd::Prepend,
        Some(b'R') => StoreCmd::Replace,
        Some(_) => return refuse(r::CLIENT_ERROR_MS_MODE, None),
    };
    if opaque_too_long(raw) {
        return refuse(r::CLIENT_ERROR_OPAQUE_TOO_LONG, None);
    }
    let cmd = match cmd {
        StoreCmd::Set | StoreCmd::Replace if flags.cas.is_some() => StoreCmd::Cas,
        c => c,
    };
    if limits.item_too_large(key.as_bytes().len(), flags.client_flags, vlen) {
        // memcached unlinks the old item whatever the mode.
        return refuse(r::SERVER_ERROR_TOO_LARGE, Some(key));
    }
    let total = after + vlen + 2;
    if buf.len() < total {
        return Parse::Incomplete { total: Some(total) };
    }
    if &buf[total - 2..total] != b"\r\n" {
        // Meta mode always reports this error, even with q.
        return err(r::CLIENT_ERROR_BAD_DATA_CHUNK, total);
    }
    Parse::Request(
        Request::MetaSet {
            key,
            flags,
            cmd,
            data: &buf[after..after + vlen],
        },
        total,
    )
}

fn meta_debug<'a>(l: &Line<'a>, after: usize) -> Parse<'a> {
    if l.ntokens < 3 || l.get(1).len() > KEY_MAX_LENGTH {
        return err(r::CLIENT_ERROR_BAD_FORMAT, after);
    }
    let raw = l.get(1);
    let key = if l.ntokens >= 4 && l.get(2) == b"b" {
        match Key::decoded(raw) {
            Some(k) => k,
            None => return err(r::CLIENT_ERROR_BAD_FORMAT, after),
        }
    } else {
        Key::raw(raw)
    };
    Parse::Request(Request::MetaDebug { key }, after)
}
