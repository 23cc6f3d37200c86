//! Per-thread request counters, merged on read.
//!
//! Each worker thread is the only writer of its own `ThreadStats`, so an increment is a relaxed
//! load and store (no locked instruction, no shared cache line). `stats` sums all threads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A counter with a single writer thread and any number of readers.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        // Single writer: a plain load + store is enough and avoids a locked RMW on the hot path.
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
    fn reset(&self) {
        self.0.store(0, Relaxed);
    }
}

macro_rules! thread_stats {
    ($($name:ident),* $(,)?) => {
        /// Counters owned by one worker thread; names are memcached's `stats` field names.
        #[derive(Default)]
        #[repr(align(128))]
        pub struct ThreadStats { $(pub $name: Counter,)* }

        /// A merged snapshot of all threads' counters.
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct StatsSnapshot { $(pub $name: u64,)* }

        impl ThreadStats {
            pub fn reset(&self) { $(self.$name.reset();)* }
        }

        impl StatsSnapshot {
            pub fn add(&mut self, t: &ThreadStats) { $(self.$name += t.$name.get();)* }
        }
    };
}

// Item-level counters (delete/incr/decr/cas/touch hits, evictions...) live in the store's
// shards; these are the ones only the network layer sees.
thread_stats!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    store_too_large,
    store_no_memory,
    bytes_read,
    bytes_written,
    conn_yields,
    conns_moved,
    total_connections,
    rejected_connections,
    udp_requests,
    ssl_handshake_errors,
);

/// Sums the counters of every worker thread.
pub fn merge(threads: &[std::sync::Arc<ThreadStats>]) -> StatsSnapshot {
    let mut s = StatsSnapshot::default();
    for t in threads {
        s.add(t);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn merge_sums_threads_and_reset_clears() {
        let a = Arc::new(ThreadStats::default());
        let b = Arc::new(ThreadStats::default());
        a.cmd_get.add(3);
        b.cmd_get.incr();
        b.get_hits.add(7);
        let all = [a.clone(), b.clone()];
        let s = merge(&all);
        assert_eq!(s.cmd_get, 4);
        assert_eq!(s.get_hits, 7);
        a.reset();
        b.reset();
        assert_eq!(merge(&all), StatsSnapshot::default());
    }

    #[test]
    fn counters_are_written_from_their_own_thread() {
        let t = Arc::new(ThreadStats::default());
        let w = t.clone();
        std::thread::spawn(move || {
            for _ in 0..1000 {
                w.cmd_set.incr();
            }
        })
        .join()
        .unwrap();
        assert_eq!(t.cmd_set.get(), 1000);
    }
}
