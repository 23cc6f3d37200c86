//! Where one reply ends in a backend's byte stream: memcached replies ([`Framer`], and the
//! items of a get reply) and RESP2 replies of Redis pools ([`RespFramer`]).
//!
//! The router never interprets a reply beyond its framing: it needs to know how many bytes
//! belong to the request at the head of a backend connection's queue. Every memcached reply
//! (text or meta) is one of:
//! - `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n` repeated, then `END\r\n`
//!   (or an error line, which memcached can send in the middle of a get);
//! - `VA <size> <flags>*\r\n<data>\r\n` (meta get / arithmetic with `v`);
//! - a single line (`STORED`, `HD`, `EN`, `MN`, `ERROR`, `SERVER_ERROR ...`, a number, ...).

use memchr::memchr;

/// A reply line longer than this without `\n` means the stream is not memcached.
pub const MAX_REPLY_LINE: usize = 64 * 1024;

/// What [`Framer::next`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The first reply is this many bytes long.
    Complete(usize),
    /// More bytes are needed; the total length of the buffer needed when known.
    Incomplete(Option<usize>),
    /// Not a memcached reply: the connection must be dropped.
    Invalid,
}

/// Finds reply boundaries. Remembers how far into a long get reply it already checked,
/// so a reply arriving in many reads is scanned once.
#[derive(Clone, Debug, Default)]
pub struct Framer {
    /// Bytes of the current reply already known to be whole VALUE items.
    pos: usize,
}

impl Framer {
    pub fn new() -> Framer {
        Framer::default()
    }

    /// Frames the first reply in `buf` (which starts at a reply boundary). After
    /// `Complete(n)` the caller drops `n` bytes before calling again.
    pub fn next(&mut self, buf: &[u8]) -> Frame {
        loop {
            let rest = &buf[self.pos..];
            let nl = match memchr(b'\n', rest) {
                Some(nl) => nl,
                None if rest.len() > MAX_REPLY_LINE => return Frame::Invalid,
                None => return Frame::Incomplete(None),
            };
            let line = trim_cr(&rest[..nl]);
            let line_end = self.pos + nl + 1;
            if line.starts_with(b"VALUE ") {
                let Some(bytes) = token(line, 3).and_then(parse_len) else {
                    return Frame::Invalid;
                };
                let end = line_end + bytes + 2;
                if buf.len() < end {
                    return Frame::Incomplete(Some(end));
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Frame::Invalid;
                }
                self.pos = end;
                continue;
            }
            if self.pos == 0 && line.starts_with(b"VA ") {
                let Some(size) = token(line, 1).and_then(parse_len) else {
                    return Frame::Invalid;
                };
                let end = line_end + size + 2;
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
            self.pos = 0;
            return Frame::Complete(line_end);
        }
    }
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
                    match proto::resp::parse_ll(&buf[1..nl - 1]) {
                        Some(n) if (-1..=0).contains(&n) => return Frame::Complete(nl + 1),
                        Some(n) if n > 0 => {
                            self.pos = nl + 1;
                            self.left = n as u64;
                        }
                        _ => return Frame::Invalid,
                    }
                }
                Some(_) => {
                    return match proto::resp::reply_len(buf) {
                        Ok(Some(n)) => Frame::Complete(n),
                        Ok(None) => incomplete(buf, 0),
                        Err(_) => Frame::Invalid,
                    }
                }
            }
        }
        while self.left > 0 {
            match proto::resp::reply_len(&buf[self.pos..]) {
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
    let n = proto::resp::parse_ll(rest.get(1..nl.checked_sub(1)?)?)?;
    (n >= 0).then(|| pos + nl + 1 + n as usize + 2)
}

/// One backend connection's reply framing, by pool protocol.
#[derive(Clone, Debug)]
pub enum ReplyFramer {
    Memcached(Framer),
    Resp(RespFramer),
}

impl ReplyFramer {
    pub fn new(redis: bool) -> ReplyFramer {
        if redis {
            ReplyFramer::Resp(RespFramer::default())
        } else {
            ReplyFramer::Memcached(Framer::new())
        }
    }

    pub fn next(&mut self, buf: &[u8]) -> Frame {
        match self {
            ReplyFramer::Memcached(f) => f.next(buf),
            ReplyFramer::Resp(f) => f.next(buf),
        }
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn token(line: &[u8], i: usize) -> Option<&[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty()).nth(i)
}

fn parse_len(t: &[u8]) -> Option<usize> {
    if t.is_empty() || t.len() > 10 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// True when `reply` is the normal answer to a get (items then `END`), false for an error.
pub fn is_get_reply(reply: &[u8]) -> bool {
    reply.starts_with(b"VALUE ") || reply == b"END\r\n"
}

/// True for `ERROR`, `CLIENT_ERROR ...` and `SERVER_ERROR ...`: the replies memcached sends
/// even for `noreply` requests.
pub fn is_error_reply(reply: &[u8]) -> bool {
    reply.starts_with(b"ERROR")
        || reply.starts_with(b"CLIENT_ERROR")
        || reply.starts_with(b"SERVER_ERROR")
}

/// One `VALUE` item of a get reply: where its key is and where the whole item is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub key: std::ops::Range<usize>,
    pub item: std::ops::Range<usize>,
}

/// The items of a complete get reply (as framed by [`Framer`]), in order. Stops at `END`
/// or at anything that is not an item.
pub fn get_items(reply: &[u8]) -> Vec<Item> {
    let mut items = Vec::new();
    let mut pos = 0;
    while reply[pos..].starts_with(b"VALUE ") {
        let Some(nl) = memchr(b'\n', &reply[pos..]) else {
            break;
        };
        let line = trim_cr(&reply[pos..pos + nl]);
        let key_start = pos + 6;
        let key_len = line[6..]
            .iter()
            .position(|&b| b == b' ')
            .unwrap_or(line.len() - 6);
        let Some(bytes) = token(line, 3).and_then(parse_len) else {
            break;
        };
        let end = pos + nl + 1 + bytes + 2;
        if end > reply.len() {
            break;
        }
        items.push(Item {
            key: key_start..key_start + key_len,
            item: pos..end,
        });
        pos = end;
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_all(stream: &[u8]) -> Vec<Vec<u8>> {
        let mut f = Framer::new();
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            match f.next(&stream[start..]) {
                Frame::Complete(n) => {
                    out.push(stream[start..start + n].to_vec());
                    start += n;
                }
                Frame::Incomplete(_) => break,
                Frame::Invalid => panic!("invalid at {start}"),
            }
        }
        assert_eq!(start, stream.len(), "left over bytes");
        out
    }

    #[test]
    fn frames_each_reply_kind() {
        let replies: Vec<&[u8]> = vec![
            b"STORED\r\n",
            b"VALUE a 0 3\r\nabc\r\nVALUE bb 5 0 77\r\n\r\nEND\r\n",
            b"END\r\n",
            b"VA 2 f0 kfoo\r\nhi\r\n",
            b"HD c5\r\n",
            b"EN\r\n",
            b"MN\r\n",
            b"12345\r\n",
            b"SERVER_ERROR out of memory storing object\r\n",
            b"VALUE x 0 5\r\nEND\r\n\r\nEND\r\n",
            b"ME k exp=-1 la=3 cas=2 fetch=no cls=1 size=63\r\n",
        ];
        let stream: Vec<u8> = replies.concat();
        let got = frame_all(&stream);
        assert_eq!(got, replies.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
    }

    #[test]
    fn incomplete_until_whole_and_knows_the_size() {
        let reply = b"VALUE k 0 10\r\n0123456789\r\nEND\r\n";
        for cut in 0..reply.len() {
            let mut f = Framer::new();
            match f.next(&reply[..cut]) {
                Frame::Incomplete(Some(n)) => assert_eq!(n, 26),
                Frame::Incomplete(None) => {}
                other => panic!("cut {cut}: {other:?}"),
            }
        }
        assert_eq!(Framer::new().next(reply), Frame::Complete(reply.len()));
    }

    #[test]
    fn garbage_is_invalid() {
        assert_eq!(Framer::new().next(b"VALUE k 0 x\r\n"), Frame::Invalid);
        assert_eq!(
            Framer::new().next(b"VALUE k 0 1\r\nabc\r\n"),
            Frame::Invalid
        );
        assert_eq!(
            Framer::new().next(&vec![b'x'; MAX_REPLY_LINE + 1]),
            Frame::Invalid
        );
        assert_eq!(Framer::new().next(b"VA x\r\n"), Frame::Invalid);
    }

    #[test]
    fn items_of_a_get_reply() {
        let r = b"VALUE a 0 3\r\nabc\r\nVALUE bb 5 0 77\r\n\r\nEND\r\n";
        let items = get_items(r);
        assert_eq!(items.len(), 2);
        assert_eq!(&r[items[0].key.clone()], b"a");
        assert_eq!(&r[items[0].item.clone()], b"VALUE a 0 3\r\nabc\r\n");
        assert_eq!(&r[items[1].key.clone()], b"bb");
        assert_eq!(&r[items[1].item.clone()], b"VALUE bb 5 0 77\r\n\r\n");
        assert!(get_items(b"END\r\n").is_empty());
        assert!(is_get_reply(r) && is_get_reply(b"END\r\n"));
        assert!(!is_get_reply(b"SERVER_ERROR x\r\n"));
        assert!(is_error_reply(b"CLIENT_ERROR bad\r\n") && !is_error_reply(b"STORED\r\n"));
    }

    fn resp_frame_all(stream: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        // Feed growing prefixes, as reads would, and frame what is complete.
        let mut f = RespFramer::default();
        let mut out = Vec::new();
        let mut start = 0;
        let mut end = 0;
        while start < stream.len() {
            end = (end + chunk).min(stream.len());
            loop {
                match f.next(&stream[start..end]) {
                    Frame::Complete(n) => {
                        out.push(stream[start..start + n].to_vec());
                        start += n;
                    }
                    Frame::Incomplete(Some(t)) => {
                        assert!(start + t > end, "hint {t} already satisfied");
                        break;
                    }
                    Frame::Incomplete(None) => break,
                    Frame::Invalid => panic!("invalid at {start}"),
                }
            }
            if end == stream.len() && start < stream.len() {
                panic!("left over bytes");
            }
        }
        out
    }

    #[test]
    fn resp_frames_each_reply_kind_in_any_chunking() {
        let replies: Vec<&[u8]> = vec![
            b"+OK\r\n",
            b"-ERR wrong\r\n",
            b":42\r\n",
            b"$5\r\nhello\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n$1\r\na\r\n$-1\r\n*2\r\n:1\r\n+x\r\n",
            b"$0\r\n\r\n",
        ];
        let stream: Vec<u8> = replies.concat();
        for chunk in [1, 2, 3, 7, 1000] {
            let got = resp_frame_all(&stream, chunk);
            assert_eq!(got, replies.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn resp_bulk_size_is_announced_and_garbage_refused() {
        let mut f = RespFramer::default();
        assert_eq!(f.next(b"$10\r\nab"), Frame::Incomplete(Some(17)));
        let mut f = RespFramer::default();
        assert_eq!(
            f.next(b"*2\r\n$1\r\na\r\n$4\r\nx"),
            Frame::Incomplete(Some(21))
        );
        assert_eq!(
            f.next(b"*2\r\n$1\r\na\r\n$4\r\nwxyz\r\n"),
            Frame::Complete(21)
        );
        assert_eq!(RespFramer::default().next(b"?x\r\n"), Frame::Invalid);
        assert_eq!(RespFramer::default().next(b"*x\r\n"), Frame::Invalid);
        assert_eq!(RespFramer::default().next(b"$3\r\nabcde"), Frame::Invalid);
        assert_eq!(
            RespFramer::default().next(&vec![b'+'; MAX_REPLY_LINE + 1]),
            Frame::Invalid
        );
    }

    proptest! {
        /// Any split of a stream of well-formed replies frames to the same replies.
        #[test]
        fn split_reads_frame_the_same(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6),
            cut in 0usize..400,
        ) {
            let mut stream = Vec::new();
            let mut expect = Vec::new();
            let mut get = Vec::new();
            for (i, v) in values.iter().enumerate() {
                get.extend_from_slice(format!("VALUE k{i} 0 {}\r\n", v.len()).as_bytes());
                get.extend_from_slice(v);
                get.extend_from_slice(b"\r\n");
                let mut va = format!("VA {} t\r\n", v.len()).into_bytes();
                va.extend_from_slice(v);
                va.extend_from_slice(b"\r\n");
                expect.push(va);
            }
            get.extend_from_slice(b"END\r\n");
            expect.insert(0, get);
            expect.push(b"STORED\r\n".to_vec());
            for e in &expect { stream.extend_from_slice(e); }
            let cut = cut.min(stream.len());
            // Feed the first `cut` bytes, then everything: same result as all at once.
            let mut f = Framer::new();
            let first = f.next(&stream[..cut]);
            prop_assert!(first != Frame::Invalid);
            let mut got = Vec::new();
            let mut start = 0;
            while let Frame::Complete(n) = f.next(&stream[start..]) {
                got.push(stream[start..start + n].to_vec());
                start += n;
            }
            prop_assert_eq!(got, expect);
        }
    }
}
