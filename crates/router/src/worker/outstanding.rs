//! PoolRoute's `max_outstanding` (mcrouter's OutstandingLimitRoute): a server connection
//! of such a pool has at most that many requests in flight; the others wait here, not
//! written, and go as replies come back, fairly between clients (see `fair_queue`).
//!
//! A waiting request counts towards `--active-req-limit` (and the pool's
//! `active_req_limit`) but not towards the connection's `server_max_inflight`, which in
//! mcrouter sits below the limit route. It never waits forever: when the connection
//! fails or times out, waiting requests get the error reply its requests in flight get.
//! A waiting request of a client that disconnected is dropped instead of sent.

use routetree::reply::McResult;

use super::backend::{Arrivals, Backend};
use super::client::deliver;
use super::held::{Held, HeldKind};
use super::reply_to::{ReplyTo, EXEC_CLIENT};
use super::Worker;
use crate::shared::Shared;

/// Each pool's `max_outstanding` (0: none), by its index in `shared.pools`.
pub(super) fn pool_limits(shared: &Shared) -> Vec<u32> {
    let mut limits = vec![0; shared.pools.len()];
    if let Some(routes) = &shared.mcrouter {
        for (pool, &p) in routes.config.pools.iter().zip(&routes.pools) {
            limits[p] = pool.max_outstanding;
        }
    }
    limits
}

impl Worker {
    /// The client a send answers: an mcrouter execution's sends count as its client's, so
    /// that client's requests wait in one line, in order.
    fn sender_of(&self, to: ReplyTo) -> (u32, u32) {
        if to.client == EXEC_CLIENT {
            if let Some(client) = self.mc.client_of(to) {
                return client;
            }
        }
        (to.client, to.gen)
    }

    /// Backend `b` is at its `max_outstanding`: `held` waits.
    #[cold]
    #[inline(never)]
    pub(super) fn hold(&mut self, b: usize, held: Held) {
        let sender = self.sender_of(held.to);
        let be = &mut self.backends[b];
        let pool = be.limited_pool;
        if let Some(limit) = be.outstanding.as_mut() {
            limit.waiting.push(sender, held);
        }
        self.count_queued(pool);
    }

    /// Replies came back on backend `b`: sends waiting requests while it has room.
    pub(super) fn release_held(&mut self, b: usize) {
        let now = self.now;
        let mut sent = false;
        loop {
            let Some(be) = self.backends.get_mut(b) else {
                return;
            };
            let Some(limit) = be.outstanding.as_mut() else {
                return;
            };
            if be.queued >= limit.max {
                break;
            }
            let Some((sender, held)) = limit.waiting.pop() else {
                break;
            };
            let gone = held.to.client != EXEC_CLIENT
                && self
                    .clients
                    .get(held.to.client as usize)
                    .is_none_or(|c| c.gen != held.to.gen);
            if gone {
                let pool = be.limited_pool;
                self.active.answered(1);
                if let Some(p) = pool {
                    self.pools[p].active.answered(1);
                }
                continue;
            }
            let keys = held.keys.iter().map(|k| &k[..]);
            match held.kind {
                HeldKind::Plain => be.enqueue(&[&held.bytes], held.to, held.expect, None, now),
                HeldKind::Keyed => {
                    be.enqueue_keyed(&[&held.bytes], held.to, held.expect, keys, now)
                }
                HeldKind::Get { cas } => be.enqueue_get(cas, keys, held.to, now),
            }
            if held.to.client == EXEC_CLIENT {
                be.bar(sender.0, sender.1);
            }
            sent = true;
        }
        if sent {
            self.mark_backend(b);
        }
    }

    /// Backend `be` is gone: its waiting requests get `msg` (an execution's, `result`).
    /// Returns how many.
    pub(super) fn fail_held(&mut self, be: &mut Backend, msg: &[u8], result: McResult) -> i64 {
        let Some(mut limit) = be.outstanding.take() else {
            return 0;
        };
        let n = limit.waiting.len();
        for (_, held) in limit.waiting.drain() {
            if Arrivals::owns(held.to) {
                self.arrivals.arrive(held.to, b"", Some(result));
            } else {
                deliver(
                    &mut self.clients,
                    &mut self.dirty_clients,
                    held.to,
                    msg,
                    &[],
                    true,
                );
            }
        }
        self.active.answered(n as u32);
        if let Some(p) = be.limited_pool {
            if let Some(pl) = self.pools.get_mut(p) {
                pl.active.answered(n as u32);
            }
        }
        n as i64
    }
}
