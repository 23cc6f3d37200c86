//! One connection to a memcached server (or a `memfleet route` listener) that pipelines
//! `delete KEY\r\n` (or mark-stale `md KEY I T<ttl>\r\n`, or the two halves of a remote
//! marker's compare-and-delete) commands and reads their replies back in order, framed by `proto::response::Framer`: a reply the command cannot get ends
//! the connection.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::{timeout_at, Instant};

use proto::response::{AskedKeys, Expect, Frame, Framer};

use crate::config::Addr;

/// What is sent for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'t> {
    /// `delete KEY`.
    Delete,
    /// Meta `md KEY I T<ttl>`: the item stays, marked stale, for at most `ttl` seconds; the
    /// next meta reader wins the refill (`W`), the others get the stale value (`X`, `Z`).
    MarkStale { ttl: u32 },
    /// Meta `mg KEY v c t`: which of `tokens` does the item (space-separated tokens) hold,
    /// under which CAS value, with which TTL, and which tokens besides?
    CheckToken { tokens: &'t [&'t [u8]] },
    /// Meta `md KEY C<cas>`: deletes the item only if nothing changed it since it had `cas`.
    CasDelete { cas: u64 },
    /// Meta `ms KEY <len> C<cas> T<ttl>`: stores `value` only if nothing changed the item
    /// since it had `cas`.
    CasStore { cas: u64, ttl: i64, value: &'t [u8] },
}

/// What the server said about one delete or mark-stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `DELETED`, or `HD` to a mark-stale (the item is now stale).
    Deleted,
    /// `NOT_FOUND`, `NF`.
    NotFound,
    /// `CLIENT_ERROR ...`: the server refuses the key; sending it again will not help.
    ClientError,
    /// `SERVER_ERROR ...` or `ERROR`: the delete may not have happened
    /// (a router answers this when the backend is down), so it is retried.
    Failed,
    /// `ERROR` to a meta command: a server without them (memcached before 1.6). A mark-stale
    /// is sent again as a delete.
    NoMeta,
    /// The item holds `found` of the tokens asked about: its CAS value, its TTL (`-1`: none),
    /// and the other tokens it holds (each preceded by a space).
    Holds {
        cas: u64,
        ttl: i64,
        others: Vec<u8>,
        found: usize,
    },
    /// The item holds none of the tokens (`mg`), or changed since (`md C`, `ms C`: `EX`).
    Changed,
}

impl Reply {
    /// Whether the key is settled: done, or refused for good.
    pub fn settled(&self) -> bool {
        !matches!(self, Reply::Failed | Reply::NoMeta)
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

pub struct Conn {
    stream: Stream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

impl Conn {
    pub async fn connect(addr: &Addr, limit: Duration) -> io::Result<Conn> {
        let deadline = Instant::now() + limit;
        let stream = match addr {
            Addr::Tcp(a) => {
                let s = timeout_at(deadline, TcpStream::connect(a.as_str()))
                    .await
                    .map_err(|_| timed_out("connect"))??;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            Addr::Unix(p) => Stream::Unix(
                timeout_at(deadline, UnixStream::connect(p))
                    .await
                    .map_err(|_| timed_out("connect"))??,
            ),
        };
        Ok(Conn {
            stream,
            rbuf: Vec::with_capacity(64 * 1024),
            wbuf: Vec::with_capacity(64 * 1024),
        })
    }

    async fn write_all(&mut self) -> io::Result<()> {
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(&self.wbuf).await,
            Stream::Unix(s) => s.write_all(&self.wbuf).await,
        }
    }

    async fn read_more(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = match &mut self.stream {
            Stream::Tcp(s) => s.read(&mut chunk).await?,
            Stream::Unix(s) => s.read(&mut chunk).await?,
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        self.rbuf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Writes one command per key in a single write, then reads one reply per key.
    /// Returns the replies received, in key order; on an error or at the deadline the
    /// replies so far come back with the error, and the connection must be dropped.
    pub async fn send_all(
        &mut self,
        keys: &[(&[u8], Command<'_>)],
        limit: Duration,
    ) -> (Vec<Reply>, Option<io::Error>) {
        let deadline = Instant::now() + limit;
        self.wbuf.clear();
        for (k, cmd) in keys {
            match cmd {
                Command::Delete => {
                    self.wbuf.extend_from_slice(b"delete ");
                    self.wbuf.extend_from_slice(k);
                    self.wbuf.extend_from_slice(b"\r\n");
                }
                Command::MarkStale { ttl } => {
                    self.wbuf.extend_from_slice(b"md ");
                    self.wbuf.extend_from_slice(k);
                    self.wbuf
                        .extend_from_slice(format!(" I T{ttl}\r\n").as_bytes());
                }
                Command::CheckToken { .. } => {
                    self.wbuf.extend_from_slice(b"mg ");
                    self.wbuf.extend_from_slice(k);
                    self.wbuf.extend_from_slice(b" v c t\r\n");
                }
                Command::CasDelete { cas } => {
                    self.wbuf.extend_from_slice(b"md ");
                    self.wbuf.extend_from_slice(k);
                    self.wbuf
                        .extend_from_slice(format!(" C{cas}\r\n").as_bytes());
                }
                Command::CasStore { cas, ttl, value } => {
                    self.wbuf.extend_from_slice(b"ms ");
                    self.wbuf.extend_from_slice(k);
                    // TTL -1 (none) is memcached's 0.
                    let t = (*ttl).max(0);
                    let head = format!(" {} C{cas} T{t}\r\n", value.len());
                    self.wbuf.extend_from_slice(head.as_bytes());
                    self.wbuf.extend_from_slice(value);
                    self.wbuf.extend_from_slice(b"\r\n");
                }
            }
        }
        let mut replies = Vec::with_capacity(keys.len());
        match timeout_at(deadline, self.write_all()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return (replies, Some(e)),
            Err(_) => return (replies, Some(timed_out("write"))),
        }
        let mut start = 0;
        let mut framer = Framer::new();
        while replies.len() < keys.len() {
            let cmd = keys[replies.len()].1;
            let expect = match cmd {
                Command::CasStore { .. } => Expect::Meta {
                    cmd: *b"ms",
                    quiet: false,
                },
                Command::Delete => Expect::Delete,
                Command::MarkStale { .. } | Command::CasDelete { .. } => Expect::Meta {
                    cmd: *b"md",
                    quiet: false,
                },
                Command::CheckToken { .. } => Expect::Meta {
                    cmd: *b"mg",
                    quiet: false,
                },
            };
            match framer.next(&self.rbuf[start..], expect, AskedKeys::NONE) {
                Frame::Complete(n) => {
                    // Without its `\n`.
                    replies.push(parse_reply(cmd, &self.rbuf[start..start + n - 1]));
                    start += n;
                }
                Frame::Invalid => {
                    // Not a reply to a delete (or a line without end): out of step.
                    let e =
                        io::Error::new(io::ErrorKind::InvalidData, "not a reply to the command");
                    return (replies, Some(e));
                }
                Frame::Incomplete(_) => {
                    self.rbuf.drain(..start);
                    start = 0;
                    match timeout_at(deadline, self.read_more()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return (replies, Some(e)),
                        Err(_) => return (replies, Some(timed_out("waiting for replies"))),
                    }
                }
            }
        }
        self.rbuf.drain(..start);
        (replies, None)
    }
}

/// The reply to `cmd`: its line, or for an `mg` hit its line and value (without the last `\n`).
fn parse_reply(cmd: Command<'_>, frame: &[u8]) -> Reply {
    let frame = frame.strip_suffix(b"\r").unwrap_or(frame);
    if let (Command::CheckToken { tokens }, Some(rest)) = (cmd, frame.strip_prefix(b"VA ")) {
        return parse_tokens(tokens, rest);
    }
    let line = frame;
    match (cmd, line) {
        (Command::Delete, b"DELETED") => Reply::Deleted,
        (Command::Delete, b"NOT_FOUND") => Reply::NotFound,
        // No flag asks for tokens back, so the code comes alone. `EX` cannot come without a
        // `C` flag: it is treated as a failure, as anything unforeseen.
        (Command::MarkStale { .. }, b"HD") => Reply::Deleted,
        (Command::MarkStale { .. }, b"NF") => Reply::NotFound,
        (Command::CheckToken { .. }, b"EN") => Reply::NotFound,
        (Command::CasDelete { .. }, b"HD") => Reply::Deleted,
        (Command::CasDelete { .. }, b"NF") => Reply::NotFound,
        (Command::CasDelete { .. }, b"EX") => Reply::Changed,
        (Command::CasStore { .. }, b"HD") => Reply::Deleted,
        (Command::CasStore { .. }, b"NF") => Reply::NotFound,
        (Command::CasStore { .. }, b"EX" | b"NS") => Reply::Changed,
        // What memcached before 1.6 answers to any command it does not know.
        (
            Command::MarkStale { .. }
            | Command::CheckToken { .. }
            | Command::CasDelete { .. }
            | Command::CasStore { .. },
            b"ERROR",
        ) => Reply::NoMeta,
        (_, l) if l.starts_with(b"CLIENT_ERROR") => Reply::ClientError,
        _ => Reply::Failed,
    }
}

/// `<len> <flags>\r\n<value>` of an `mg KEY v c t` hit (`VA ` already gone): how many of
/// `tokens` the value's space-separated tokens include, with the item's CAS value, TTL and
/// other tokens; `Failed` when the reply lacks what was asked.
fn parse_tokens(tokens: &[&[u8]], rest: &[u8]) -> Reply {
    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
        return Reply::Failed;
    };
    let (header, value) = (&rest[..nl], &rest[nl + 1..]);
    let header = header.strip_suffix(b"\r").unwrap_or(header);
    let flag = |name: u8| {
        header
            .split(|&b| b == b' ')
            .skip(1)
            .find_map(|f| f.strip_prefix(&[name]))
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let cas = flag(b'c').and_then(|c| c.parse::<u64>().ok());
    let ttl = flag(b't').and_then(|t| t.parse::<i64>().ok());
    let (Some(cas), Some(ttl)) = (cas, ttl) else {
        return Reply::Failed;
    };
    // Each token asked about takes one occurrence out (a token is never reused, but a
    // repeat stays).
    let mut wanted: Vec<&[u8]> = tokens.to_vec();
    let mut others = Vec::new();
    for t in value.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
        if let Some(i) = wanted.iter().position(|w| *w == t) {
            wanted.swap_remove(i);
        } else {
            others.push(b' ');
            others.extend_from_slice(t);
        }
    }
    let found = tokens.len() - wanted.len();
    if found > 0 {
        Reply::Holds {
            cas,
            ttl,
            others,
            found,
        }
    } else {
        Reply::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        let d = |l: &[u8]| parse_reply(Command::Delete, l);
        assert_eq!(d(b"DELETED\r"), Reply::Deleted);
        assert_eq!(d(b"NOT_FOUND\r"), Reply::NotFound);
        assert_eq!(
            d(b"CLIENT_ERROR bad command line format\r"),
            Reply::ClientError
        );
        assert_eq!(d(b"SERVER_ERROR no server available\r"), Reply::Failed);
        assert_eq!(d(b"ERROR\r"), Reply::Failed);
        assert_eq!(d(b"HD\r"), Reply::Failed);
        assert!(!Reply::Failed.settled() && Reply::ClientError.settled());
        let m = |l: &[u8]| parse_reply(Command::MarkStale { ttl: 30 }, l);
        assert_eq!(m(b"HD\r"), Reply::Deleted);
        assert_eq!(m(b"NF\r"), Reply::NotFound);
        assert_eq!(m(b"EX\r"), Reply::Failed);
        assert_eq!(m(b"DELETED\r"), Reply::Failed);
        assert_eq!(m(b"ERROR\r"), Reply::NoMeta);
        assert_eq!(
            m(b"CLIENT_ERROR bad command line format\r"),
            Reply::ClientError
        );
        assert_eq!(m(b"SERVER_ERROR out of memory\r"), Reply::Failed);
        assert!(!Reply::NoMeta.settled());
        let t = |f: &[u8]| parse_reply(Command::CheckToken { tokens: &[b"ab12"] }, f);
        let holds = |cas, ttl, others: &[u8]| Reply::Holds {
            cas,
            ttl,
            others: others.to_vec(),
            found: 1,
        };
        assert_eq!(t(b"VA 5 c77 t50\r\n ab12\r"), holds(77, 50, b""));
        assert_eq!(t(b"VA 4 c77 t-1\r\nab12\r"), holds(77, -1, b""));
        assert_eq!(
            t(b"VA 15 c7 t9\r\n ab1 ab12 ab123\r"),
            holds(7, 9, b" ab1 ab123")
        );
        assert_eq!(t(b"VA 10 c7 t9\r\n ab12 ab12\r"), holds(7, 9, b" ab12"));
        // Several releases of one marker at once: each takes its own token out.
        let both: &[&[u8]] = &[b"x1", b"x3", b"x9"];
        assert_eq!(
            parse_reply(
                Command::CheckToken { tokens: both },
                b"VA 9 c4 t8\r\n x1 x2 x3\r"
            ),
            Reply::Holds {
                cas: 4,
                ttl: 8,
                others: b" x2".to_vec(),
                found: 2
            }
        );
        assert_eq!(t(b"VA 5 c77 t50\r\n ab13\r"), Reply::Changed);
        assert_eq!(t(b"VA 1 c9 t5\r\n1\r"), Reply::Changed);
        // No CAS value or TTL: cannot be compared-and-deleted.
        assert_eq!(t(b"VA 4 t5\r\nab12\r"), Reply::Failed);
        assert_eq!(t(b"VA 4 c5\r\nab12\r"), Reply::Failed);
        assert_eq!(t(b"EN\r"), Reply::NotFound);
        assert_eq!(t(b"ERROR\r"), Reply::NoMeta);
        let c = |l: &[u8]| parse_reply(Command::CasDelete { cas: 77 }, l);
        assert_eq!(c(b"HD\r"), Reply::Deleted);
        assert_eq!(c(b"EX\r"), Reply::Changed);
        assert_eq!(c(b"NF\r"), Reply::NotFound);
        assert_eq!(c(b"ERROR\r"), Reply::NoMeta);
        let s = |l: &[u8]| {
            let cmd = Command::CasStore {
                cas: 7,
                ttl: 5,
                value: b" x",
            };
            parse_reply(cmd, l)
        };
        assert_eq!(s(b"HD\r"), Reply::Deleted);
        assert_eq!(s(b"EX\r"), Reply::Changed);
        assert_eq!(s(b"NF\r"), Reply::NotFound);
        assert_eq!(s(b"ERROR\r"), Reply::NoMeta);
    }

    /// Deletes to a peer on a Unix socket that answers with `reply` and then keeps the
    /// connection open: what `delete_all` returns.
    async fn deletes_answered_by(reply: &'static [u8]) -> (Vec<Reply>, Option<io::Error>) {
        answered_by(&[(b"a", Command::Delete), (b"b", Command::Delete)], reply).await
    }

    /// `keys` sent to a peer on a Unix socket that answers with `reply` and then keeps the
    /// connection open: what `send_all` returns.
    async fn answered_by(
        keys: &[(&[u8], Command<'_>)],
        reply: &'static [u8],
    ) -> (Vec<Reply>, Option<io::Error>) {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("memfleet-mc-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let peer = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(reply).await.unwrap();
            let mut sink = [0u8; 1024];
            while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        let addr = Addr::Unix(path.clone());
        let mut conn = Conn::connect(&addr, Duration::from_secs(5)).await.unwrap();
        let out = conn.send_all(keys, Duration::from_secs(5)).await;
        drop(conn);
        peer.await.unwrap();
        let _ = std::fs::remove_file(&path);
        out
    }

    #[tokio::test]
    async fn a_reply_a_delete_cannot_get_ends_the_connection() {
        let (replies, e) = deletes_answered_by(b"DELETED\r\nSTORED\r\n").await;
        assert_eq!(replies, [Reply::Deleted]);
        assert_eq!(e.unwrap().kind(), io::ErrorKind::InvalidData);
        // A line without end is refused once past the framer's bound, not buffered on.
        let mut long = b"SERVER_ERROR ".to_vec();
        long.resize(64 * 1024, b'x');
        let endless: &'static [u8] = Box::leak(long.into_boxed_slice());
        let (replies, e) = deletes_answered_by(endless).await;
        assert!(replies.is_empty());
        assert_eq!(e.unwrap().kind(), io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn mark_stale_replies_are_meta_codes() {
        let stale = Command::MarkStale { ttl: 30 };
        let keys: [(&[u8], Command); 4] = [
            (b"a", stale),
            (b"b", stale),
            (b"rm:a", Command::Delete),
            (b"c", stale),
        ];
        let (replies, e) = answered_by(&keys, b"HD\r\nNF\r\nDELETED\r\nERROR\r\n").await;
        let release: [(&[u8], Command); 4] = [
            (b"rm:a", Command::CheckToken { tokens: &[b"t1"] }),
            (b"rm:b", Command::CheckToken { tokens: &[b"t2"] }),
            (b"rm:a", Command::CasDelete { cas: 5 }),
            (
                b"rm:c",
                Command::CasStore {
                    cas: 6,
                    ttl: 30,
                    value: b" t3",
                },
            ),
        ];
        let (got, err) =
            answered_by(&release, b"VA 6 c5 t30\r\n t1 t3\r\nEN\r\nEX\r\nHD\r\n").await;
        assert!(err.is_none(), "{err:?}");
        let holds = Reply::Holds {
            cas: 5,
            ttl: 30,
            others: b" t3".to_vec(),
            found: 1,
        };
        assert_eq!(
            got,
            [holds, Reply::NotFound, Reply::Changed, Reply::Deleted]
        );
        assert!(e.is_none(), "{e:?}");
        assert_eq!(
            replies,
            [
                Reply::Deleted,
                Reply::NotFound,
                Reply::Deleted,
                Reply::NoMeta
            ]
        );
        // A delete's reply to a mark-stale is out of step.
        let (replies, e) = answered_by(&keys, b"HD\r\nDELETED\r\n").await;
        assert_eq!(replies, [Reply::Deleted]);
        assert_eq!(e.unwrap().kind(), io::ErrorKind::InvalidData);
    }
}
