//! One thread per server asks it for its stats every interval and publishes its row, so a
//! slow or dead host never holds up the others or the screen.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::rates::{Health, Row, Sample};
use crate::stats;
use crate::targets::{Addr, Target};

/// A reply larger than this is not a stats reply (a misdirected port, say): give up on it.
const MAX_REPLY: usize = 4 << 20;

/// The latest row of every server, in the order the targets were given.
pub type Rows = Arc<Mutex<Vec<Row>>>;

/// Starts a poller thread per target; they run until the process exits.
pub fn start(targets: &[Target], interval: Duration) -> Rows {
    let rows: Rows = Arc::new(Mutex::new(
        targets
            .iter()
            .map(|t| Row::empty(&t.label, Health::Waiting))
            .collect(),
    ));
    for (slot, target) in targets.iter().enumerate() {
        let (target, rows) = (target.clone(), rows.clone());
        thread::Builder::new()
            .name(format!("top-{}", target.label))
            .spawn(move || poll_forever(&target, slot, interval, &rows))
            .expect("spawn a poller thread");
    }
    rows
}

fn poll_forever(target: &Target, slot: usize, interval: Duration, rows: &Rows) {
    // A connection is kept between polls (it shows as one of the server's connections).
    let mut conn: Option<Box<dyn Stream>> = None;
    let mut prev: Option<Sample> = None;
    let timeout = interval.clamp(Duration::from_millis(200), Duration::from_secs(2));
    loop {
        let started = Instant::now();
        let row = match poll_once(target, &mut conn, timeout) {
            Ok(sample) => {
                let row = Row::up(&target.label, prev.as_ref(), &sample);
                prev = Some(sample);
                row
            }
            Err(why) => {
                conn = None;
                prev = None;
                Row::empty(&target.label, Health::Down(why.to_string()))
            }
        };
        if let Ok(mut rows) = rows.lock() {
            rows[slot] = row;
        }
        thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

fn connect(addr: &Addr, timeout: Duration) -> std::io::Result<Box<dyn Stream>> {
    match addr {
        Addr::Tcp { host, port } => {
            let mut last = None;
            for sa in (host.as_str(), *port).to_socket_addrs()? {
                match TcpStream::connect_timeout(&sa, timeout) {
                    Ok(s) => {
                        s.set_read_timeout(Some(timeout))?;
                        s.set_write_timeout(Some(timeout))?;
                        s.set_nodelay(true)?;
                        return Ok(Box::new(s));
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| std::io::Error::other("no address")))
        }
        Addr::Unix(path) => {
            let s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            Ok(Box::new(s))
        }
    }
}

fn poll_once(
    target: &Target,
    conn: &mut Option<Box<dyn Stream>>,
    timeout: Duration,
) -> Result<Sample, PollError> {
    if conn.is_none() {
        *conn = Some(connect(&target.addr, timeout)?);
    }
    let stream = conn.as_mut().expect("connected above");
    let general = ask(stream, "stats")?;
    let general = stats::parse_general(&general).ok_or(PollError::NotMemcached)?;
    let at = Instant::now();
    // Plain memcached answers these with ERROR: the figures then show as "-".
    let p99_us = stats::parse_p99(&ask(stream, "stats latency")?);
    let hot_keys = stats::parse_hotkeys(&ask(stream, "stats hotkeys")?);
    Ok(Sample {
        at,
        general,
        p99_us,
        hot_keys,
    })
}

/// Sends one command and reads its reply: lines up to `END`, or a single error line.
fn ask(stream: &mut Box<dyn Stream>, command: &str) -> Result<String, PollError> {
    stream.write_all(format!("{command}\r\n").as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !reply_complete(&reply) {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(PollError::Closed);
        }
        reply.extend_from_slice(&buf[..n]);
        if reply.len() > MAX_REPLY {
            return Err(PollError::TooLarge);
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether a reply is whole: ends with an `END` line, or is one error line.
fn reply_complete(reply: &[u8]) -> bool {
    if reply == b"END\r\n" || reply.ends_with(b"\r\nEND\r\n") {
        return true;
    }
    let one_line = reply.ends_with(b"\r\n") && !reply[..reply.len() - 2].contains(&b'\n');
    one_line
        && [&b"ERROR"[..], b"CLIENT_ERROR", b"SERVER_ERROR"]
            .iter()
            .any(|p| reply.starts_with(p))
}

/// Why a server shows as down.
#[derive(Debug)]
enum PollError {
    Io(std::io::Error),
    /// It answered `stats` without STAT lines.
    NotMemcached,
    Closed,
    TooLarge,
}

impl From<std::io::Error> for PollError {
    fn from(e: std::io::Error) -> Self {
        PollError::Io(e)
    }
}

/// A short reason for the screen: "connection refused", "timed out", ...
impl std::fmt::Display for PollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::io::ErrorKind::*;
        match self {
            PollError::Io(e) => match e.kind() {
                ConnectionRefused => f.write_str("connection refused"),
                TimedOut | WouldBlock => f.write_str("timed out"),
                ConnectionReset => f.write_str("connection reset"),
                _ => write!(f, "{e}"),
            },
            PollError::NotMemcached => f.write_str("not a memcached server (no STAT lines)"),
            PollError::Closed => f.write_str("connection closed"),
            PollError::TooLarge => f.write_str("reply too large"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reply_complete;

    #[test]
    fn replies_end_at_end_or_an_error_line() {
        assert!(reply_complete(b"END\r\n"));
        assert!(reply_complete(b"STAT a 1\r\nEND\r\n"));
        assert!(reply_complete(b"ERROR\r\n"));
        assert!(reply_complete(b"CLIENT_ERROR bad command line format\r\n"));
        assert!(!reply_complete(b"STAT a 1\r\n"));
        assert!(!reply_complete(b"STAT a 1\r\nEN"));
        assert!(!reply_complete(b"ERR"));
        // A key named END inside a hot-key list is not the end.
        assert!(!reply_complete(b"STAT ENDX 1\r\n"));
    }
}
