//! Tallying replies without keeping them: for a load generator, which counts hits, misses
//! and errors and throws the values away. [`super::Framer`] frames whole replies for a
//! proxy to forward; this reader is resumable instead: it consumes what it can from the
//! bytes given, including part of a value's data, so the caller's read buffer only ever has
//! to hold one line. Both read lines with [`super::parse_line`].

use super::{parse_line, Line};

/// What reply the oldest outstanding request expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `set` → one status line.
    Store,
    /// `get k1 .. kn` → VALUE blocks then END.
    Get,
    /// `ms` → one status line (HD on success).
    MetaStore,
    /// one `mg` without q → VA+data, HD or EN.
    MetaGet,
    /// `mg .. q` × n then `mn` → VA blocks for hits then MN.
    MetaMultiGet,
    /// Redis `SET` → `+OK`.
    RedisStore,
    /// Redis `GET` → a bulk string or nil.
    RedisGet,
    /// Redis `MGET` → an array of bulk strings or nils.
    RedisMultiGet,
}

/// One complete reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reply {
    /// Values returned (keys found).
    pub hits: u32,
    /// `EN` lines seen (meta); text misses are derived from the key count.
    pub misses: u32,
    /// The server answered with an error or an unexpected status.
    pub error: bool,
}

/// The byte stream cannot be understood: the connection must be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Longest line accepted before the stream is declared broken.
pub const MAX_LINE: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Line,
    /// Inside a value: data bytes plus its trailing CRLF still to skip.
    Data {
        remaining: usize,
        then_done: bool,
    },
}

/// Reads one connection's replies in order, given what each request expects.
#[derive(Debug)]
pub struct ReplyParser {
    state: State,
    acc: Reply,
    /// Elements of a Redis array reply still to read.
    left: u64,
    /// The line of the first error in the reply being read (`take_error_line`).
    error_line: Option<Box<[u8]>>,
}

impl Default for ReplyParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyParser {
    /// A parser at the start of a reply.
    pub fn new() -> Self {
        ReplyParser {
            state: State::Line,
            acc: Reply::default(),
            error_line: None,
            left: 0,
        }
    }

    /// Consumes from `buf`. Returns how many bytes were used and, if a reply was
    /// completed, that reply (then the parser is ready for the next one; call again
    /// with the rest of the buffer).
    pub fn parse(
        &mut self,
        expect: Expect,
        buf: &[u8],
    ) -> Result<(usize, Option<Reply>), ProtocolError> {
        let mut pos = 0;
        loop {
            match self.state {
                State::Data {
                    remaining,
                    then_done,
                } => {
                    let take = remaining.min(buf.len() - pos);
                    pos += take;
                    let left = remaining - take;
                    if left > 0 {
                        self.state = State::Data {
                            remaining: left,
                            then_done,
                        };
                        return Ok((pos, None));
                    }
                    // The CRLF after the data is part of `remaining`; checked loosely.
                    self.state = State::Line;
                    if then_done {
                        return Ok((pos, Some(self.finish())));
                    }
                }
                State::Line => {
                    let rest = &buf[pos..];
                    let Some(nl) = rest.iter().position(|&c| c == b'\n') else {
                        if rest.len() > MAX_LINE {
                            return Err(ProtocolError("reply line too long".into()));
                        }
                        return Ok((pos, None));
                    };
                    let line = trim_cr(&rest[..nl]);
                    pos += nl + 1;
                    if let Some(done) = self.line(expect, line)? {
                        return Ok((pos, Some(done)));
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> Reply {
        std::mem::take(&mut self.acc)
    }

    /// Marks the reply as an error, keeping its first error line.
    fn fail(&mut self, line: &[u8]) {
        self.acc.error = true;
        if self.error_line.is_none() {
            self.error_line = Some(line.into());
        }
    }

    /// The error line of the last reply returned with `error` set (once).
    pub fn take_error_line(&mut self) -> Option<Box<[u8]>> {
        self.error_line.take()
    }

    /// Handles one line; returns the reply if this line ends it. Lines are classified by
    /// [`super::parse_line`], the same reader the router frames replies with.
    fn line(&mut self, expect: Expect, line: &[u8]) -> Result<Option<Reply>, ProtocolError> {
        if matches!(
            expect,
            Expect::RedisStore | Expect::RedisGet | Expect::RedisMultiGet
        ) {
            return self.resp_line(expect, line);
        }
        let parsed = parse_line(line).map_err(|_| bad(line))?;
        if parsed == Line::Error {
            // memcached ends any reply, even a multi-get in progress, with the error line.
            self.fail(line);
            return Ok(Some(self.finish()));
        }
        let multi = expect == Expect::MetaMultiGet;
        match (expect, parsed) {
            (Expect::Store, Line::Other(status)) => {
                match status {
                    b"STORED" => {}
                    b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => self.fail(line),
                    _ => return Err(bad(line)),
                }
                Ok(Some(self.finish()))
            }
            (Expect::MetaStore, Line::Other(status)) => {
                match status.split(|&b| b == b' ').next().unwrap_or(b"") {
                    b"HD" => {}
                    b"NS" | b"EX" | b"NF" => self.fail(line),
                    _ => return Err(bad(line)),
                }
                Ok(Some(self.finish()))
            }
            (Expect::Get, Line::End) => Ok(Some(self.finish())),
            (Expect::Get, Line::Value { len, .. }) => {
                self.acc.hits += 1;
                self.state = State::Data {
                    remaining: len + 2,
                    then_done: false,
                };
                Ok(None)
            }
            (Expect::MetaGet | Expect::MetaMultiGet, Line::Va { len }) => {
                self.acc.hits += 1;
                self.state = State::Data {
                    remaining: len + 2,
                    then_done: !multi,
                };
                Ok(None)
            }
            (Expect::MetaGet | Expect::MetaMultiGet, Line::Other(status)) => {
                if status == b"EN" {
                    self.acc.misses += 1;
                } else if status == b"HD" || status.starts_with(b"HD ") {
                    self.acc.hits += 1;
                } else if multi && status == b"MN" {
                    return Ok(Some(self.finish()));
                } else {
                    return Err(bad(line));
                }
                Ok(if multi { None } else { Some(self.finish()) })
            }
            _ => Err(bad(line)),
        }
    }
}

impl ReplyParser {
    /// One RESP line: a whole reply (`+OK`, `-ERR ..`, a nil), a bulk header (its data
    /// follows), or an array header (its elements follow).
    fn resp_line(&mut self, expect: Expect, line: &[u8]) -> Result<Option<Reply>, ProtocolError> {
        let (&t, rest) = line.split_first().ok_or_else(|| bad(line))?;
        let in_array = self.left > 0;
        let number = || crate::resp::parse_ll(rest).ok_or_else(|| bad(line));
        match t {
            b'-' => {
                // An error element inside an array does not end it.
                self.fail(line);
            }
            b'+' if expect == Expect::RedisStore => {}
            b'*' if expect == Expect::RedisMultiGet && !in_array => {
                let n = number()?;
                if n > 0 {
                    self.left = n as u64;
                    return Ok(None);
                }
                // *0 or a nil array: complete.
            }
            b'$' if expect != Expect::RedisStore => {
                let n = number()?;
                if n >= 0 {
                    self.acc.hits += 1;
                    let last = !in_array || self.left == 1;
                    self.left = self.left.saturating_sub(1);
                    self.state = State::Data {
                        remaining: n as usize + 2,
                        then_done: last,
                    };
                    return Ok(None);
                }
                // `$-1`: a miss (misses come from the key count).
            }
            // RESP3 null, should a server answer in RESP3.
            b'_' if expect != Expect::RedisStore => {}
            _ => return Err(bad(line)),
        }
        if in_array {
            self.left -= 1;
            if self.left > 0 {
                return Ok(None);
            }
        }
        Ok(Some(self.finish()))
    }
}

fn bad(line: &[u8]) -> ProtocolError {
    let shown: String = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    ProtocolError(format!("unexpected reply line `{shown}`"))
}

#[inline]
fn trim_cr(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\r").unwrap_or(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `stream` through the parser as a client would: bytes arrive in chunks
    /// (split at `cuts`), unconsumed bytes stay in the buffer for the next round.
    fn run(expects: &[Expect], stream: &[u8], cuts: &[usize]) -> Vec<Reply> {
        let mut p = ReplyParser::new();
        let mut out = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut fed = 0;
        let mut bounds: Vec<usize> = cuts.to_vec();
        bounds.push(stream.len());
        for &end in &bounds {
            buf.extend_from_slice(&stream[fed..end]);
            fed = end;
            while let Some(&e) = expects.get(out.len()) {
                let (used, r) = p.parse(e, &buf).unwrap();
                buf.drain(..used);
                match r {
                    Some(r) => out.push(r),
                    None => break,
                }
            }
        }
        assert!(
            buf.is_empty(),
            "left over: {:?}",
            String::from_utf8_lossy(&buf)
        );
        out
    }

    #[test]
    fn redis_replies() {
        let r = |hits, error| Reply {
            hits,
            misses: 0,
            error,
        };
        every_split(
            &[
                Expect::RedisStore,
                Expect::RedisGet,
                Expect::RedisGet,
                Expect::RedisMultiGet,
                Expect::RedisMultiGet,
                Expect::RedisStore,
                Expect::RedisGet,
            ],
            b"+OK\r\n$3\r\nabc\r\n$-1\r\n*3\r\n$1\r\nx\r\n$-1\r\n$2\r\nyz\r\n*0\r\n-OOM no\r\n_\r\n",
            &[
                r(0, false),
                r(1, false),
                r(0, false),
                r(2, false),
                r(0, false),
                r(0, true),
                r(0, false),
            ],
        );
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::RedisStore, b"$3\r\nabc\r\n").is_err());
        assert!(ReplyParser::new()
            .parse(Expect::RedisGet, b"*x\r\n")
            .is_err());
    }

    fn every_split(expects: &[Expect], stream: &[u8], want: &[Reply]) {
        assert_eq!(run(expects, stream, &[]), want, "whole");
        for i in 0..=stream.len() {
            assert_eq!(run(expects, stream, &[i]), want, "split at {i}");
        }
        let all: Vec<usize> = (1..stream.len()).collect();
        assert_eq!(run(expects, stream, &all), want, "byte by byte");
    }

    const HIT: Reply = Reply {
        hits: 1,
        misses: 0,
        error: false,
    };
    const OK: Reply = Reply {
        hits: 0,
        misses: 0,
        error: false,
    };

    #[test]
    fn text_get_set_sequence() {
        let stream = b"STORED\r\nVALUE memtier-1 0 5\r\nhello\r\nEND\r\nEND\r\nVALUE a 3 2 99\r\n\r\n\r\nVALUE b 0 0\r\n\r\nEND\r\nNOT_STORED\r\n";
        let ex = [
            Expect::Store,
            Expect::Get,
            Expect::Get,
            Expect::Get,
            Expect::Store,
        ];
        let want = [
            OK,
            HIT,
            OK,
            Reply { hits: 2, ..OK },
            Reply { error: true, ..OK },
        ];
        every_split(&ex, stream, &want);
    }

    #[test]
    fn value_data_containing_end_and_newlines() {
        let stream = b"VALUE k 0 12\r\nEND\r\nEND\r\nxx\r\nEND\r\n";
        every_split(&[Expect::Get], stream, &[HIT]);
    }

    #[test]
    fn error_lines_end_any_reply() {
        let stream = b"SERVER_ERROR out of memory storing object\r\nVALUE k 0 1\r\nx\r\nSERVER_ERROR busy\r\nCLIENT_ERROR bad\r\nERROR\r\n";
        let err = Reply { error: true, ..OK };
        every_split(
            &[Expect::Store, Expect::Get, Expect::MetaGet, Expect::Store],
            stream,
            &[
                err,
                Reply {
                    hits: 1,
                    error: true,
                    misses: 0,
                },
                err,
                err,
            ],
        );
    }

    #[test]
    fn meta_replies() {
        let stream = b"HD\r\nVA 3 f5\r\nabc\r\nEN\r\nHD f0\r\nNS\r\nVA 1\r\nx\r\nEN\r\nVA 2 f0\r\nyz\r\nMN\r\nMN\r\n";
        let ex = [
            Expect::MetaStore,
            Expect::MetaGet,
            Expect::MetaGet,
            Expect::MetaGet,
            Expect::MetaStore,
            Expect::MetaMultiGet,
            Expect::MetaMultiGet,
        ];
        let want = [
            OK,
            HIT,
            Reply { misses: 1, ..OK },
            HIT,
            Reply { error: true, ..OK },
            Reply {
                hits: 2,
                misses: 1,
                error: false,
            },
            OK,
        ];
        every_split(&ex, stream, &want);
    }

    #[test]
    fn big_value_is_skipped_without_buffering() {
        let mut stream = b"VALUE big 0 100000\r\n".to_vec();
        stream.extend_from_slice(&[b'v'; 100_000]);
        stream.extend_from_slice(b"\r\nEND\r\n");
        let mut p = ReplyParser::new();
        // Header, then data in 1000-byte pieces that the parser eats entirely.
        let (used, r) = p.parse(Expect::Get, &stream[..20]).unwrap();
        assert_eq!((used, r), (20, None));
        let mut pos = 20;
        while pos + 1000 <= 20 + 100_000 {
            let (used, r) = p.parse(Expect::Get, &stream[pos..pos + 1000]).unwrap();
            assert_eq!((used, r), (1000, None));
            pos += 1000;
        }
        let (used, r) = p.parse(Expect::Get, &stream[pos..]).unwrap();
        assert_eq!(used, stream.len() - pos);
        assert_eq!(r, Some(HIT));
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::Get, b"HELLO\r\n").is_err());
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::Get, b"VALUE k 0 x\r\n").is_err());
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::MetaGet, b"XX\r\n").is_err());
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::Store, b"HELLO\r\n").is_err());
        let mut p = ReplyParser::new();
        assert!(p.parse(Expect::MetaStore, b"VA 1\r\n").is_err());
        let mut p = ReplyParser::new();
        let long = vec![b'a'; MAX_LINE + 1];
        assert!(p.parse(Expect::Store, &long).is_err());
        let mut p = ReplyParser::new();
        assert_eq!(p.parse(Expect::Store, &long[..100]).unwrap(), (0, None));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// One reply in wire form with what the parser must report for it.
        fn reply() -> impl Strategy<Value = (Expect, Vec<u8>, Reply)> {
            let data = proptest::collection::vec(any::<u8>(), 0..40);
            prop_oneof![
                Just((Expect::Store, b"STORED\r\n".to_vec(), Reply::default())),
                Just((
                    Expect::Store,
                    b"SERVER_ERROR out of memory\r\n".to_vec(),
                    Reply {
                        error: true,
                        ..Reply::default()
                    }
                )),
                proptest::collection::vec(data.clone(), 0..4).prop_map(|vals| {
                    let mut w = Vec::new();
                    for (i, v) in vals.iter().enumerate() {
                        w.extend_from_slice(format!("VALUE key{i} 0 {}\r\n", v.len()).as_bytes());
                        w.extend_from_slice(v);
                        w.extend_from_slice(b"\r\n");
                    }
                    w.extend_from_slice(b"END\r\n");
                    let hits = vals.len() as u32;
                    (
                        Expect::Get,
                        w,
                        Reply {
                            hits,
                            ..Reply::default()
                        },
                    )
                }),
                data.clone().prop_map(|v| {
                    let mut w = format!("VA {} f0\r\n", v.len()).into_bytes();
                    w.extend_from_slice(&v);
                    w.extend_from_slice(b"\r\n");
                    (
                        Expect::MetaGet,
                        w,
                        Reply {
                            hits: 1,
                            ..Reply::default()
                        },
                    )
                }),
                Just((
                    Expect::MetaGet,
                    b"EN\r\n".to_vec(),
                    Reply {
                        misses: 1,
                        ..Reply::default()
                    }
                )),
                Just((Expect::MetaStore, b"HD\r\n".to_vec(), Reply::default())),
            ]
        }

        proptest! {
            #[test]
            fn any_chunking_gives_the_same_replies(
                replies in proptest::collection::vec(reply(), 1..8),
                cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..10),
            ) {
                let expects: Vec<Expect> = replies.iter().map(|r| r.0).collect();
                let stream: Vec<u8> = replies.iter().flat_map(|r| r.1.clone()).collect();
                let want: Vec<Reply> = replies.iter().map(|r| r.2).collect();
                let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
                cuts.sort_unstable();
                prop_assert_eq!(run(&expects, &stream, &cuts), want);
            }
        }
    }
}
