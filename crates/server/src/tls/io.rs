//! Record I/O on a nonblocking TLS connection, driven by the worker's readiness loop the way
//! `conn::recv_into` and `conn::write_out` serve a plain one: never blocks, and leaves what
//! the socket would not take inside the rustls session (`wants_write`), which the worker
//! treats as unsent replies. `bytes_read`/`bytes_written` count plaintext, as memcached's do.

use std::io::{self, Read, Write};

use rustls::ServerConnection;

use crate::io::unsent::Unsent;
use crate::stats::ThreadStats;

/// A TLS connection's session, and what the last read learnt of its socket.
pub struct TlsSession {
    pub session: ServerConnection,
    /// The last recv returned less than asked: the socket was empty then, and edge-triggered
    /// epoll will report bytes arriving after it, so the recv that would only say EAGAIN is
    /// skipped (as on plain connections).
    drained: bool,
}

impl TlsSession {
    pub fn new(session: ServerConnection) -> TlsSession {
        TlsSession {
            session,
            drained: false,
        }
    }

    /// Bytes may have arrived since the last read: an edge event came while the connection
    /// could not read (it waited for flash reads or for its replies to drain), so the next
    /// read must try the socket.
    pub fn may_have_bytes(&mut self) {
        self.drained = false;
    }
}

/// The connection's socket as rustls reads and writes it.
struct Fd(i32);

/// The socket as rustls reads it, noting a short read.
struct Source {
    fd: i32,
    short: bool,
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: recv writes at most buf.len() bytes into the live buffer.
        let n = unsafe { libc::recv(self.fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.short = (n as usize) < buf.len();
        Ok(n as usize)
    }
}

impl Write for Fd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: send only reads the live buffer.
        let n = unsafe { libc::send(self.0, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // One syscall for all queued records. IoSlice has iovec's layout on unix.
        let count = bufs.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
        // SAFETY: the slices are live for the call; writev only reads them. (SIGPIPE is
        // ignored by the Rust runtime, as for the plain path's writev.)
        let n = unsafe { libc::writev(self.0, bufs.as_ptr().cast(), count) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the records rustls has queued until it has none or the socket pushes back.
fn flush(tls: &mut ServerConnection, fd: i32) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(&mut Fd(fd)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads decrypted bytes into the spare capacity of `buf`, reading and decrypting records
/// (and answering handshake messages) as needed. Ok(0) at the end of the stream;
/// `WouldBlock` once the socket has nothing more and no plaintext is left over.
/// A TLS error (a bad handshake, garbage instead of records) is an `InvalidData` error; a
/// failed handshake counts in `ssl_handshake_errors`. `peer_closed`: the peer's FIN may be
/// queued already and no new event would tell, so the socket is read to its end.
pub fn read(
    s: &mut TlsSession,
    fd: i32,
    buf: &mut Vec<u8>,
    peer_closed: bool,
    stats: &ThreadStats,
) -> io::Result<usize> {
    let tls = &mut s.session;
    loop {
        let state = match tls.process_new_packets() {
            Ok(state) => state,
            Err(e) => {
                if tls.is_handshaking() {
                    stats.ssl_handshake_errors.incr();
                }
                // Tell the peer why (the alert rustls queued); the connection closes anyway.
                let _ = flush(tls, fd);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        };
        flush(tls, fd)?;
        let available = state.plaintext_bytes_to_read();
        if available > 0 {
            let start = buf.len();
            let n = available.min(buf.capacity() - start);
            buf.resize(start + n, 0);
            let got = tls.reader().read(&mut buf[start..]);
            buf.truncate(start + *got.as_ref().unwrap_or(&0));
            return got;
        }
        if state.peer_has_closed() {
            return Ok(0);
        }
        if std::mem::take(&mut s.drained) && !peer_closed {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut source = Source { fd, short: false };
        match tls.read_tls(&mut source) {
            Ok(0) => return Ok(0),
            Ok(_) => s.drained = source.short,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// As `conn::write_out` for a TLS connection: encrypts `head`, then what is left of `unsent`
/// (clearing it once taken), and writes the records as far as the socket takes them now.
/// Returns the bytes of `head` taken; records the socket refused stay queued in `tls`.
pub fn write_out(
    tls: &mut ServerConnection,
    fd: i32,
    head: &[u8],
    unsent: &mut Option<Box<Unsent>>,
    stats: &ThreadStats,
) -> io::Result<usize> {
    let mut head_sent = 0;
    loop {
        let before = (head_sent, unsent.as_deref().map(Unsent::sent));
        // rustls takes plaintext up to its buffer limit, then the socket must drain records.
        while head_sent < head.len() {
            let n = tls.writer().write(&head[head_sent..])?;
            if n == 0 {
                break;
            }
            head_sent += n;
            stats.bytes_written.add(n as u64);
        }
        if head_sent == head.len() {
            while let Some(u) = unsent.as_mut() {
                let n = tls.writer().write(u.rest_contiguous())?;
                if n == 0 {
                    break;
                }
                stats.bytes_written.add(n as u64);
                if u.advance(n) {
                    *unsent = None;
                }
            }
        }
        flush(tls, fd)?;
        let taken_all = head_sent == head.len() && unsent.is_none();
        let stuck = before == (head_sent, unsent.as_deref().map(Unsent::sent));
        // Stuck: rustls takes no plaintext and has no records to send (it would only
        // before the handshake ends, when there are no replies yet).
        if taken_all || stuck || tls.wants_write() {
            return Ok(head_sent);
        }
    }
}
