//! One connection to a memcached server (or a `memfleet route` listener) that pipelines
//! `delete KEY\r\n` commands and reads their replies back in order, framed by
//! `proto::response::Framer`: a reply a delete cannot get ends the connection.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::time::{timeout_at, Instant};

use proto::response::{AskedKeys, Expect, Frame, Framer};

use crate::config::Addr;

/// What the server said about one delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Deleted,
    NotFound,
    /// `CLIENT_ERROR ...`: the server refuses the key; sending it again will not help.
    ClientError,
    /// `SERVER_ERROR ...` or `ERROR`: the delete may not have happened
    /// (a router answers this when the backend is down), so it is retried.
    Failed,
}

impl Reply {
    /// Whether the delete is settled: done, or refused for good.
    pub fn settled(self) -> bool {
        !matches!(self, Reply::Failed)
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

    /// Writes one `delete` per key in a single write, then reads one reply per key.
    /// Returns the replies received, in key order; on an error or at the deadline the
    /// replies so far come back with the error, and the connection must be dropped.
    pub async fn delete_all(
        &mut self,
        keys: &[&[u8]],
        limit: Duration,
    ) -> (Vec<Reply>, Option<io::Error>) {
        let deadline = Instant::now() + limit;
        self.wbuf.clear();
        for k in keys {
            self.wbuf.extend_from_slice(b"delete ");
            self.wbuf.extend_from_slice(k);
            self.wbuf.extend_from_slice(b"\r\n");
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
            match framer.next(&self.rbuf[start..], Expect::Delete, AskedKeys::NONE) {
                Frame::Complete(n) => {
                    // Without its `\n`.
                    replies.push(parse_reply(&self.rbuf[start..start + n - 1]));
                    start += n;
                }
                Frame::Invalid => {
                    // Not a reply to a delete (or a line without end): out of step.
                    let e = io::Error::new(io::ErrorKind::InvalidData, "not a reply to delete");
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

fn parse_reply(line: &[u8]) -> Reply {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match line {
        b"DELETED" => Reply::Deleted,
        b"NOT_FOUND" => Reply::NotFound,
        l if l.starts_with(b"CLIENT_ERROR") => Reply::ClientError,
        _ => Reply::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        assert_eq!(parse_reply(b"DELETED\r"), Reply::Deleted);
        assert_eq!(parse_reply(b"NOT_FOUND\r"), Reply::NotFound);
        assert_eq!(
            parse_reply(b"CLIENT_ERROR bad command line format\r"),
            Reply::ClientError
        );
        assert_eq!(
            parse_reply(b"SERVER_ERROR no server available\r"),
            Reply::Failed
        );
        assert_eq!(parse_reply(b"ERROR\r"), Reply::Failed);
        assert!(!Reply::Failed.settled() && Reply::ClientError.settled());
    }

    /// Deletes to a peer on a Unix socket that answers with `reply` and then keeps the
    /// connection open: what `delete_all` returns.
    async fn deletes_answered_by(reply: &'static [u8]) -> (Vec<Reply>, Option<io::Error>) {
        let path = std::env::temp_dir().join(format!("memfleet-mc-{}.sock", std::process::id()));
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
        let out = conn.delete_all(&[b"a", b"b"], Duration::from_secs(5)).await;
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
}
