//! Limits on requests in flight to servers: per server connection (`server_max_inflight`),
//! per pool (`active_req_limit`) and for the whole router (`--active-req-limit`, as
//! memcached's proxy `active_req_limit`). Past either, a request is answered at once with an error
//! instead of being queued: a slow server then costs its own clients errors, not the
//! router's memory, however many clients pile on.

use super::{error_reply, Worker};

/// What memcached's proxy answers past its `active_req_limit`.
pub(super) const ACTIVE_LIMIT_REACHED: &str = "active request limit reached";

/// This worker's share of `--active-req-limit` and its client requests queued on server
/// connections and not answered yet (the sum of its backends' `queued`). Each worker holds
/// an equal share so the check costs no shared counter.
pub(super) struct Active {
    share: u32,
    inflight: u32,
}

impl Active {
    /// `limit`: router-wide (0: none), split over `threads` workers, rounding up.
    pub(super) fn new(limit: u32, threads: usize) -> Active {
        let threads = u32::try_from(threads.max(1)).unwrap_or(u32::MAX);
        let share = match limit {
            0 => u32::MAX,
            n => n.div_ceil(threads),
        };
        Active { share, inflight: 0 }
    }

    /// Whether there is a limit at all.
    pub(super) fn limits(&self) -> bool {
        self.share != u32::MAX
    }

    #[inline]
    pub(super) fn full(&self) -> bool {
        self.inflight >= self.share
    }

    #[inline]
    pub(super) fn queued(&mut self, n: u32) {
        self.inflight += n;
    }

    #[inline]
    pub(super) fn answered(&mut self, n: u32) {
        self.inflight = self.inflight.saturating_sub(n);
    }
}

impl Worker {
    /// One more request queued: it counts against the router-wide limit and, if its backend's
    /// pool has one (`limited_pool`), the pool's.
    #[inline]
    pub(super) fn count_queued(&mut self, limited_pool: Option<usize>) {
        self.active.queued(1);
        if let Some(p) = limited_pool {
            self.pools[p].active.queued(1);
        }
    }

    /// Backend `be` is gone with its queued requests.
    pub(super) fn answered_all(&mut self, be: &super::backend::Backend) {
        self.active.answered(be.queued);
        if let Some(p) = be.limited_pool {
            self.pools[p].active.answered(be.queued);
        }
    }

    /// The reply for a request to server `s` of pool `p` whose connection holds
    /// `server_max_inflight` requests already (counted): mcrouter's words for its
    /// `target_max_pending_requests` (a `local_error`).
    #[cold]
    pub(super) fn overloaded(&self, p: usize, s: usize) -> Vec<u8> {
        let pl = &self.pools[p];
        pl.rt.counters[self.id].overloaded[s].add(1);
        if let Some(d) = pl.rt.counters[self.id].mc.get(s) {
            d.failed_unqueued(routetree::server_stats::Res::LocalError);
        }
        let msg = format!(
            "Max pending requests ({}) reached for destination \"{}\".",
            pl.max_inflight, pl.rt.servers[s].stats_name
        );
        error_reply(pl.rt.cfg.redis, &msg)
    }

    /// The reply for a request to server `s` of pool `p` while the router holds
    /// `--active-req-limit` requests in flight, or the pool its `active_req_limit` (counted
    /// as `overloaded` too).
    #[cold]
    pub(super) fn active_limit_reached(&self, p: usize, s: usize) -> Vec<u8> {
        let pl = &self.pools[p];
        pl.rt.counters[self.id].overloaded[s].add(1);
        error_reply(pl.rt.cfg.redis, ACTIVE_LIMIT_REACHED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_shared_out_over_workers() {
        let mut a = Active::new(5, 2);
        for _ in 0..3 {
            assert!(!a.full());
            a.queued(1);
        }
        assert!(a.full(), "a worker holds its share, rounded up");
        a.answered(1);
        assert!(!a.full());
        let none = Active::new(0, 4);
        assert!(!none.full());
        assert!(Active::new(1, 8).share >= 1, "every worker may hold one");
    }
}
