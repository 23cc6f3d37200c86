//! State shared by every thread of one server: settings, the store, and the merged-on-read stats.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::stats::ThreadStats;

/// What `stats conns` shows of one client connection.
/// Kept small and without heap data of its own: there is one per open connection. The peer's
/// address is asked of the socket when `stats conns` runs (the registry's lock keeps the fd
/// open meanwhile), not held by every idle connection.
pub struct ConnInfo {
    pub fd: i32,
    pub last_cmd: u32,
    /// The listener's name, shared by all its connections.
    pub listen: Arc<str>,
}

/// A worker's open connections by token for `stats conns`. Tokens are its connection table's
/// dense indices, so a vector indexed by them holds each in one entry, where a hash map's
/// buckets cost about twice as much per idle connection.
#[derive(Default)]
pub struct Registry(Vec<Option<ConnInfo>>);

impl Registry {
    pub fn insert(&mut self, token: usize, info: ConnInfo) {
        if token >= self.0.len() {
            self.0.resize_with(token + 1, || None);
        }
        self.0[token] = Some(info);
    }

    pub fn get_mut(&mut self, token: usize) -> Option<&mut ConnInfo> {
        self.0.get_mut(token)?.as_mut()
    }

    pub fn remove(&mut self, token: usize) -> Option<ConnInfo> {
        self.0.get_mut(token)?.take()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConnInfo> {
        self.0.iter().flatten()
    }
}

pub struct Shared {
    pub settings: Settings,
    pub limits: proto::Limits,
    pub store: store::Store,
    /// One per worker thread; only that worker writes its entry.
    pub stats: Vec<Arc<ThreadStats>>,
    /// Per worker, keyed by connection token: written by that worker on connect, close and at
    /// most once a second per busy connection; read by `stats conns`.
    pub registry: Vec<Mutex<Registry>>,
    pub curr_conns: AtomicUsize,
    /// Open connections per worker: the acceptor adds, the worker subtracts on close.
    pub worker_conns: Vec<AtomicUsize>,
    /// Per worker, its recently busy connections counted by the CPU group their packets
    /// arrive on (`placement::CPU_GROUPS`); only that worker writes its row.
    pub cpu_groups: Vec<Vec<AtomicUsize>>,
    pub shutdown: AtomicBool,
    /// The stop was asked for by SIGUSR1 or `shutdown graceful`: save items for `-e`.
    pub graceful: AtomicBool,
    /// `verbosity` can change it at run time.
    pub verbosity: AtomicU8,
    pub process_start: u32,
    pub wakers: Vec<Arc<mio::Waker>>,
    /// `-Y`: text-protocol connections log in against this file first; `-S`: the SASL users
    /// (from $MEMCACHED_SASL_PWDB). memcached allows only one of the two at a time.
    pub auth: Option<crate::auth::Authenticator>,
    /// With `-Z`: the certificates and the config new TLS connections start from.
    pub tls: Option<crate::tls::Tls>,
    /// Latency histograms and hot keys (`stats latency`, `stats hotkeys`, `/metrics`).
    pub telemetry: crate::metrics::Telemetry,
    /// With a flash tier: the I/O threads' queues that text gets read flash items through.
    pub flash_io: Option<crate::flash::reads::FlashIo>,
    /// `watch` connections and what they asked to see.
    pub watch: Arc<crate::watch::Hub>,
    /// Near-cache listeners and the keys read for them (`track`).
    pub tracking: Arc<crate::tracking::Tracker>,
}

impl Shared {
    pub fn verbose(&self) -> u8 {
        self.verbosity.load(Relaxed)
    }

    /// Asks every thread to stop and the items to be saved for a warm restart (`-e`).
    pub fn request_graceful_shutdown(&self) {
        self.graceful.store(true, Relaxed);
        self.request_shutdown();
    }

    /// Asks every thread to stop; used by signals and the `shutdown` command.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Relaxed);
        for w in &self.wakers {
            let _ = w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    /// One registry entry per open connection (bench/idle-conns).
    #[test]
    fn registry_entry_stays_small() {
        let size = std::mem::size_of::<Option<super::ConnInfo>>();
        assert!(size <= 24, "a registry entry grew to {size} bytes");
    }
}
