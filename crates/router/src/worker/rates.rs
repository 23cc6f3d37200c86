//! A nutcracker-YAML pool's rate limits (`gets_rate`, `sets_burst`, ...), as mcrouter's
//! RateLimitRoute applies its `rates`: token buckets per class of request, and past one a
//! request is answered at once with the reply a request to nowhere gets (a miss,
//! `NOT_STORED`, `NOT_FOUND`) instead of reaching a server. Each worker holds an equal share
//! of every rate and burst, so the check touches no shared state.

use std::time::Instant;

use nutconf::{PoolRates, TokenRate};
use proto::Request;

use super::Worker;

/// One class's bucket: tokens earned at `rate` per second up to `burst`, one spent per key.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(r: TokenRate, threads: usize, now: Instant) -> Bucket {
        let threads = threads.max(1) as f64;
        // Every worker may pass at least one request at once, or a small burst over many
        // threads would pass none.
        let burst = (f64::from(r.burst) / threads).max(1.0);
        Bucket {
            rate: f64::from(r.rate) / threads,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes `n` tokens if the bucket holds them.
    fn take(&mut self, n: f64, now: Instant) -> bool {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// A worker's buckets for one pool.
#[derive(Debug)]
pub(super) struct PoolBuckets {
    gets: Option<Bucket>,
    sets: Option<Bucket>,
    deletes: Option<Bucket>,
}

impl PoolBuckets {
    /// `None` when the pool limits nothing.
    pub(super) fn new(r: &PoolRates, threads: usize, now: Instant) -> Option<Box<PoolBuckets>> {
        let bucket = |r: Option<TokenRate>| r.map(|r| Bucket::new(r, threads, now));
        r.any().then(|| {
            Box::new(PoolBuckets {
                gets: bucket(r.gets),
                sets: bucket(r.sets),
                deletes: bucket(r.deletes),
            })
        })
    }

    /// The reply for `req` when its class is over its rate (empty for a `noreply` one);
    /// `None` lets it through. A multi-key get takes a token per key, all or none: past the
    /// rate, every key of it is a miss. Classes as mcrouter's: gets, updates (set, add,
    /// replace, append, prepend, cas), deletes; the rest is never limited.
    pub(super) fn refuse(&mut self, req: &Request<'_>, now: Instant) -> Option<&'static [u8]> {
        let (bucket, n, reply): (_, usize, &'static [u8]) = match req {
            Request::Get { keys, .. } | Request::Gat { keys, .. } => {
                (&mut self.gets, (*keys).count(), b"END\r\n")
            }
            Request::Store { noreply, .. } => {
                (&mut self.sets, 1, quiet(*noreply, b"NOT_STORED\r\n"))
            }
            Request::Delete { noreply, .. } => {
                (&mut self.deletes, 1, quiet(*noreply, b"NOT_FOUND\r\n"))
            }
            _ => return None,
        };
        let passes = bucket.as_mut().is_none_or(|b| b.take(n as f64, now));
        (!passes).then_some(reply)
    }
}

fn quiet(noreply: bool, reply: &'static [u8]) -> &'static [u8] {
    if noreply {
        b""
    } else {
        reply
    }
}

impl Worker {
    /// Routes a request of a pool with rate limits or hot-key handling: out of line, so
    /// that plain pools pay one test for both.
    #[inline(never)]
    pub(super) fn route_special(&mut self, ci: usize, p: usize, req: Request<'_>, raw: &[u8]) {
        let now = self.now;
        if let Some(reply) = self.pools[p]
            .rates
            .as_mut()
            .and_then(|r| r.refuse(&req, now))
        {
            self.pools[p].rt.counters[self.id].rate_limited.add(1);
            if !reply.is_empty() {
                self.local_reply(ci, reply);
            }
            return;
        }
        if self.pools[p].hot.is_some() {
            return self.route_hot(ci, p, req, raw);
        }
        self.route_cold(ci, p, req, raw)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits(gets: Option<(u32, u32)>, sets: Option<(u32, u32)>) -> PoolRates {
        let rate = |r: Option<(u32, u32)>| r.map(|(rate, burst)| TokenRate { rate, burst });
        PoolRates {
            gets: rate(gets),
            sets: rate(sets),
            deletes: None,
        }
    }

    fn req(line: &[u8]) -> Request<'_> {
        match proto::parse(line, &proto::Limits::default()) {
            proto::Parse::Request(r, _) => r,
            _ => panic!("{line:?} does not parse"),
        }
    }

    #[test]
    fn a_class_passes_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = PoolBuckets::new(&limits(Some((10, 3)), None), 1, t0).unwrap();
        let get = req(b"get a\r\n");
        for _ in 0..3 {
            assert_eq!(b.refuse(&get, t0), None);
        }
        assert_eq!(b.refuse(&get, t0), Some(&b"END\r\n"[..]), "burst spent");
        let later = t0 + Duration::from_millis(100);
        assert_eq!(b.refuse(&get, later), None, "a tenth of a second earns one");
        assert_eq!(b.refuse(&get, later), Some(&b"END\r\n"[..]));
        let set = req(b"set a 0 0 1\r\nx\r\n");
        assert_eq!(b.refuse(&set, t0), None, "sets have no rate: never limited");
        assert_eq!(b.refuse(&req(b"delete a\r\n"), t0), None);
    }

    #[test]
    fn past_the_rate_requests_get_what_nowhere_answers() {
        let t0 = Instant::now();
        let mut b = PoolBuckets::new(&limits(Some((1, 2)), Some((1, 1))), 1, t0).unwrap();
        assert_eq!(
            b.refuse(&req(b"get a b c\r\n"), t0),
            Some(&b"END\r\n"[..]),
            "three keys, two tokens: all miss"
        );
        assert_eq!(b.refuse(&req(b"get a b\r\n"), t0), None);
        assert_eq!(b.refuse(&req(b"set a 0 0 1\r\nx\r\n"), t0), None);
        assert_eq!(
            b.refuse(&req(b"set a 0 0 1\r\nx\r\n"), t0),
            Some(&b"NOT_STORED\r\n"[..])
        );
        assert_eq!(
            b.refuse(&req(b"set a 0 0 1 noreply\r\nx\r\n"), t0),
            Some(&b""[..])
        );
        assert_eq!(
            b.refuse(&req(b"incr a 1\r\n"), t0),
            None,
            "arithmetic is not limited"
        );
    }

    #[test]
    fn rates_are_shared_out_over_workers() {
        let t0 = Instant::now();
        let mut b = PoolBuckets::new(&limits(Some((100, 4)), None), 4, t0).unwrap();
        let get = req(b"get a\r\n");
        assert_eq!(b.refuse(&get, t0), None);
        assert!(b.refuse(&get, t0).is_some(), "a quarter of the burst: one");
        assert!(PoolBuckets::new(&limits(None, None), 4, t0).is_none());
    }
}
