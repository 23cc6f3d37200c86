//! The smallest HTTP/1.1 server a Prometheus scrape needs: one thread, one connection at a
//! time, `GET /metrics` (or `HEAD`) answered with a freshly rendered body, then the
//! connection closes. Hand-written rather than a crate: one fixed endpoint, blocking I/O
//! on a thread of its own, nothing on the request path of the cache.
//!
//! A client gets `TIMEOUT` in all to send its request head (at most `HEAD_MAX` bytes), and
//! `TIMEOUT` to read the answer, so a stuck or trickling scraper delays the next scrape but
//! never holds the thread.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::exposition::CONTENT_TYPE;

const TIMEOUT: Duration = Duration::from_secs(5);
const HEAD_MAX: usize = 8 * 1024;
const LINGER: Duration = Duration::from_millis(200);

/// Why the metrics endpoint could not start.
#[derive(Debug)]
pub enum Error {
    Address { addr: String, source: io::Error },
    Listen { addr: String, source: io::Error },
    Spawn(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Address { addr, source } => {
                write!(f, "invalid metrics address '{addr}': {source}")
            }
            Error::Listen { addr, source } => {
                write!(f, "cannot listen for metrics on {addr}: {source}")
            }
            Error::Spawn(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Address { source, .. } | Error::Listen { source, .. } | Error::Spawn(source) => {
                Some(source)
            }
        }
    }
}

/// Binds the metrics address (`HOST:PORT`, `[V6]:PORT`).
pub fn bind(addr: &str) -> Result<TcpListener, Error> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|source| Error::Address {
            addr: addr.into(),
            source,
        })?
        .collect();
    TcpListener::bind(&addrs[..]).map_err(|source| Error::Listen {
        addr: addr.into(),
        source,
    })
}

/// Serves `render()` on `/metrics` from a thread named `name` for the life of the process.
pub fn spawn(
    listener: TcpListener,
    name: &str,
    render: impl Fn() -> String + Send + 'static,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = answer(conn, &render);
            }
        })
        .map(|_| ())
        .map_err(Error::Spawn)
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics { head_only: bool },
    NotFound,
    BadMethod,
    Bad,
}

fn parse(head: &[u8]) -> Ask {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Ask::Bad;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ask::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Ask::Bad;
    }
    let path = target.split('?').next().unwrap_or("");
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Ask::BadMethod,
    };
    if path == "/metrics" {
        Ask::Metrics { head_only }
    } else {
        Ask::NotFound
    }
}

/// Reads up to the end of the request head (the blank line), within `TIMEOUT` in all.
fn read_head(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let deadline = Instant::now() + TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if head.len() >= HEAD_MAX || left.is_zero() {
            return None;
        }
        conn.set_read_timeout(Some(left)).ok()?;
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    Some(head)
}

fn answer(mut conn: TcpStream, render: &impl Fn() -> String) -> std::io::Result<()> {
    conn.set_write_timeout(Some(TIMEOUT))?;
    let ask = match read_head(&mut conn) {
        Some(head) => parse(&head),
        None => Ask::Bad,
    };
    let (status, extra, body, head_only) = match ask {
        Ask::Metrics { head_only } => ("200 OK", "", render(), head_only),
        Ask::NotFound => (
            "404 Not Found",
            "",
            "only /metrics is served here\n".into(),
            false,
        ),
        Ask::BadMethod => (
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            String::new(),
            false,
        ),
        Ask::Bad => ("400 Bad Request", "", String::new(), false),
    };
    let ctype = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    conn.write_all(&out)?;
    // Closing with request bytes unread would reset the connection and could drop the
    // answer on the client's side: stop writing, then drain briefly.
    conn.shutdown(std::net::Shutdown::Write)?;
    conn.set_read_timeout(Some(LINGER))?;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < 64 * 1024 {
        match conn.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ask::Metrics { head_only: false }
        );
        assert_eq!(
            parse(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Ask::Metrics { head_only: true }
        );
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Ask::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Ask::BadMethod);
        assert_eq!(parse(b"GET /metrics\r\n\r\n"), Ask::Bad);
        assert_eq!(parse(b"\xff\xfe\r\n\r\n"), Ask::Bad);
    }

    fn get(addr: std::net::SocketAddr, req: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(req).unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn serves_and_refuses_over_tcp() {
        let l = bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        spawn(l, "test-metrics", || "up 1\n".to_string()).unwrap();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 5\r\n") && ok.ends_with("\r\n\r\nup 1\n"));
        let nf = get(addr, b"GET /nope HTTP/1.1\r\n\r\n");
        assert!(nf.starts_with("HTTP/1.1 404"));
        let big = [b'a'; HEAD_MAX + 10];
        assert!(get(addr, &big).starts_with("HTTP/1.1 400"));
    }
}
