//! Telling someone outside the store that an item left memory: caches that copied a value
//! (near caches kept fresh by the server) and memcached's `watch evictions` log need it,
//! and only the store knows when it evicts or expires an item.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Why an item left (a replaced value also leaves, as `Replaced`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Departure {
    /// Deleted, or replaced by a newer value of the same key.
    Replaced,
    /// Evicted to make room (not to flash: an item moved to flash is still there).
    Evicted {
        /// It was read since it was stored.
        fetched: bool,
        /// Seconds since it was last read or written.
        idle: u32,
        /// Seconds it had left; -1: no expiry.
        ttl: i64,
        /// Value length.
        value_len: usize,
    },
    /// Found expired.
    Expired,
    /// Found flushed by `flush_all`.
    Flushed,
}

/// Receives departures, under the key's shard lock: it must be quick and must not call the
/// store.
pub trait KeyEvents: Send + Sync {
    /// Whether departures are wanted now; checked, while the gate is open, before the key
    /// is looked at.
    fn wanted(&self) -> bool;
    /// The item of `key` left.
    fn departed(&self, key: &[u8], why: Departure);
}

/// How many things may want departures (listeners, watchers): while none does, an item
/// leaving costs one load, not a call through `KeyEvents` (~30 instructions per replaced
/// item on the set path). Opened before what it counts starts wanting, closed after it
/// stops.
#[derive(Debug, Default)]
pub struct EventsGate(AtomicUsize);

impl EventsGate {
    /// One more thing may want departures.
    pub fn open(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    /// One thing that opened the gate no longer wants departures.
    pub fn close(&self) {
        let _ = self.0.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    /// Whether anything may want departures.
    #[inline(always)]
    pub fn is_open(&self) -> bool {
        self.0.load(Relaxed) != 0
    }
}

/// What a shard tells of departures, and the gate in front of it.
pub(crate) struct Events {
    pub gate: Arc<EventsGate>,
    pub to: Arc<dyn KeyEvents>,
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::test_util::*;
    use crate::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(Vec<u8>, Departure)>>);

    impl KeyEvents for Seen {
        fn wanted(&self) -> bool {
            true
        }
        fn departed(&self, key: &[u8], why: Departure) {
            self.0.lock().unwrap().push((key.to_vec(), why));
        }
    }

    fn seen(s: &Seen, key: &str) -> Vec<Departure> {
        let v = s.0.lock().unwrap();
        v.iter()
            .filter(|(k, _)| k == key.as_bytes())
            .map(|(_, d)| *d)
            .collect()
    }

    fn open_gate() -> Arc<EventsGate> {
        let g = Arc::new(EventsGate::default());
        g.open();
        g
    }

    #[test]
    fn replaced_deleted_expired_and_evicted_items_are_told() {
        let s = store_mb(1);
        let ev = Arc::new(Seen::default());
        s.set_events(ev.clone(), open_gate());
        set(&s, "a", "1", T0);
        assert!(seen(&ev, "a").is_empty(), "a new key replaces nothing");
        set(&s, "a", "2", T0);
        assert_eq!(seen(&ev, "a"), [Departure::Replaced]);
        s.delete(b"a", T0, &DeleteOpts::default());
        assert_eq!(seen(&ev, "a").len(), 2);

        let mut req = StoreRequest::new(StoreMode::Set, b"short", b"v");
        req.exptime = T0 + 5;
        s.store(req, T0);
        assert_eq!(val(&s, "short", T0 + 10), None);
        assert_eq!(seen(&ev, "short"), [Departure::Expired]);

        // Fill well past the limit: the first keys are evicted, and said to be.
        let big = "x".repeat(1000);
        for i in 0..3000 {
            set(&s, &format!("k{i}"), &big, T0);
        }
        let evicted = seen(&ev, "k0");
        assert!(
            matches!(
                evicted.as_slice(),
                [Departure::Evicted {
                    fetched: false,
                    ttl: -1,
                    value_len: 1000,
                    ..
                }]
            ),
            "{evicted:?}"
        );
    }

    #[test]
    fn nothing_is_built_when_not_wanted() {
        struct Off;
        impl KeyEvents for Off {
            fn wanted(&self) -> bool {
                false
            }
            fn departed(&self, _: &[u8], _: Departure) {
                panic!("told while not wanted");
            }
        }
        let s = store_mb(1);
        s.set_events(Arc::new(Off), open_gate());
        set(&s, "a", "1", T0);
        set(&s, "a", "2", T0);
    }

    #[test]
    fn a_closed_gate_asks_nothing_and_tells_nothing() {
        struct Asked;
        impl KeyEvents for Asked {
            fn wanted(&self) -> bool {
                panic!("asked while the gate is closed");
            }
            fn departed(&self, _: &[u8], _: Departure) {
                panic!("told while the gate is closed");
            }
        }
        let s = store_mb(1);
        let gate = open_gate();
        s.set_events(Arc::new(Asked), gate.clone());
        gate.close();
        set(&s, "a", "1", T0);
        set(&s, "a", "2", T0);
        s.delete(b"a", T0, &DeleteOpts::default());

        // Opened again, departures are asked about again.
        let ev = Arc::new(Seen::default());
        s.set_events(ev.clone(), gate.clone());
        gate.open();
        set(&s, "b", "1", T0);
        set(&s, "b", "2", T0);
        assert_eq!(seen(&ev, "b"), [Departure::Replaced]);
    }
}
