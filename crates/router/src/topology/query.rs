//! One short blocking conversation with a Redis node or Sentinel: connect, authenticate,
//! send commands, read their replies. For the watchers and start-up, never the workers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use proto::resp::cluster::NodeAddr;
use proto::resp::{reply_len, write_command};

/// The most a discovery reply may take (a CLUSTER SHARDS of a thousand nodes is < 1 MB).
const MAX_REPLY: usize = 16 << 20;

/// An open conversation with one node.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline_each: Duration,
}

/// The first address `addr` resolves to.
pub fn resolve(addr: &NodeAddr) -> Result<SocketAddr, String> {
    (addr.host.as_str(), addr.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{addr}: cannot resolve"))
}

impl Conn {
    /// Connects to `addr` and, given `auth` (`(user, password)`), authenticates.
    pub fn open(
        addr: &NodeAddr,
        auth: Option<(Option<&str>, &str)>,
        timeout: Duration,
    ) -> Result<Conn, String> {
        let sock = resolve(addr)?;
        let stream =
            TcpStream::connect_timeout(&sock, timeout).map_err(|e| format!("{addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
            deadline_each: timeout,
        };
        if let Some(auth) = auth {
            let mut req = Vec::new();
            crate::worker::redis_handshake(Some(auth), 0, &mut req);
            let reply = conn.ask_raw(&req).map_err(|e| format!("{addr}: {e}"))?;
            if reply.first() == Some(&b'-') {
                return Err(format!("{addr}: AUTH refused: {}", text_of(&reply)));
            }
        }
        Ok(conn)
    }

    /// Sends one command, returns its whole reply.
    pub fn ask(&mut self, args: &[&[u8]]) -> Result<Vec<u8>, String> {
        let mut req = Vec::new();
        write_command(&mut req, args.len(), args.iter().copied());
        self.ask_raw(&req)
    }

    fn ask_raw(&mut self, req: &[u8]) -> Result<Vec<u8>, String> {
        self.stream
            .set_write_timeout(Some(self.deadline_each))
            .map_err(|e| e.to_string())?;
        self.stream.write_all(req).map_err(|e| e.to_string())?;
        self.next_reply(self.deadline_each)?
            .ok_or_else(|| "timed out waiting for a reply".to_owned())
    }

    /// The next reply the node sends within `wait` (None: none came), e.g. a pub/sub message.
    pub fn next_reply(&mut self, wait: Duration) -> Result<Option<Vec<u8>>, String> {
        let until = Instant::now() + wait;
        loop {
            match reply_len(&self.buf) {
                Ok(Some(n)) => {
                    let reply = self.buf[..n].to_vec();
                    self.buf.drain(..n);
                    return Ok(Some(reply));
                }
                Ok(None) if self.buf.len() > MAX_REPLY => {
                    return Err(format!("reply larger than {MAX_REPLY} bytes"))
                }
                Ok(None) => {}
                Err(e) => return Err(format!("invalid reply: {e:?}")),
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".to_owned()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// An error reply's text (without `-` and CRLF), or the reply as text.
pub fn text_of(reply: &[u8]) -> String {
    let body = reply.strip_prefix(b"-").unwrap_or(reply);
    let body = body.strip_suffix(b"\r\n").unwrap_or(body);
    String::from_utf8_lossy(body).into_owned()
}
