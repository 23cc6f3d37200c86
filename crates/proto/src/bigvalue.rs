//! Big values as mcrouter's BigValueRoute stores them: a value over the split threshold is
//! cut into chunks of at most `threshold` bytes stored under `<key>:<i>:<suffix>`, and the
//! key itself holds a small index item `1-<chunks>-<suffix>` whose client flags carry
//! [`BIG_VALUE_FLAG`]. The suffix differs per write, so the chunks of two writes of one key
//! never mix: a reader follows one index to its own chunks, and a missing chunk is a miss.
//! Pure: the router does the sends; this module builds the requests and judges the replies.

use crate::meta::MetaFlags;
use crate::StoreCmd;

/// mcrouter's `MC_MSG_FLAG_BIG_VALUE`: set in the index item's client flags.
pub const BIG_VALUE_FLAG: u32 = 0x8000;
/// The index format version mcrouter writes and accepts.
const INDEX_VERSION: u32 = 1;
/// memcached's longest key: a chunk key must fit too.
const KEY_MAX: usize = 250;

/// How a pool splits values (0 threshold: off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Values longer than this are split into chunks of this size.
    pub threshold: usize,
    /// Chunks sent or fetched at a time (0: all at once).
    pub batch: usize,
    /// Clear [`BIG_VALUE_FLAG`] in the flags a reassembled value is returned with.
    pub hide_flag: bool,
}

/// The index item's value: how many chunks and under which suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Index {
    /// The number of chunks.
    pub chunks: u32,
    /// The per-write suffix of the chunk keys.
    pub suffix: u64,
}

impl Index {
    /// The index for a value of `len` bytes split at `threshold`.
    pub fn for_value(len: usize, threshold: usize, suffix: u64) -> Index {
        let chunks = len.div_ceil(threshold.max(1));
        Index {
            chunks: u32::try_from(chunks).unwrap_or(u32::MAX),
            suffix,
        }
    }

    /// `1-<chunks>-<suffix>`, as mcrouter writes it.
    pub fn encode(&self) -> Vec<u8> {
        format!("{INDEX_VERSION}-{}-{}", self.chunks, self.suffix).into_bytes()
    }

    /// The index in an item's value; `None` for anything else (another version, appended
    /// or prepended bytes, garbage): the read is then a miss.
    pub fn parse(value: &[u8]) -> Option<Index> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split('-');
        let version: u32 = parse_digits(parts.next()?)?;
        let chunks: u32 = parse_digits(parts.next()?)?;
        let suffix: u64 = parse_digits(parts.next()?)?;
        if parts.next().is_some() || version != INDEX_VERSION || chunks == 0 {
            return None;
        }
        Some(Index { chunks, suffix })
    }

    /// The key of chunk `i`.
    pub fn chunk_key(&self, key: &[u8], i: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + 24);
        out.extend_from_slice(key);
        out.extend_from_slice(format!(":{i}:{}", self.suffix).as_bytes());
        out
    }

    /// Whether every chunk key of `key` is a valid memcached key, whatever the suffix (so
    /// whether a key may hold a big value does not depend on the draw).
    pub fn keys_fit(&self, key: &[u8]) -> bool {
        let last = self.chunks.saturating_sub(1).to_string().len();
        key.len() + 2 + last + u64::MAX.to_string().len() <= KEY_MAX
    }
}

fn parse_digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The value's chunks, in order.
pub fn chunks(value: &[u8], threshold: usize) -> std::slice::Chunks<'_, u8> {
    value.chunks(threshold.max(1))
}

/// A text `set` of one chunk (chunks keep the client's flags and exptime, as mcrouter's).
pub fn chunk_set(key: &[u8], flags: u32, exptime: i64, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    out.extend_from_slice(format!(" {flags} {exptime} {}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Why a store over the threshold is refused.
pub const REFUSED_KEY: &str = "SERVER_ERROR key too long for a big value\r\n";
/// append and prepend cannot extend a split value.
pub const REFUSED_CMD: &str = "SERVER_ERROR append/prepend of a big value is not supported\r\n";

/// The store of the index item that finishes a big-value write: the client's command with
/// the index as its value and [`BIG_VALUE_FLAG`] added to its flags. The reply to it is the
/// client's reply. `Err`: the error reply for a command that cannot be split.
pub fn text_index_store(
    cmd: StoreCmd,
    key: &[u8],
    flags: u32,
    exptime: i64,
    cas: u64,
    index: &Index,
) -> Result<Vec<u8>, &'static str> {
    if matches!(cmd, StoreCmd::Append | StoreCmd::Prepend) {
        return Err(REFUSED_CMD);
    }
    if !index.keys_fit(key) {
        return Err(REFUSED_KEY);
    }
    let value = index.encode();
    let mut out = Vec::with_capacity(key.len() + 64);
    out.extend_from_slice(cmd.name().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    let flags = flags | BIG_VALUE_FLAG;
    out.extend_from_slice(format!(" {flags} {exptime} {}", value.len()).as_bytes());
    if cmd == StoreCmd::Cas {
        out.extend_from_slice(format!(" {cas}").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&value);
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// A meta set's parts a big-value write needs: its client flags and TTL (for the chunks)
/// and the index store (its own flags kept, `q` dropped so the router sees the answer).
#[derive(Debug, PartialEq, Eq)]
pub struct MetaStore {
    /// `F`.
    pub flags: u32,
    /// `T` (0: none).
    pub exptime: i64,
    /// The `ms` that stores the index.
    pub index_store: Vec<u8>,
    /// The client asked for `q`: an `HD` answer is not shown.
    pub quiet: bool,
}

/// The meta set `ms <key> <len> <flags>` as a big-value write. `Err`: the error reply for
/// a set that cannot be split (base64 key, append/prepend mode, invalid flag values).
pub fn meta_index_store(
    key: &[u8],
    flags: &MetaFlags<'_>,
    cmd: StoreCmd,
    index: &Index,
) -> Result<MetaStore, &'static str> {
    if matches!(cmd, StoreCmd::Append | StoreCmd::Prepend) {
        return Err(REFUSED_CMD);
    }
    if flags.has(b'b') || !index.keys_fit(key) {
        return Err(REFUSED_KEY);
    }
    let value = index.encode();
    let mut client_flags = 0u32;
    let mut exptime = 0i64;
    let mut rest = Vec::new();
    for (f, arg) in flags.iter() {
        match f {
            b'F' => {
                client_flags = std::str::from_utf8(arg)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("CLIENT_ERROR bad token in command line format\r\n")?
            }
            b'q' => continue,
            b'T' => {
                exptime = std::str::from_utf8(arg)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("CLIENT_ERROR bad token in command line format\r\n")?;
                rest.push(b' ');
                rest.push(f);
                rest.extend_from_slice(arg);
            }
            _ => {
                rest.push(b' ');
                rest.push(f);
                rest.extend_from_slice(arg);
            }
        }
    }
    let mut out = Vec::with_capacity(key.len() + 64 + rest.len());
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.extend_from_slice(format!(" {}", value.len()).as_bytes());
    out.extend_from_slice(&rest);
    out.extend_from_slice(format!(" F{}\r\n", client_flags | BIG_VALUE_FLAG).as_bytes());
    out.extend_from_slice(&value);
    out.extend_from_slice(b"\r\n");
    Ok(MetaStore {
        flags: client_flags,
        exptime,
        index_store: out,
        quiet: flags.noreply(),
    })
}

/// One `VALUE` of a text get reply (ranges into the reply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    /// The key.
    pub key: std::ops::Range<usize>,
    /// The client flags.
    pub flags: u32,
    /// The data block.
    pub data: std::ops::Range<usize>,
    /// `gets`: the CAS unique, as sent.
    pub cas: Option<std::ops::Range<usize>>,
}

/// A complete text get reply (`VALUE`s then `END`): its values and length. `None`: not a
/// complete get reply (an error, or cut short).
pub fn parse_get_reply(reply: &[u8]) -> Option<(Vec<Value>, usize)> {
    let mut values = Vec::new();
    let mut at = 0;
    loop {
        let eol = at + memchr_crlf(&reply[at..])?;
        let line = &reply[at..eol];
        if line == b"END" {
            return Some((values, eol + 2));
        }
        let mut parts = line.split(|&b| b == b' ');
        if parts.next()? != b"VALUE" {
            return None;
        }
        let key = parts.next()?;
        let flags: u32 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
        let len: usize = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
        let cas = parts.next().map(|c| {
            let start = c.as_ptr() as usize - reply.as_ptr() as usize;
            start..start + c.len()
        });
        let key_start = key.as_ptr() as usize - reply.as_ptr() as usize;
        let data = eol + 2..eol + 2 + len;
        if reply.get(data.end..data.end + 2)? != b"\r\n" {
            return None;
        }
        at = data.end + 2;
        values.push(Value {
            key: key_start..key_start + key.len(),
            flags,
            data,
            cas,
        });
    }
}

fn memchr_crlf(s: &[u8]) -> Option<usize> {
    s.windows(2).position(|w| w == b"\r\n")
}

/// Whether a finished get reply holds an index item (it then needs its chunks). Cheap: only
/// the `VALUE` lines are looked at.
pub fn has_index(reply: &[u8]) -> bool {
    parse_get_reply(reply)
        .is_some_and(|(values, _)| values.iter().any(|v| v.flags & BIG_VALUE_FLAG != 0))
}

/// The reply once each index item's chunks are known: `fetched(i)` gives the chunks of the
/// `i`-th value of `reply` (in order; `None` when one is missing or the index is invalid,
/// and the item is then left out: a miss). Values without the flag are kept as they are.
pub fn reassemble<F>(reply: &[u8], settings: &Settings, mut fetched: F) -> Vec<u8>
where
    F: FnMut(usize) -> Option<Vec<u8>>,
{
    reassemble_parts(reply, |i| match fetched(i) {
        Some(data) => Part::Whole {
            data,
            hide_flag: settings.hide_flag,
        },
        None => Part::Miss,
    })
}

/// What becomes of one index item of a get reply (see [`reassemble_parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Returned as it is: no big-value reading applies to its key.
    Keep,
    /// Left out: a chunk is missing or the index is invalid.
    Miss,
    /// The value its chunks make, and whether its flags lose [`BIG_VALUE_FLAG`].
    Whole {
        /// The joined chunks.
        data: Vec<u8>,
        /// Clear [`BIG_VALUE_FLAG`] in the reply's flags.
        hide_flag: bool,
    },
}

/// [`reassemble`] with a choice per index item: `part(i)` says what the `i`-th value of
/// `reply` (one whose flags carry [`BIG_VALUE_FLAG`]) becomes. Different keys of one get
/// may go through different BigValueRoutes, or none.
pub fn reassemble_parts<F>(reply: &[u8], mut part: F) -> Vec<u8>
where
    F: FnMut(usize) -> Part,
{
    let Some((values, _)) = parse_get_reply(reply) else {
        return reply.to_vec();
    };
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let (flags, data) = if v.flags & BIG_VALUE_FLAG != 0 {
            match part(i) {
                Part::Keep => (v.flags, reply[v.data.clone()].to_vec()),
                Part::Miss => continue,
                Part::Whole { data, hide_flag } => {
                    let flags = if hide_flag {
                        v.flags & !BIG_VALUE_FLAG
                    } else {
                        v.flags
                    };
                    (flags, data)
                }
            }
        } else {
            (v.flags, reply[v.data.clone()].to_vec())
        };
        out.extend_from_slice(b"VALUE ");
        out.extend_from_slice(&reply[v.key.clone()]);
        out.extend_from_slice(format!(" {flags} {}", data.len()).as_bytes());
        if let Some(cas) = &v.cas {
            out.push(b' ');
            out.extend_from_slice(&reply[cas.clone()]);
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"END\r\n");
    out
}

/// The value behind `index` from the reply to a get of its chunk keys (`keys`, in order):
/// `None` unless every chunk is there (a missing chunk is a miss, never a short value).
pub fn join_chunks(keys: &[Vec<u8>], replies: &[u8]) -> Option<Vec<u8>> {
    let mut found: std::collections::HashMap<&[u8], &[u8]> = std::collections::HashMap::new();
    let mut at = 0;
    while at < replies.len() {
        let (values, n) = parse_get_reply(&replies[at..])?;
        let part = &replies[at..at + n];
        for v in values {
            found.insert(&part[v.key.clone()], &part[v.data.clone()]);
        }
        at += n;
    }
    let mut out = Vec::new();
    for k in keys {
        out.extend_from_slice(found.get(k.as_slice())?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trips_in_mcrouters_format() {
        let idx = Index::for_value(10 * 1024 * 1024, 1_000_000, 77);
        assert_eq!(idx.chunks, 11);
        assert_eq!(idx.encode(), b"1-11-77");
        assert_eq!(Index::parse(b"1-11-77"), Some(idx));
        assert_eq!(idx.chunk_key(b"k", 3), b"k:3:77");
    }

    #[test]
    fn a_damaged_index_is_no_index() {
        for bad in [
            &b"2-3-4"[..],
            b"1-3-4x",
            b"x1-3-4",
            b"1-3",
            b"1-0-4",
            b"1-3-4-5",
            b"1--4",
            b"",
        ] {
            assert_eq!(Index::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn chunks_cover_the_value_exactly() {
        let value: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let parts: Vec<&[u8]> = chunks(&value, 1000).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(Index::for_value(value.len(), 1000, 1).chunks, 3);
        assert_eq!(parts.concat(), value);
        assert_eq!(Index::for_value(2000, 1000, 1).chunks, 2);
    }

    #[test]
    fn text_index_store_marks_the_flags() {
        let idx = Index {
            chunks: 2,
            suffix: 9,
        };
        let req = text_index_store(StoreCmd::Cas, b"k", 5, 60, 42, &idx).unwrap();
        assert_eq!(req, b"cas k 32773 60 5 42\r\n1-2-9\r\n");
        assert!(text_index_store(StoreCmd::Append, b"k", 0, 0, 0, &idx).is_err());
        assert!(text_index_store(StoreCmd::Set, &[b'a'; 227], 0, 0, 0, &idx).is_ok());
        let long = vec![b'a'; 228];
        assert_eq!(
            text_index_store(StoreCmd::Set, &long, 0, 0, 0, &idx),
            Err(REFUSED_KEY)
        );
    }

    #[test]
    fn meta_index_store_keeps_the_clients_flags_but_q() {
        let raw = b"ms k 5000000 c F7 T30 q O1\r\n";
        let wire = [&raw[..], &vec![b'x'; 5_000_000], b"\r\n"].concat();
        let parsed = crate::parse(
            &wire,
            &crate::Limits {
                item_size_max: 64 << 20,
                ..Default::default()
            },
        );
        let crate::Parse::Request(crate::Request::MetaSet { flags, cmd, .. }, _) = parsed else {
            panic!("not a meta set");
        };
        let idx = Index {
            chunks: 5,
            suffix: 3,
        };
        let m = meta_index_store(b"k", &flags, cmd, &idx).unwrap();
        assert_eq!(m.flags, 7);
        assert_eq!(m.exptime, 30);
        assert!(m.quiet);
        assert_eq!(m.index_store, b"ms k 5 c T30 O1 F32775\r\n1-5-3\r\n");
    }

    #[test]
    fn reassembly_replaces_index_items_and_drops_misses() {
        let reply = b"VALUE a 0 1\r\nx\r\nVALUE b 32768 5 9\r\n1-2-7\r\nVALUE c 32769 5\r\n1-2-8\r\nEND\r\n";
        assert!(has_index(reply));
        let s = Settings {
            threshold: 4,
            batch: 0,
            hide_flag: true,
        };
        let out = reassemble(reply, &s, |i| (i == 1).then(|| b"hello".to_vec()));
        assert_eq!(
            out,
            b"VALUE a 0 1\r\nx\r\nVALUE b 0 5 9\r\nhello\r\nEND\r\n".to_vec()
        );
        let shown = Settings {
            hide_flag: false,
            ..s
        };
        let out = reassemble(reply, &shown, |i| (i == 1).then(|| b"hi".to_vec()));
        assert_eq!(
            out,
            b"VALUE a 0 1\r\nx\r\nVALUE b 32768 2 9\r\nhi\r\nEND\r\n".to_vec()
        );
        assert!(!has_index(b"VALUE a 0 1\r\nx\r\nEND\r\n"));
        assert!(!has_index(b"SERVER_ERROR x\r\n"));
    }

    #[test]
    fn each_index_item_can_be_kept_dropped_or_joined_on_its_own() {
        let reply =
            b"VALUE a 32768 5\r\n1-1-1\r\nVALUE b 32769 5\r\n1-1-2\r\nVALUE c 32768 5\r\n1-1-3\r\nEND\r\n";
        let out = reassemble_parts(reply, |i| match i {
            0 => Part::Keep,
            1 => Part::Whole {
                data: b"bee".to_vec(),
                hide_flag: true,
            },
            _ => Part::Whole {
                data: b"sea".to_vec(),
                hide_flag: false,
            },
        });
        assert_eq!(
            out,
            b"VALUE a 32768 5\r\n1-1-1\r\nVALUE b 1 3\r\nbee\r\nVALUE c 32768 3\r\nsea\r\nEND\r\n"
                .to_vec()
        );
        let out = reassemble_parts(reply, |i| if i == 0 { Part::Keep } else { Part::Miss });
        assert_eq!(out, b"VALUE a 32768 5\r\n1-1-1\r\nEND\r\n".to_vec());
    }

    #[test]
    fn a_missing_chunk_is_no_value() {
        let keys = vec![b"k:0:1".to_vec(), b"k:1:1".to_vec()];
        let both = b"VALUE k:0:1 0 2\r\nab\r\nEND\r\nVALUE k:1:1 0 1\r\nc\r\nEND\r\n";
        assert_eq!(join_chunks(&keys, both), Some(b"abc".to_vec()));
        let one = b"VALUE k:1:1 0 1\r\nc\r\nEND\r\n";
        assert_eq!(join_chunks(&keys, one), None);
        assert_eq!(join_chunks(&keys, b"SERVER_ERROR out of memory\r\n"), None);
    }
}
