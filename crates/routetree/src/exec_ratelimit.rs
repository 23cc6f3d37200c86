//! RateLimitRoute's token buckets, one per route and operation class, kept across requests
//! in a worker's [`FailoverState`].

use std::time::Instant;

use super::FailoverState;
use crate::{RouteId, TokenRate};

impl FailoverState {
    /// The time of the requests started next: RateLimitRoutes' buckets earn their rate up to
    /// it. Without it they never refill.
    pub fn set_now(&mut self, now: Instant) {
        self.now = Some(now);
    }

    /// Takes a token from a RateLimitRoute's bucket (which starts full), if it has one.
    pub(super) fn take_token(&mut self, bucket: (RouteId, u8), rate: &TokenRate) -> bool {
        let now = self.now;
        let (tokens, at) = self.rate_tokens.entry(bucket).or_insert((rate.burst, now));
        if let (Some(now), Some(then)) = (now, *at) {
            let earned = now.saturating_duration_since(then).as_secs_f64() * rate.rate;
            *tokens = (*tokens + earned).min(rate.burst);
        }
        *at = match (now, *at) {
            (Some(now), Some(then)) => Some(now.max(then)),
            (now, then) => now.or(then),
        };
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}
