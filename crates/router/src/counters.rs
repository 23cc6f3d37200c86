//! Counters with nutcracker's names, kept per worker thread: one thread writes each, the
//! stats reports (`stats`) sum them when read.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering::Relaxed};

use routetree::server_stats::{ConnState, Res, NUM_RESULTS};

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
    /// Read-only commands sent to a replica (`redis_read_from: replicas`).
    pub replica_reads: Counter,
    /// Per server of an mcrouter pool (empty otherwise): `stats servers`' figures.
    pub mc: Vec<DestCounters>,
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
            replica_reads: Counter::default(),
            mc: Vec::new(),
        }
    }
}

/// One worker's figures for one server of an mcrouter pool.
pub struct DestCounters {
    pub results: [Counter; NUM_RESULTS],
    /// Results of sends that failed before they were queued on a connection (the
    /// connection could not be made, or held too many requests): not in `requests`.
    pub unqueued: Counter,
    /// Requests queued on a connection still being made.
    pub pending: Counter,
    pub state: AtomicU8,
}

impl Default for DestCounters {
    fn default() -> Self {
        DestCounters {
            results: std::array::from_fn(|_| Counter::default()),
            unqueued: Counter::default(),
            pending: Counter::default(),
            state: AtomicU8::new(ConnState::New as u8),
        }
    }
}

impl DestCounters {
    /// A queued request was answered (or failed) with `res`.
    #[inline]
    pub fn answered(&self, res: Res) {
        self.results[res as usize].add(1);
    }

    /// A send failed with `res` without being queued.
    pub fn failed_unqueued(&self, res: Res) {
        self.results[res as usize].add(1);
        self.unqueued.add(1);
    }

    pub fn set_state(&self, state: ConnState) {
        self.state.store(state as u8, Relaxed);
    }
}
