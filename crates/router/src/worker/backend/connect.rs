//! Opening a connection to a server: TCP, TLS when the pool asks for it, and a Redis pool's
//! AUTH and SELECT queued ahead of the first request.

use std::collections::VecDeque;
use std::io;

use proto::response::{Expect, ReplyFramer};
use routetree::reply::McResult;
use routetree::server_stats::{ConnState, Res};

use super::{redis_handshake, Backend, NoBackend, Pending, ResendBytes};
use crate::buf::ReadBuf;
use crate::net::{error_text, Stream};
use crate::shared::PoolRt;
use crate::worker::reply_to::ReplyTo;
use crate::worker::{error_reply, token, Worker, KIND_BACKEND};

impl Worker {
    /// Opens connection `k` to server `s` of pool `p` (see [`Worker::backend_or`]).
    #[inline(never)]
    pub(super) fn connect_backend(
        &mut self,
        p: usize,
        s: usize,
        k: usize,
    ) -> Result<usize, NoBackend> {
        let rt = self.pools[p].rt.clone();
        let counters = &rt.counters[self.id].servers[s];
        match Stream::connect(&rt.servers[s].addr, rt.cfg.tcpkeepalive)
            .and_then(|stream| with_tls(stream, &rt, s))
        {
            Ok(mut stream) => {
                let entry = self.backends.vacant_entry();
                let b = entry.key();
                if let Err(e) = stream.register(self.poll.registry(), token(KIND_BACKEND, b)) {
                    return Err(NoBackend::Failed(error_reply(
                        rt.cfg.redis,
                        &error_text(&e),
                    )));
                }
                counters.server_connections.add(1);
                let mut wbuf = Vec::new();
                let mut pending = VecDeque::new();
                if rt.cfg.redis {
                    let mut n = redis_handshake(rt.cfg.backend_auth(), rt.cfg.redis_db, &mut wbuf);
                    if self.pools[p].placement.replica_reads && is_cluster_replica(&rt, s) {
                        // A cluster replica answers reads only on a connection that asked.
                        proto::resp::write_command(&mut wbuf, 1, [&b"READONLY"[..]]);
                        n += 1;
                    }
                    for _ in 0..n {
                        pending.push_back(Pending {
                            to: ReplyTo::HANDSHAKE,
                            expect: Expect::Any,
                            at: self.now,
                            bytes: 0,
                            reqs: 0,
                            batch: None,
                            resend: None,
                        });
                    }
                }
                entry.insert(Backend {
                    stream,
                    rt: rt.clone(),
                    worker: self.id,
                    server: s,
                    place: Some((p, k)),
                    limited_pool: self.pools[p].active.limits().then_some(p),
                    connecting: true,
                    rbuf: ReadBuf::default(),
                    framer: ReplyFramer::new(rt.cfg.redis, rt.cfg.item_size_max as usize),
                    wbuf,
                    wpos: 0,
                    pending,
                    queued: 0,
                    outstanding: super::super::held::Limit::new(self.pools[p].max_outstanding),
                    dirty: false,
                    open_get: None,
                    get_line: Vec::new(),
                    batch: Box::default(),
                    spare: Vec::new(),
                    scratch: (Vec::new(), Vec::new()),
                    resend_bytes: ResendBytes::default(),
                });
                self.pools[p].conns[s][k] = Some(b);
                Ok(b)
            }
            Err(e) => {
                counters.server_err.add(1);
                rt.record_failure(s);
                if let Some(l) = &rt.learned {
                    l.rest(s, rt.uptime_ms());
                }
                if !rt.tko.is_empty() {
                    rt.record_tko_failure(s, true);
                    if let Some(d) = rt.counters[self.id].mc.get(s) {
                        d.failed_unqueued(Res::ConnectError);
                        d.set_state(ConnState::Down);
                    }
                    return Err(NoBackend::Failed(
                        McResult::ConnectError.error_reply().to_vec(),
                    ));
                }
                Err(NoBackend::Failed(error_reply(
                    rt.cfg.redis,
                    &error_text(&e),
                )))
            }
        }
    }
}

/// Whether server `s` of `rt` is a replica in its cluster's latest map.
fn is_cluster_replica(rt: &PoolRt, s: usize) -> bool {
    let Some(slots) = rt.learned.as_ref().and_then(|l| l.slots.as_ref()) else {
        return false;
    };
    slots.replicas().iter().any(|r| r.contains(&(s as u16)))
}

/// A pool with `tls: true` (or an mcrouter server with `:ssl`) speaks TLS to its servers,
/// named by `tls_server_name` or the server's host.
fn with_tls(stream: Stream, rt: &PoolRt, s: usize) -> io::Result<Stream> {
    match rt.server_tls(s) {
        Some((config, name)) => stream.into_tls_client(config, name),
        None => Ok(stream),
    }
}
