//! One client connection: its socket and what it holds either way, and the socket I/O.
//!
//! A connection is small: its socket, plus a read buffer only while a request is
//! half-received, and replies only while the socket pushes back. While replies wait, the
//! connection's requests wait too (as in memcached), so one slow reader holds at most about
//! one batch of replies and one large value, which is referenced, not copied.

use std::io;
use std::os::fd::AsRawFd;

use mio::net::{TcpStream, UnixStream};

use crate::flash::reads::FlashWait;
use crate::io::unsent::Unsent;
use crate::stats::ThreadStats;

pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn fd(&self) -> i32 {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
}

/// The protocol a connection speaks: `-B`, or with `-B auto` its first byte (see `batch`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Undecided,
    Text,
    Binary,
}

pub struct Conn {
    pub stream: Stream,
    pub protocol: Protocol,
    /// Holds bytes only while a request is incomplete; otherwise empty with no capacity.
    pub rbuf: Vec<u8>,
    /// Bytes of `rbuf` kept free in front of a large request (`batch::HEADROOM` or 0).
    /// The narrow fields here keep every idle connection small (see the size test below).
    pub front: u8,
    /// Reply bytes the socket did not take yet; they go before `unsent`.
    pub wbuf: Vec<u8>,
    /// Boxed: only a connection sending a large value has one, and every idle one pays for
    /// the field (see the size test below).
    pub unsent: Option<Box<Unsent>>,
    /// Keys of the get at the front of `rbuf` already answered: it paused while its
    /// replies were written (see `get::retrieve`).
    pub resume: u32,
    /// Bytes charged to the store's memory limit for the value being received into `rbuf`:
    /// what has arrived of a request larger than a pooled read buffer (see `batch`); given
    /// back once the request is done or the connection closes.
    pub reserved: u64,
    /// Bytes still to discard (the data block of a refused value).
    pub swallow: usize,
    /// What a few connections hold for a while (boxed to one pointer: every idle
    /// connection pays for the field).
    pub aside: Option<Box<Aside>>,
    /// The near-cache listener this connection's reads are tracked for (`track <id>`): its
    /// `Listener::handle`, 0 for none.
    pub tracked: u32,
    pub last_cmd: u32,
    pub closing: bool,
    pub want_write: bool,
    /// Complete requests wait in `rbuf` (the last batch's replies reached the reply cap).
    pub pending: bool,
    /// The peer shut down its side; read to EOF instead of trusting a short read.
    pub peer_closed: bool,
    /// Closed for a protocol error (memcached's `reason=error` in `watch connevents`).
    pub protocol_error: bool,
    /// Requests this connection may still run in the current turn: set to `-R` when the
    /// worker starts serving it, counted down by `batch` across its reads (memcached's
    /// reqs_per_event).
    pub budget: u32,
    /// Logged in, or neither `-Y` nor `-S`; until then text requests go to `textauth` and
    /// binary ones may only authenticate (SASL).
    pub authenticated: bool,
    /// The TLS session of a connection on a TLS listener (`-Z`); None on a plain one, whose
    /// I/O is only ever this one branch away from the socket.
    pub tls: Option<Box<crate::tls::io::TlsSession>>,
}

/// A connection's state kept aside (`Conn::aside`); a connection speaks one protocol, so
/// it needs one of these at most.
pub enum Aside {
    /// Binary protocol: the reply to a refused value, which memcached sends only once the
    /// value has been discarded (see `binary`).
    AfterSwallow(Vec<u8>),
    /// Text protocol: the flash reads the request at the front of `rbuf` asked for, and those
    /// made (see `flash::reads`).
    Flash(FlashWait),
    /// Text protocol: the connection ran `watch`; it only receives log lines from now on.
    Watch(std::sync::Arc<crate::watch::Watcher>),
}

impl Conn {
    pub fn new(stream: Stream, last_cmd: u32) -> Conn {
        Conn {
            stream,
            protocol: Protocol::Undecided,
            rbuf: Vec::new(),
            front: 0,
            wbuf: Vec::new(),
            unsent: None,
            resume: 0,
            reserved: 0,
            swallow: 0,
            aside: None,
            tracked: 0,
            last_cmd,
            closing: false,
            want_write: false,
            pending: false,
            peer_closed: false,
            protocol_error: false,
            authenticated: true,
            budget: u32::MAX,
            tls: None,
        }
    }

    /// Its request waits for flash reads, or for room to ask for one: nothing runs until
    /// they are back.
    pub fn waits_on_flash(&self) -> bool {
        matches!(self.aside.as_deref(), Some(Aside::Flash(w)) if w.waiting())
    }

    /// The flash reads of its get, if it asked for any.
    pub fn flash_wait(&mut self) -> Option<&mut FlashWait> {
        match self.aside.as_deref_mut() {
            Some(Aside::Flash(w)) => Some(w),
            _ => None,
        }
    }

    /// Its get is done: the reads it asked for (all back) go with it.
    #[inline]
    pub fn end_flash_wait(&mut self) {
        if self.flash_wait().is_some() {
            self.aside = None;
        }
    }

    /// The log queue of a connection that ran `watch`.
    pub fn watcher(&self) -> Option<&std::sync::Arc<crate::watch::Watcher>> {
        match self.aside.as_deref() {
            Some(Aside::Watch(w)) => Some(w),
            _ => None,
        }
    }

    /// Replies wait for the socket: no request is processed until they are written.
    pub fn has_unsent(&self) -> bool {
        !self.wbuf.is_empty()
            || self.unsent.is_some()
            || self.tls.as_ref().is_some_and(|t| t.session.wants_write())
    }

    /// Writes `head` then `unsent` (see `write_out`), through TLS on a TLS connection.
    pub fn write_replies(&mut self, head: &[u8], stats: &ThreadStats) -> io::Result<usize> {
        let fd = self.stream.fd();
        match self.tls.as_deref_mut() {
            None => write_out(fd, head, &mut self.unsent, stats),
            Some(tls) => {
                crate::tls::io::write_out(&mut tls.session, fd, head, &mut self.unsent, stats)
            }
        }
    }

    /// Reads into the spare capacity of `buf` (see `recv_into`), decrypted on a TLS connection.
    pub fn read_into(&mut self, buf: &mut Vec<u8>, stats: &ThreadStats) -> io::Result<usize> {
        let fd = self.stream.fd();
        match self.tls.as_deref_mut() {
            None => recv_into(fd, buf),
            Some(tls) => crate::tls::io::read(tls, fd, buf, self.peer_closed, stats),
        }
    }

    /// Nothing buffered either way and no session state: the connection is just its socket
    /// (another worker can take it over and renegotiate the protocol from its next byte).
    pub fn is_idle(&self) -> bool {
        self.rbuf.is_empty()
            && !self.has_unsent()
            && self.swallow == 0
            && !self.pending
            && !self.closing
            && !self.peer_closed
            && self.authenticated
            && self.aside.is_none()
    }

    /// Raises the charge for the value under way to `bytes` (what has arrived of it, so a
    /// client that announces a value and stalls holds only what it sent). False when the
    /// store has no room, or values under way already hold their share (`Store::reserve`).
    pub fn reserve_to(&mut self, store: &store::Store, bytes: u64) -> bool {
        if bytes <= self.reserved {
            return true;
        }
        if !store.reserve(bytes - self.reserved) {
            return false;
        }
        self.reserved = bytes;
        true
    }

    /// Gives the memory reserved for a value under way back to the store.
    pub fn release_reservation(&mut self, store: &store::Store) {
        if self.reserved > 0 {
            store.unreserve(self.reserved);
            self.reserved = 0;
        }
    }
}

/// Writes `head` and then what is left of `unsent` (clearing it once written) with as few
/// writev calls as the socket takes now; never blocks. Returns the bytes of `head` written.
pub fn write_out(
    fd: i32,
    head: &[u8],
    unsent: &mut Option<Box<Unsent>>,
    stats: &ThreadStats,
) -> io::Result<usize> {
    let mut head_sent = 0;
    loop {
        let (value, tail) = unsent.as_deref().map_or((&[][..], &[][..]), Unsent::rest);
        let parts = [&head[head_sent..], value, tail];
        if parts.iter().all(|p| p.is_empty()) {
            break;
        }
        let n = if unsent.is_some() {
            let iov = parts.map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            });
            // SAFETY: the iovecs point at live, initialised buffers that outlive the call;
            // writev only reads them.
            unsafe { libc::writev(fd, iov.as_ptr(), 3) }
        } else {
            // One buffer: send(2) skips the VFS write path writev takes (measurably cheaper
            // per reply on small requests).
            // SAFETY: the slice is live and initialised for the call; send only reads it.
            unsafe {
                libc::send(
                    fd,
                    parts[0].as_ptr().cast(),
                    parts[0].len(),
                    libc::MSG_NOSIGNAL,
                )
            }
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let n = n as usize;
        stats.bytes_written.add(n as u64);
        let from_head = n.min(head.len() - head_sent);
        head_sent += from_head;
        if let Some(u) = unsent {
            if u.advance(n - from_head) {
                *unsent = None;
            }
        }
    }
    Ok(head_sent)
}

/// Reads into the spare capacity of `buf` with one recv(2).
pub fn recv_into(fd: i32, buf: &mut Vec<u8>) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: recv writes at most spare.len() bytes into memory we own; we only mark as
    // initialised the n bytes it reports written.
    let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised n bytes just past len.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

#[cfg(test)]
mod tests {
    /// Every open connection, idle or not, holds one `Conn`: growth here is paid per idle
    /// connection (bench/idle-conns). Move rarely used state behind a Box instead.
    #[test]
    fn per_connection_state_stays_small() {
        let size = std::mem::size_of::<super::Conn>();
        eprintln!("Conn: {size} bytes");
        assert!(size <= 120, "Conn grew to {size} bytes");
    }
}
