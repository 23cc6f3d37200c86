//! A connection of the io_uring worker with the kernel operations under way on it, kept
//! small: there is one per open connection.

use crate::io::conn::Conn;

/// Replies handed to the kernel as one sendmsg: the reply buffer, a large value from the
/// item's own buffer and the bytes after it (see `conn::Unsent`). Boxed so the kernel sees a
/// stable address however the connection table moves.
pub(super) struct Gather {
    pub(super) iov: [libc::iovec; 3],
    pub(super) hdr: libc::msghdr,
}

/// A connection and the kernel operations under way on it.
pub(super) struct Slot {
    pub(super) conn: Conn,
    /// A multishot receive is armed (until its last completion, without F_MORE).
    pub(super) recv_armed: bool,
    /// Its cancel was asked for (the reply backlog reached `PAUSE_AT`).
    pub(super) recv_pausing: bool,
    /// A send is under way; `conn.wbuf` from `head_sent` and `conn.unsent` are the kernel's.
    pub(super) sending: bool,
    /// Bytes at the front of `conn.wbuf` already sent.
    pub(super) head_sent: u32,
    /// The peer closed its side or the socket failed: close once replies are out.
    pub(super) eof: bool,
    /// Closed and counted; kept only until the kernel is done with its operations.
    pub(super) closed: bool,
    /// Queued to be served this turn.
    pub(super) queued: bool,
    /// In `UringWorker::yielded`, to be served again next turn.
    pub(super) yielded: bool,
    /// Its receive is being cancelled to hand it, idle, to this worker (`lifecycle::plan_moves`).
    /// (u16: every idle connection has this field; workers past 65,535 are not moved to.)
    pub(super) moving_to: Option<u16>,
    pub(super) gather: Option<Box<Gather>>,
}

impl Slot {
    pub(super) fn new(conn: Conn) -> Slot {
        Slot {
            conn,
            recv_armed: false,
            recv_pausing: false,
            sending: false,
            head_sent: 0,
            eof: false,
            closed: false,
            queued: false,
            yielded: false,
            moving_to: None,
            gather: None,
        }
    }

    /// The kernel still holds operations on this connection.
    pub(super) fn busy(&self) -> bool {
        self.recv_armed || self.sending
    }
}

#[cfg(test)]
mod slot_size {
    /// A `Slot` per open connection (the `Conn` and the ring's state): see conn.rs's test.
    #[test]
    fn per_connection_slot_stays_small() {
        let size = std::mem::size_of::<super::Slot>();
        eprintln!("Slot: {size} bytes");
        assert!(size <= 144, "Slot grew to {size} bytes");
    }
}
