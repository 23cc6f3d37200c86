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
    /// Meta `mg KEY v c`: does the item hold `token`, and under which CAS value?
    CheckToken { token: &'t [u8] },
    /// Meta `md KEY C<cas>`: deletes the item only if nothing changed it since it had `cas`.
    CasDelete { cas: u64 },
}

/// What the server said about one delete or mark-stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// The item holds the token asked about; its CAS value.
    Holds { cas: u64 },
    /// The item holds something else (`mg`), or changed since (`md C`: `EX`).
    Changed,
}

impl Reply {
    /// Whether the key is settled: done, or refused for good.
    pub fn settled(self) -> bool {
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
                    self.wbuf.extend_from_slice(b" v c\r\n");
                }
                Command::CasDelete { cas } => {
                    self.wbuf.extend_from_slice(b"md ");
                    self.wbuf.extend_from_slice(k);
                    self.wbuf
                        .extend_from_slice(format!(" C{cas}\r\n").as_bytes());
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
    if let (Command::CheckToken { token }, Some(rest)) = (cmd, frame.strip_prefix(b"VA ")) {
        return parse_token(token, rest);
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
        // What memcached before 1.6 answers to any command it does not know.
        (
            Command::MarkStale { .. } | Command::CheckToken { .. } | Command::CasDelete { .. },
            b"ERROR",
        ) => Reply::NoMeta,
        (_, l) if l.starts_with(b"CLIENT_ERROR") => Reply::ClientError,
        _ => Reply::Failed,
    }
}

/// `<len> <flags>\r\n<value>` of an `mg KEY v c` hit (`VA ` already gone): whether the value
/// is `token`, with the item's CAS value; `Failed` when the reply lacks what was asked.
fn parse_token(token: &[u8], rest: &[u8]) -> Reply {
    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
        return Reply::Failed;
    };
    let (header, value) = (&rest[..nl], &rest[nl + 1..]);
    let header = header.strip_suffix(b"\r").unwrap_or(header);
    let cas = header
        .split(|&b| b == b' ')
        .skip(1)
        .find_map(|f| f.strip_prefix(b"c"))
        .and_then(|c| std::str::from_utf8(c).ok()?.parse::<u64>().ok());
    match cas {
        Some(cas) if value == token => Reply::Holds { cas },
        Some(_) => Reply::Changed,
        None => Reply::Failed,
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
        let t = |f: &[u8]| parse_reply(Command::CheckToken { token: b"ab12" }, f);
        assert_eq!(t(b"VA 4 c77\r\nab12\r"), Reply::Holds { cas: 77 });
        assert_eq!(t(b"VA 4 c77\r\nab13\r"), Reply::Changed);
        assert_eq!(t(b"VA 1 c9\r\n1\r"), Reply::Changed);
        // No CAS value: cannot be compared-and-deleted.
        assert_eq!(t(b"VA 4\r\nab12\r"), Reply::Failed);
        assert_eq!(t(b"EN\r"), Reply::NotFound);
        assert_eq!(t(b"ERROR\r"), Reply::NoMeta);
        let c = |l: &[u8]| parse_reply(Command::CasDelete { cas: 77 }, l);
        assert_eq!(c(b"HD\r"), Reply::Deleted);
        assert_eq!(c(b"EX\r"), Reply::Changed);
        assert_eq!(c(b"NF\r"), Reply::NotFound);
        assert_eq!(c(b"ERROR\r"), Reply::NoMeta);
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
        let release: [(&[u8], Command); 3] = [
            (b"rm:a", Command::CheckToken { token: b"t1" }),
            (b"rm:b", Command::CheckToken { token: b"t2" }),
            (b"rm:a", Command::CasDelete { cas: 5 }),
        ];
        let (got, err) = answered_by(&release, b"VA 2 c5\r\nt1\r\nEN\r\nEX\r\n").await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            got,
            [Reply::Holds { cas: 5 }, Reply::NotFound, Reply::Changed]
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
