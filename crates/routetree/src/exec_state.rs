//! What an execution keeps across requests, per worker: FailoverRoutes' token buckets and
//! error streaks, RateLimitRoutes' buckets, L1L2CacheRoutes' countdowns and slow warm-up's
//! hit rates.

use std::collections::HashMap;
use std::time::Instant;

use crate::{FailoverLimit, RouteId};

/// What FailoverRoutes and RateLimitRoutes remember across requests, per worker (as
/// mcrouter, per proxy thread).
#[derive(Debug, Default)]
pub struct FailoverState {
    /// RateLimitRoute token buckets per (route, class): tokens, and when they were counted.
    pub(super) rate_tokens: HashMap<(RouteId, u8), (f64, Option<Instant>)>,
    /// The time RateLimitRoutes' buckets refill up to, set by the worker ([`Self::set_now`]).
    pub(super) now: Option<Instant>,
    /// `failover_limit` token buckets: each request through the route earns `rate` tokens
    /// (up to `burst`; a bucket starts full), each failover spends one, and without a token
    /// the error is the reply.
    pub(super) tokens: HashMap<RouteId, f64>,
    /// LeastFailuresPolicy: each child's error replies in a row.
    pub(super) errors_in_a_row: HashMap<RouteId, Vec<u32>>,
    /// L1L2CacheRoute: negative hits left until the next refresh of l1 from l2.
    pub(super) ncache_countdown: HashMap<RouteId, usize>,
    /// PoolRoute `slow_warmup`: each server's hits and misses, and the coin for its gets.
    pub(super) warmup: super::slow_warmup::WarmUpState,
}

impl FailoverState {
    pub(super) fn earn(&mut self, route: RouteId, limit: &FailoverLimit) {
        let tokens = self.tokens.entry(route).or_insert(limit.burst);
        *tokens = (*tokens + limit.rate).min(limit.burst);
    }

    pub(super) fn spend(&mut self, route: RouteId, limit: &FailoverLimit) -> bool {
        let tokens = self.tokens.entry(route).or_insert(limit.burst);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// LeastFailuresPolicy's order: `order` (every child, the first first) with all but the
    /// first sorted by fewest errors in a row (ties in config order), cut to `max_tries`.
    pub(super) fn order_by_failures(
        &self,
        route: RouteId,
        order: &mut Vec<usize>,
        max_tries: usize,
    ) {
        if let Some(counts) = self.errors_in_a_row.get(&route) {
            order[1..].sort_by_key(|&c| counts.get(c).copied().unwrap_or(0));
        }
        order.truncate(max_tries.max(1));
    }

    /// A child's reply: an error adds to its count, anything else resets it.
    pub(super) fn record(&mut self, route: RouteId, children: usize, child: usize, error: bool) {
        let counts = self
            .errors_in_a_row
            .entry(route)
            .or_insert_with(|| vec![0; children]);
        if let Some(n) = counts.get_mut(child) {
            *n = if error { n.saturating_add(1) } else { 0 };
        }
    }

    /// Forgets every bucket and count (a reload renumbers the routes).
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.errors_in_a_row.clear();
        self.ncache_countdown.clear();
        self.rate_tokens.clear();
        self.warmup.clear();
    }
}
