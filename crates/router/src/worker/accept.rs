//! Accepting connections and handing them to the least busy worker.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;

use proto::resp;

use super::client::Client;
use super::{
    auth, token, Control, Worker, HANDOFF_SLACK_MEMCACHED, HANDOFF_SLACK_REDIS, KIND_CLIENT,
    MAX_SLOTS, REPLY_ESTIMATE_START,
};
use crate::buf::ReadBuf;
use crate::net::Stream;

impl Worker {
    /// Accepts every pending connection. One worker accepts for each listen address and
    /// keeps the connection unless it already has `HANDOFF_SLACK_*` more clients than
    /// another worker, which then gets it (counting connections handed over but not yet
    /// adopted). Long-lived memcached connections spread over all workers; short-lived
    /// Redis ones (PHP's connect, AUTH, GET, close) stay on one thread with no hand-over,
    /// which measured 7% more connections/s than dealing them out (bench/compare-redis).
    pub(super) fn accept(&mut self, li: usize) {
        loop {
            let Some(l) = self.listeners.get(li) else {
                return;
            };
            let pool = l.pool;
            match l.listener.accept() {
                Ok(stream) => {
                    let slack = if self.pools[pool].rt.cfg.redis {
                        HANDOFF_SLACK_REDIS
                    } else {
                        HANDOFF_SLACK_MEMCACHED
                    };
                    let target = self.pick_worker(slack);
                    if target == self.id {
                        self.add_client(stream, pool);
                    } else {
                        let (tx, waker) = &self.peers[target];
                        let key = self.pools[pool].rt.listen_key();
                        self.globals.handed_over[target].fetch_add(1, Relaxed);
                        if tx
                            .send(Control::Adopt {
                                stream,
                                listen_key: key,
                            })
                            .is_ok()
                        {
                            let _ = waker.wake();
                        } else {
                            self.globals.handed_over[target].fetch_sub(1, Relaxed);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    crate::log::warn(&format!("accept failed: {e}"));
                    return;
                }
            }
        }
    }

    /// This worker, or the least loaded one when this one has `slack` more clients.
    pub(super) fn pick_worker(&mut self, slack: i64) -> usize {
        let g = &self.globals;
        let loads: Vec<i64> = (0..self.peers.len())
            .map(|w| g.per_worker[w].curr_connections.get() + g.handed_over[w].load(Relaxed))
            .collect();
        let target = choose_worker(&loads, self.id, self.next_worker, slack);
        if target != self.id {
            self.next_worker = target;
        }
        target
    }

    pub(super) fn adopt(&mut self, stream: Stream, listen_key: &str) {
        // Another worker accepted it, possibly under the previous configuration.
        self.globals.handed_over[self.id].fetch_sub(1, Relaxed);
        if let Some(pool) = self
            .pools
            .iter()
            .position(|p| p.rt.listen_key() == listen_key)
        {
            self.add_client(stream, pool);
        }
    }

    pub(super) fn add_client(&mut self, stream: Stream, pool: usize) {
        let rt = self.pools[pool].rt.clone();
        let mut stream = match &rt.tls.listen {
            Some(config) => match stream.into_tls_server(config) {
                Ok(s) => s,
                Err(_) => return,
            },
            None => stream,
        };
        let limit = rt.cfg.client_connections;
        let n = rt
            .clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if limit > 0 && n >= i64::from(limit) {
            rt.clients
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            rt.counters[self.id].pool.client_err.add(1);
            return;
        }
        let entry = self.clients.vacant_entry();
        if stream
            .register(self.poll.registry(), token(KIND_CLIENT, entry.key()))
            .is_err()
        {
            rt.clients
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.next_gen = self.next_gen.wrapping_add(1);
        rt.counters[self.id].pool.client_connections.add(1);
        let g = &self.globals.per_worker[self.id];
        g.total_connections.add(1);
        g.curr_connections.add(1);
        entry.insert(Client {
            stream,
            gen: self.next_gen,
            pool,
            rt,
            rbuf: ReadBuf::default(),
            wbuf: Vec::new(),
            wpos: 0,
            slots: VecDeque::new(),
            head_seq: 0,
            swallow: 0,
            closing: false,
            eof: false,
            paused: false,
            overflowed: false,
            reply_estimate: REPLY_ESTIMATE_START,
            dirty: false,
            authed: !auth::needs_auth(&self.pools[pool].rt.cfg),
            progress: resp::Progress::default(),
            resp3: false,
            big_wait: Vec::new(),
            chunks_of: None,
            tx: None,
            spare: Vec::new(),
            max_slots: match self.globals.max_client_outstanding {
                0 => MAX_SLOTS,
                n => (n as usize).min(MAX_SLOTS),
            },
        });
    }
}

/// The worker that accepts on listen address `key` (the same answer in every worker).
/// `me`, unless it has more than `slack` clients over the least loaded other worker, which
/// is then chosen; the scan starts after `last` (the previous choice) so ties rotate.
pub(super) fn choose_worker(loads: &[i64], me: usize, last: usize, slack: i64) -> usize {
    let n = loads.len();
    let mut best = me;
    for i in 1..=n {
        let w = (last + i) % n;
        if w != me && loads[w] < loads[best] {
            best = w;
        }
    }
    if best != me && loads[me] > loads[best] + slack {
        best
    } else {
        me
    }
}

pub(super) fn acceptor_of(key: &str, workers: usize) -> usize {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h % workers.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_are_dealt_evenly_past_the_slack() {
        // Worker 0 accepts 64 connections in a row; each choice is then counted as load.
        for (slack, max_spread) in [(0, 1), (4, 5)] {
            let mut loads = vec![0i64; 3];
            let mut last = 0;
            for _ in 0..64 {
                let w = choose_worker(&loads, 0, last, slack);
                if w != 0 {
                    last = w;
                }
                loads[w] += 1;
            }
            let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(hi - lo <= max_spread, "slack {slack}: {loads:?}");
            assert!(
                loads[1] > 0 && loads[2] > 0,
                "every worker gets some: {loads:?}"
            );
        }
        // Under the slack everything stays with the acceptor.
        assert_eq!(choose_worker(&[10, 0], 0, 1, 64), 0);
    }

    #[test]
    fn one_acceptor_per_address() {
        assert_eq!(acceptor_of("127.0.0.1:1", 1), 0);
        assert!(acceptor_of("/run/r.sock", 3) < 3);
    }
}
