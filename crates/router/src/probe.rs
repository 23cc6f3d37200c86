//! Re-probing servers out of rotation (ejected by nutcracker's `auto_eject_hosts`, or TKO in
//! an mcrouter pool): each probe runs on a thread of its own, off the control thread, so a
//! server that hangs cannot delay signals or reloads.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use crate::shared::{BackendAddr, PoolRt};
use crate::{tls, worker};

/// Tries an ejected server once (connect + `version`, or for a Redis pool `AUTH` if the
/// pool has a password and `PING`) off the control thread; on success
/// it rejoins the ring, else it waits another `server_retry_timeout`.
pub(crate) fn spawn_probe(pool: Arc<PoolRt>, s: usize) {
    // Push the retry time out first so the next control tick does not probe again.
    pool.retry_result(s, false);
    let _ = std::thread::Builder::new()
        .name("route-probe".into())
        .spawn(move || {
            let wait = pool
                .timeout()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let ok = probe(&pool, s, wait);
            if ok {
                pool.retry_result(s, true);
            }
        });
}

/// Probes a TKO server of an mcrouter pool (connect + `version`) off the control thread.
pub(crate) fn spawn_tko_probe(pool: Arc<PoolRt>, s: usize) {
    let spawned = std::thread::Builder::new()
        .name("route-probe".into())
        .spawn({
            let pool = pool.clone();
            move || {
                let wait = pool.timeout().unwrap_or(Duration::from_secs(1));
                let ok = probe(&pool, s, wait);
                pool.tko_probe_result(s, ok);
            }
        });
    if spawned.is_err() {
        pool.tko_probe_result(s, false);
    }
}

/// Whether server `s` of `pool` answers (over TLS when its connections use TLS).
fn probe(pool: &PoolRt, s: usize, wait: Duration) -> bool {
    let cfg = &pool.cfg;
    fn talk(s: &mut (impl Read + Write), cfg: &nutconf::Pool) -> bool {
        if cfg.redis {
            return talk_redis(s, cfg.backend_auth(), cfg.redis_db);
        }
        if s.write_all(b"version\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 128];
        let mut got = 0;
        while got < buf.len() {
            match s.read(&mut buf[got..]) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
            if buf[..got].contains(&b'\n') {
                return buf.starts_with(b"VERSION ");
            }
        }
        false
    }
    match &pool.servers[s].addr {
        BackendAddr::Tcp(a) => match std::net::TcpStream::connect_timeout(a, wait) {
            Ok(mut tcp) => {
                let _ = tcp.set_read_timeout(Some(wait));
                let _ = tcp.set_write_timeout(Some(wait));
                match pool.server_tls(s) {
                    Some((config, name)) => tls::blocking_client(tcp, config, name)
                        .is_ok_and(|mut tls| talk(&mut tls, cfg)),
                    None => talk(&mut tcp, cfg),
                }
            }
            Err(_) => false,
        },
        BackendAddr::Unix(p) => match std::os::unix::net::UnixStream::connect(p) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(wait));
                let _ = s.set_write_timeout(Some(wait));
                talk(&mut s, cfg)
            }
            Err(_) => false,
        },
    }
}

/// `[AUTH [user] <password>] PING`: the server is back when it answers `[+OK] +PONG`.
fn talk_redis(s: &mut (impl Read + Write), auth: Option<(Option<&str>, &str)>, db: u32) -> bool {
    let mut req = Vec::new();
    // The same handshake as a real connection: a server that refuses the pool's database
    // must not come back only to fail every connection.
    let mut expect = b"+OK\r\n".repeat(worker::redis_handshake(auth, db, &mut req));
    proto::resp::write_command(&mut req, 1, [&b"PING"[..]]);
    expect.extend_from_slice(b"+PONG\r\n");
    if s.write_all(&req).is_err() {
        return false;
    }
    let mut buf = [0u8; 128];
    let mut got = 0;
    while got < expect.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got += n,
        }
    }
    buf[..got] == expect[..]
}
