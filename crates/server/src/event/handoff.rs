//! Sockets on their way to a worker: from the acceptor, or an idle connection from another
//! worker (see `placement`), and the waker that tells the worker to look.

use std::sync::Arc;

use mio::net::{TcpStream, UnixStream};
use mio::{Token, Waker};

use crate::shared::ConnInfo;

/// The token of a worker's waker in its poll.
pub const WAKER: Token = Token(usize::MAX);

/// A socket handed from the acceptor to a worker.
pub enum Incoming {
    /// Socket and the listener's name.
    Tcp(TcpStream, Arc<str>),
    /// As `Tcp`, from a TLS listener (`-Z`).
    Tls(TcpStream, Arc<str>),
    Unix(UnixStream, Arc<str>),
    /// An idle connection another worker handed over (see `placement`).
    Moved(Moved),
}

/// An idle connection on its way between workers: no buffered bytes, no pending replies;
/// the near-cache listener its reads are tracked for goes with it (`Conn::tracked`).
pub struct Moved {
    stream: TcpStream,
    info: ConnInfo,
    tracked: u32,
}

impl Moved {
    pub fn new(stream: TcpStream, info: ConnInfo, tracked: u32) -> Moved {
        Moved {
            stream,
            info,
            tracked,
        }
    }

    pub fn into_parts(self) -> (TcpStream, ConnInfo, u32) {
        (self.stream, self.info, self.tracked)
    }
}

/// Wakes a worker so it picks up new connections or notices shutdown.
pub fn wake(w: &Waker) {
    let _ = w.wake();
}
