//! What every event loop (`worker`, `uring`) does as a connection arrives, is used and
//! closes: building it from a handed-over socket, the `stats conns` registry, the open
//! connection counts, verbose logging and the idle timeout.

use std::sync::atomic::Ordering::SeqCst;

use crate::bufpool::BufPool;
use crate::conn::{Conn, Stream};
use crate::shared::{ConnInfo, Shared};
use crate::stats::ThreadStats;
use crate::worker::Incoming;

/// A connection built from a socket handed to worker `id`, not yet in its loop.
pub struct Arrival {
    pub conn: Conn,
    pub info: ConnInfo,
    /// Handed over by another worker (already counted and logged).
    pub moved: bool,
}

/// Builds the connection for `inc`; None (and the connection uncounted) when its TLS
/// session cannot start.
pub fn arrive(shared: &Shared, id: usize, inc: Incoming, now: u32) -> Option<Arrival> {
    let mut tls = None;
    let (stream, peer, listen, moved_at) = match inc {
        Incoming::Tcp(s, peer, listen) => (Stream::Tcp(s), Some(peer), listen, None),
        Incoming::Tls(s, peer, listen) => {
            let session = shared.tls.as_ref().map(|t| t.accept());
            let Some(Ok(session)) = session else {
                refuse(shared, id);
                return None;
            };
            tls = Some(Box::new(crate::tls::io::TlsSession::new(session)));
            (Stream::Tcp(s), Some(peer), listen, None)
        }
        Incoming::Unix(s, listen) => (Stream::Unix(s), None, listen, None),
        Incoming::Moved(m) => {
            let (stream, i) = m.into_parts();
            (Stream::Tcp(stream), i.peer, i.listen, Some(i.last_cmd))
        }
    };
    let last_cmd = moved_at.unwrap_or(now);
    let mut conn = Conn::new(stream, last_cmd);
    // Only idle, logged-in connections are moved between workers.
    conn.authenticated = moved_at.is_some() || shared.auth.is_none();
    conn.tls = tls;
    let info = ConnInfo {
        fd: conn.stream.fd(),
        peer,
        listen,
        last_cmd,
    };
    Some(Arrival {
        conn,
        info,
        moved: moved_at.is_some(),
    })
}

/// Counts a connection the worker could not take (it is dropped, which closes it).
pub fn refuse(shared: &Shared, id: usize) {
    shared.curr_conns.fetch_sub(1, SeqCst);
    shared.worker_conns[id].fetch_sub(1, SeqCst);
}

/// Records connection `token` of worker `id`, now in its loop.
pub fn admit(shared: &Shared, id: usize, stats: &ThreadStats, token: usize, a: Arrival) -> Conn {
    if !a.moved {
        stats.total_connections.incr();
        if shared.verbose() > 1 {
            eprintln!("<{} new auto-negotiating client connection", a.info.fd);
        }
    }
    if let Ok(mut reg) = shared.registry[id].lock() {
        reg.insert(token, a.info);
    }
    a.conn
}

/// Notes that connection `token` ran a request at `now` (`stats conns`, `-o idle_timeout`);
/// the registry is touched at most once a second per connection, which keeps its lock cold.
pub fn touch(shared: &Shared, id: usize, token: usize, conn: &mut Conn, now: u32) {
    if conn.last_cmd == now {
        return;
    }
    conn.last_cmd = now;
    if let Ok(mut reg) = shared.registry[id].lock() {
        if let Some(info) = reg.get_mut(&token) {
            info.last_cmd = now;
        }
    }
}

/// Forgets closed connection `token`: its buffers, its memory reservation and its counts.
/// The socket closes when `conn` is dropped.
pub fn forget(shared: &Shared, id: usize, pool: &mut BufPool, token: usize, conn: &mut Conn) {
    if shared.verbose() > 1 {
        eprintln!("<{} connection closed.", conn.stream.fd());
    }
    pool.give(std::mem::take(&mut conn.rbuf));
    pool.give(std::mem::take(&mut conn.wbuf));
    conn.release_reservation(&shared.store);
    if let Ok(mut reg) = shared.registry[id].lock() {
        reg.remove(&token);
    }
    refuse(shared, id);
}

/// Connections silent for longer than `-o idle_timeout` (none when it is 0).
pub fn idle<'a>(
    shared: &Shared,
    conns: impl Iterator<Item = (usize, &'a Conn)>,
    now: u32,
) -> Vec<usize> {
    let idle = shared.settings.idle_timeout;
    if idle == 0 {
        return Vec::new();
    }
    conns
        .filter(|(_, c)| now.saturating_sub(c.last_cmd) > idle)
        .map(|(t, _)| t)
        .collect()
}
