//! What the store says about items leaving memory, passed on: near-cache notices
//! (`tracking`) and memcached's `watch evictions` lines.

use std::sync::Arc;

use mio::Waker;
use store::{Departure, KeyEvents};

use crate::tracking::Tracker;
use crate::watch::{self, Hub};

pub struct Departures {
    pub tracking: Arc<Tracker>,
    pub watch: Arc<Hub>,
    pub wakers: Vec<Arc<Waker>>,
}

impl KeyEvents for Departures {
    #[inline]
    fn wanted(&self) -> bool {
        self.tracking.active() || self.watch.wants(watch::EVICTIONS)
    }

    fn departed(&self, key: &[u8], why: Departure) {
        if let Departure::Evicted {
            fetched,
            idle,
            ttl,
            value_len,
        } = why
        {
            if self.watch.wants(watch::EVICTIONS) {
                watch::evicted(
                    &self.watch,
                    &self.wakers,
                    key,
                    fetched,
                    ttl,
                    idle,
                    value_len,
                );
            }
        }
        // A write announces its key itself, after the store has the new value (and a
        // compaction moving an item is no change).
        if why != Departure::Replaced {
            self.tracking.changed(key, &self.watch, &self.wakers);
        }
    }
}
