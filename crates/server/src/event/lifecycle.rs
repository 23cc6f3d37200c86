//! What every event loop (`worker`, `uring`) does as a connection arrives, is used and
//! closes: building it from a handed-over socket, the `stats conns` registry, the open
//! connection counts, verbose logging and the idle timeout.

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::mpsc::Sender;

use crate::event::handoff::{self, Incoming, Moved};
use crate::io::bufpool::BufPool;
use crate::io::conn::{Conn, Stream};
use crate::placement;
use crate::shared::{ConnInfo, Shared};
use crate::stats::ThreadStats;
use crate::watch;

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
    let mut tracked = 0;
    let (stream, listen, moved_at) = match inc {
        Incoming::Tcp(s, listen) => (Stream::Tcp(s), listen, None),
        Incoming::Tls(s, listen) => {
            let session = shared.tls.as_ref().map(|t| t.accept());
            let Some(Ok(session)) = session else {
                refuse(shared, id);
                return None;
            };
            tls = Some(Box::new(crate::tls::io::TlsSession::new(session)));
            (Stream::Tcp(s), listen, None)
        }
        Incoming::Unix(s, listen) => (Stream::Unix(s), listen, None),
        Incoming::Moved(m) => {
            let (stream, i, t) = m.into_parts();
            tracked = t;
            (Stream::Tcp(stream), i.listen, Some(i.last_cmd))
        }
    };
    let last_cmd = moved_at.unwrap_or(now);
    let mut conn = Conn::new(stream, last_cmd);
    conn.tracked = tracked;
    // Only idle, logged-in connections are moved between workers.
    conn.authenticated = moved_at.is_some() || shared.auth.is_none();
    conn.tls = tls;
    let info = ConnInfo {
        fd: conn.stream.fd(),
        last_cmd,
        listen,
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
            stderr_line!("<{} new auto-negotiating client connection", a.info.fd);
        }
        if shared.watch.wants(watch::CONNEVENTS) {
            let unix = matches!(a.conn.stream, Stream::Unix(_));
            watch::conn_event(&shared.watch, &shared.wakers, a.info.fd, unix, None);
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
        if let Some(info) = reg.get_mut(token) {
            info.last_cmd = now;
        }
    }
}

/// Forgets closed connection `token`: its buffers, its memory reservation and its counts.
/// The socket closes when `conn` is dropped.
pub fn forget(shared: &Shared, id: usize, pool: &mut BufPool, token: usize, conn: &mut Conn) {
    if shared.verbose() > 1 {
        stderr_line!("<{} connection closed.", conn.stream.fd());
    }
    if let Some(w) = conn.watcher() {
        w.stop_direct();
        shared.watch.remove(w);
        shared.tracking.closed(w);
    }
    if shared.watch.wants(watch::CONNEVENTS) {
        let reason = if shared.shutdown.load(Relaxed) {
            watch::CloseReason::Shutdown
        } else if conn.protocol_error {
            watch::CloseReason::Error
        } else if idle_closed(shared, conn) {
            watch::CloseReason::IdleTimeout
        } else {
            watch::CloseReason::Normal
        };
        let unix = matches!(conn.stream, Stream::Unix(_));
        watch::conn_event(
            &shared.watch,
            &shared.wakers,
            conn.stream.fd(),
            unix,
            Some(reason),
        );
    }
    pool.give(std::mem::take(&mut conn.rbuf));
    pool.give(std::mem::take(&mut conn.wbuf));
    conn.release_reservation(&shared.store);
    // Reads still under way are dropped when they come back.
    conn.end_flash_wait();
    if let Ok(mut reg) = shared.registry[id].lock() {
        reg.remove(token);
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
    // A watcher only receives; memcached's never time out either.
    conns
        .filter(|(_, c)| now.saturating_sub(c.last_cmd) > idle && c.watcher().is_none())
        .map(|(t, _)| t)
        .collect()
}

/// Whether closing connection `conn` is the idle timeout's doing (see `idle`).
fn idle_closed(shared: &Shared, conn: &Conn) -> bool {
    let idle = shared.settings.idle_timeout;
    idle != 0
        && !conn.closing
        && !conn.peer_closed
        && crate::clock::unix_now().saturating_sub(conn.last_cmd) > idle
}

/// The moves a worker's survey decided (see `plan_moves`).
pub struct Moves {
    /// The worker serves only connections of the CPU groups it is home to
    /// (`placement::settled`).
    pub settled: bool,
    /// Idle connections to hand over, and the worker each goes to.
    pub moves: Vec<(usize, usize)>,
}

/// Groups connections of one client thread on one worker (see `placement`): counts worker
/// `id`'s recently busy TCP connections by the CPU group their packets arrive on, publishes
/// the counts, and picks the idle ones to hand to the worker chosen for their group.
/// Idle: nothing buffered either way, so the connection is just its socket; bytes arriving
/// meanwhile wait in the socket for the new worker.
pub fn plan_moves<'a>(
    shared: &Shared,
    id: usize,
    conns: impl Iterator<Item = (usize, &'a Conn)>,
    now: u32,
) -> Moves {
    let n = shared.worker_conns.len();
    let mut plan = Moves {
        settled: false,
        moves: Vec::new(),
    };
    if n < 2 {
        return plan;
    }
    let mut surveyed = Vec::new();
    let mut mine = [0usize; placement::CPU_GROUPS];
    for (t, c) in conns {
        // A TLS connection stays with its worker: its session holds buffered records.
        if !matches!(c.stream, Stream::Tcp(_))
            || c.tls.is_some()
            || now.saturating_sub(c.last_cmd) > 1
        {
            continue;
        }
        let Some(cpu) = placement::incoming_cpu(c.stream.fd()) else {
            continue;
        };
        let group = cpu % placement::CPU_GROUPS;
        mine[group] += 1;
        if c.is_idle() {
            surveyed.push((t, group));
        }
    }
    for (slot, &count) in shared.cpu_groups[id].iter().zip(&mine) {
        slot.store(count, Relaxed);
    }
    let mut open: Vec<usize> = shared.worker_conns.iter().map(|c| c.load(SeqCst)).collect();
    let serving: Vec<[usize; placement::CPU_GROUPS]> = (0..n)
        .map(|w| {
            if w == id {
                return mine;
            }
            let mut row = [0; placement::CPU_GROUPS];
            for (r, c) in row.iter_mut().zip(&shared.cpu_groups[w]) {
                *r = c.load(Relaxed);
            }
            row
        })
        .collect();
    let homes = placement::homes(&serving);
    plan.settled = placement::settled(id, &mine, &homes);
    for (t, group) in surveyed {
        let Some(home) = homes[group] else {
            continue;
        };
        if placement::may_move(id, home, &open) {
            open[home] += 1;
            open[id] -= 1;
            plan.moves.push((t, home));
        }
    }
    plan
}

/// Takes connection `token` out of worker `id`'s registry, to hand it over.
pub fn unregister(shared: &Shared, id: usize, token: usize) -> Option<ConnInfo> {
    shared.registry[id].lock().ok()?.remove(token)
}

/// Hands idle TCP connection `conn` (out of worker `id`'s loop and registry) to worker `to`.
pub fn send_to(
    shared: &Shared,
    id: usize,
    stats: &ThreadStats,
    peers: &[Sender<Incoming>],
    to: usize,
    conn: Conn,
    info: ConnInfo,
) {
    let tracked = conn.tracked;
    let Stream::Tcp(stream) = conn.stream else {
        unreachable!("only TCP connections are handed over");
    };
    shared.worker_conns[to].fetch_add(1, SeqCst);
    shared.worker_conns[id].fetch_sub(1, SeqCst);
    stats.conns_moved.incr();
    if peers[to]
        .send(Incoming::Moved(Moved::new(stream, info, tracked)))
        .is_ok()
    {
        handoff::wake(&shared.wakers[to]);
    } else {
        // The other worker has stopped (shutdown): the connection was closed on drop.
        shared.worker_conns[to].fetch_sub(1, SeqCst);
        shared.curr_conns.fetch_sub(1, SeqCst);
    }
}
