//! Counters with nutcracker's names, kept per worker thread: one thread writes each, the
//! stats reports (`stats`) sum them when read.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// A counter written by one thread only: a plain load and store, no locked instruction.
#[derive(Default)]
pub struct Counter(AtomicI64);

impl Counter {
    #[inline]
    pub fn add(&self, n: i64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline]
    pub fn get(&self) -> i64 {
        self.0.load(Relaxed)
    }
}

macro_rules! counters {
    ($name:ident { $($field:ident),* $(,)? }) => {
        #[derive(Default)]
        #[repr(align(64))]
        pub struct $name { $(pub $field: Counter,)* }
        impl $name {
            /// `(field name, value)` in nutcracker's order.
            pub fn fields(&self) -> Vec<(&'static str, i64)> {
                vec![$((stringify!($field), self.$field.get()),)*]
            }
        }
    };
}

counters!(ServerCounters {
    server_eof,
    server_err,
    server_timedout,
    server_connections,
    requests,
    request_bytes,
    responses,
    response_bytes,
    in_queue,
    in_queue_bytes,
    out_queue,
    out_queue_bytes,
});

counters!(PoolBase {
    client_eof,
    client_err,
    client_connections,
    forward_error,
    fragments,
});

counters!(WorkerCounters {
    total_connections,
    curr_connections,
});

/// One worker's counters for one pool.
pub struct PoolCounters {
    pub pool: PoolBase,
    pub servers: Vec<ServerCounters>,
    /// Per server: time from a request queued for it to its reply read (`/metrics`).
    pub latency: Vec<telemetry::Histogram>,
    /// Per server of an mcrouter pool: sends failed at once because it was TKO (`/metrics`;
    /// not in nutcracker's stats, which have no such field).
    pub tko_failed: Vec<Counter>,
    /// Per server: requests failed at once because its connection held
    /// `server_max_inflight` requests already (`/metrics`).
    pub overloaded: Vec<Counter>,
    /// Requests answered at once past the pool's rate limits (`gets_rate`, ...; `/metrics`).
    pub rate_limited: Counter,
    /// Per server of an mcrouter pool (empty otherwise): `stats servers`' figures.
    pub mc: Vec<crate::mcstats::DestCounters>,
}

impl PoolCounters {
    pub fn new(servers: usize) -> PoolCounters {
        PoolCounters {
            pool: PoolBase::default(),
            servers: (0..servers).map(|_| ServerCounters::default()).collect(),
            latency: (0..servers).map(|_| Default::default()).collect(),
            tko_failed: (0..servers).map(|_| Counter::default()).collect(),
            overloaded: (0..servers).map(|_| Counter::default()).collect(),
            rate_limited: Counter::default(),
            mc: Vec::new(),
        }
    }
}
