//! State shared by the worker threads for one configuration generation: pools with their
//! resolved servers, server health (failure counts, ejection) and the live ring.
//!
//! Health is in atomics so every thread sees an ejection at once; the ring is rebuilt by
//! whichever thread ejects (or by the control thread when a host comes back) and swapped
//! under a `RwLock<Arc<Ring>>`. Workers keep their own `Arc<Ring>` and only take the read
//! lock when the pool's `ring_gen` moved, so the hot path is one atomic load.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ring::Ring;

use crate::counters::PoolCounters;
use crate::error::RouteError;
use nutconf::{Config, Pool, ServerAddr};
use routetree::tko::{Tko, TkoSettings};

/// Host names already looked up, and their addresses.
pub type HostAddrs = std::collections::BTreeMap<String, std::net::IpAddr>;

/// Where a backend is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// One backend server of a pool and its health.
pub struct ServerRt {
    /// The name nutcracker's stats use (its `server->name`, which ketama also hashes).
    pub stats_name: String,
    pub addr: BackendAddr,
    failures: AtomicU32,
    ejected: AtomicBool,
    /// When an ejected server may be probed again (ms since the router started).
    retry_at_ms: AtomicU64,
    /// Microseconds since the epoch of the last ejection (nutcracker's `server_ejected_at`).
    pub ejected_at_us: AtomicI64,
}

impl ServerRt {
    pub fn is_ejected(&self) -> bool {
        self.ejected.load(Relaxed)
    }
}

/// One pool at run time.
pub struct PoolRt {
    pub cfg: Pool,
    pub servers: Vec<ServerRt>,
    base_ring: Ring,
    ring: RwLock<Arc<Ring>>,
    ring_gen: AtomicU64,
    health: Mutex<()>,
    pub server_ejects: AtomicU64,
    /// Clients connected to this pool, all threads (for `client_connections`).
    pub clients: AtomicI64,
    /// Per worker thread counters; each thread writes only its own.
    pub counters: Vec<PoolCounters>,
    started: Instant,
    /// The TLS configs the pool's `tls*` directives ask for, read at (re)load.
    pub tls: crate::tls::TlsConfigs,
    /// mcrouter pools: TKO state per server (empty for nutcracker pools, which eject).
    pub tko: Vec<Tko>,
    pub tko_cfg: Option<TkoSettings>,
    /// Hot-key handling, when the pool has it on (memcached pools without big-value
    /// splitting).
    pub hot: Option<Arc<crate::hot::HotShared>>,
    /// A Redis Cluster or Sentinel pool: where its servers were learned from, and a
    /// cluster's slot map.
    pub learned: Option<Box<crate::learned::Live>>,
}

impl PoolRt {
    pub fn new(mut cfg: Pool, threads: usize, started: Instant) -> Result<PoolRt, RouteError> {
        // nutcracker sorts a pool's servers by name (shorter first, then bytewise) while
        // validating and indexes them in that order, which modula and random placement see.
        cfg.servers.sort_by(|a, b| {
            (a.ketama_name.len(), a.ketama_name.as_bytes())
                .cmp(&(b.ketama_name.len(), b.ketama_name.as_bytes()))
        });
        Self::build(cfg, threads, started, &HostAddrs::new())
    }

    /// An mcrouter pool: servers in the config's order (route handles name them by
    /// index), with TKO tracking instead of ejection. Host names are looked up in `names`.
    pub fn backend(
        cfg: Pool,
        tko: TkoSettings,
        threads: usize,
        started: Instant,
        names: &HostAddrs,
    ) -> Result<PoolRt, RouteError> {
        let mut rt = Self::build(cfg, threads, started, names)?;
        rt.tko = rt.servers.iter().map(|_| Tko::default()).collect();
        rt.tko_cfg = Some(tko);
        let n = rt.servers.len();
        for c in &mut rt.counters {
            c.mc = (0..n).map(|_| Default::default()).collect();
        }
        Ok(rt)
    }

    fn build(
        cfg: Pool,
        threads: usize,
        started: Instant,
        names: &HostAddrs,
    ) -> Result<PoolRt, RouteError> {
        let mut servers = Vec::with_capacity(cfg.servers.len());
        for spec in &cfg.servers {
            let addr = match &spec.addr {
                ServerAddr::Tcp { host, port } => {
                    let addr = match names.get(host) {
                        Some(ip) => Some(SocketAddr::new(*ip, *port)),
                        None => (host.as_str(), *port)
                            .to_socket_addrs()
                            .ok()
                            .and_then(|mut a| a.next()),
                    };
                    let addr = addr.ok_or_else(|| {
                        RouteError::Server(format!(
                            "pool '{}': cannot resolve server '{host}:{port}'",
                            cfg.name
                        ))
                    })?;
                    BackendAddr::Tcp(addr)
                }
                ServerAddr::Unix { path } => BackendAddr::Unix(PathBuf::from(path)),
            };
            servers.push(ServerRt {
                stats_name: spec.ketama_name.clone(),
                addr,
                failures: AtomicU32::new(0),
                ejected: AtomicBool::new(false),
                retry_at_ms: AtomicU64::new(0),
                ejected_at_us: AtomicI64::new(0),
            });
        }
        let tls = crate::tls::TlsConfigs::load(&cfg.tls)
            .map_err(|e| RouteError::Tls(format!("pool '{}': TLS: {e}", cfg.name)))?;
        let base_ring = cfg.ring();
        let counters = (0..threads)
            .map(|_| PoolCounters::new(servers.len()))
            .collect();
        let hot = (cfg.hot_keys.enabled && !cfg.redis && cfg.big_value_split_threshold == 0)
            .then(|| Arc::new(crate::hot::HotShared::new(cfg.hot_keys.clone(), threads)));
        Ok(PoolRt {
            ring: RwLock::new(Arc::new(base_ring.clone())),
            base_ring,
            ring_gen: AtomicU64::new(1),
            health: Mutex::new(()),
            server_ejects: AtomicU64::new(0),
            clients: AtomicI64::new(0),
            counters,
            servers,
            cfg,
            started,
            tls,
            tko: Vec::new(),
            tko_cfg: None,
            hot,
            learned: None,
        })
    }

    /// The current ring if it changed since generation `seen`.
    pub fn ring_if_newer(&self, seen: u64) -> Option<(u64, Arc<Ring>)> {
        let gen = self.ring_gen.load(Acquire);
        if gen == seen {
            return None;
        }
        Some((
            gen,
            self.ring.read().unwrap_or_else(|e| e.into_inner()).clone(),
        ))
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Milliseconds since the router started (the clock learned pools' maps are dated by).
    pub fn uptime_ms(&self) -> u64 {
        self.now_ms()
    }

    /// A reply came back from server `s`: its consecutive failure count starts over.
    #[inline]
    pub fn record_success(&self, s: usize) {
        let f = &self.servers[s].failures;
        if f.load(Relaxed) != 0 {
            f.store(0, Relaxed);
        }
        if let Some(t) = self.tko.get(s) {
            t.on_success();
        }
    }

    /// Whether server `s` of an mcrouter pool is TKO (requests fail at once).
    #[inline]
    pub fn is_tko(&self, s: usize) -> bool {
        self.tko.get(s).is_some_and(Tko::is_tko)
    }

    /// An mcrouter pool's server timed out (`connect`: while connecting, or the
    /// connection was refused): counts towards a soft TKO, or makes a hard one.
    pub fn record_tko_failure(&self, s: usize, connect: bool) {
        let (Some(t), Some(cfg)) = (self.tko.get(s), &self.tko_cfg) else {
            return;
        };
        let now = self.now_ms();
        let tko = if connect {
            t.on_connect_error(cfg, now)
        } else {
            t.on_timeout(cfg, now)
        };
        if tko {
            crate::log::warn(&format!(
                "pool '{}': server '{}' marked {}; probing in {} ms",
                self.cfg.name,
                self.servers[s].stats_name,
                t.describe(),
                cfg.probe_initial_ms
            ));
        }
    }

    /// TKO servers whose probe is due; the caller probes each and reports with
    /// [`PoolRt::tko_probe_result`].
    pub fn tko_probes_due(&self) -> Vec<usize> {
        let now = self.now_ms();
        (0..self.tko.len())
            .filter(|&s| self.tko[s].take_probe(now))
            .collect()
    }

    pub fn tko_probe_result(&self, s: usize, ok: bool) {
        let (Some(t), Some(cfg)) = (self.tko.get(s), &self.tko_cfg) else {
            return;
        };
        t.probe_result(ok, cfg, self.now_ms());
        if ok {
            crate::log::warn(&format!(
                "pool '{}': server '{}' is back (probe answered)",
                self.cfg.name, self.servers[s].stats_name
            ));
        }
    }

    /// A connection to server `s` failed (refused, reset, timed out). Returns true when
    /// this failure ejected it.
    pub fn record_failure(&self, s: usize) -> bool {
        if !self.cfg.auto_eject_hosts {
            return false;
        }
        let server = &self.servers[s];
        let n = server.failures.fetch_add(1, Relaxed) + 1;
        if n < self.cfg.server_failure_limit {
            return false;
        }
        let _guard = self.health.lock().unwrap_or_else(|e| e.into_inner());
        if server.ejected.load(Relaxed) {
            return false;
        }
        server.failures.store(0, Relaxed);
        server.ejected.store(true, Relaxed);
        let retry = self.now_ms() + self.cfg.server_retry_timeout.as_millis() as u64;
        server.retry_at_ms.store(retry, Relaxed);
        server.ejected_at_us.store(crate::log::epoch_us(), Relaxed);
        self.server_ejects.fetch_add(1, Relaxed);
        self.rebuild_locked();
        crate::log::warn(&format!(
            "pool '{}': server '{}' ejected after {} failures; retry in {} ms",
            self.cfg.name,
            server.stats_name,
            self.cfg.server_failure_limit,
            self.cfg.server_retry_timeout.as_millis()
        ));
        true
    }

    /// Ejected servers whose retry time has come.
    pub fn due_for_retry(&self) -> Vec<usize> {
        let now = self.now_ms();
        (0..self.servers.len())
            .filter(|&i| {
                let s = &self.servers[i];
                s.is_ejected() && s.retry_at_ms.load(Relaxed) <= now
            })
            .collect()
    }

    /// The probe of an ejected server succeeded (`true`: back in the ring) or failed
    /// (`false`: wait another `server_retry_timeout`).
    pub fn retry_result(&self, s: usize, ok: bool) {
        let _guard = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let server = &self.servers[s];
        if ok {
            server.ejected.store(false, Relaxed);
            server.failures.store(0, Relaxed);
            self.rebuild_locked();
            crate::log::warn(&format!(
                "pool '{}': server '{}' is back",
                self.cfg.name, server.stats_name
            ));
        } else {
            let retry = self.now_ms() + self.cfg.server_retry_timeout.as_millis() as u64;
            server.retry_at_ms.store(retry, Relaxed);
        }
    }

    fn rebuild_locked(&self) {
        let live: Vec<bool> = self.servers.iter().map(|s| !s.is_ejected()).collect();
        let mut ring = self.base_ring.clone();
        ring.rebuild(&live);
        *self.ring.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ring);
        self.ring_gen.fetch_add(1, Release);
    }

    /// The TLS config and the name to verify for connections to server `s`; `None` when it
    /// speaks plain (the pool's `tls`, or the server's own mcrouter suffix).
    pub fn server_tls(&self, s: usize) -> Option<(&Arc<rustls::ClientConfig>, &str)> {
        let config = self.tls.servers.as_ref()?;
        let spec = &self.cfg.servers[s];
        if spec.tls == Some(false) {
            return None;
        }
        let name = match (&self.cfg.tls.server_name, &spec.addr) {
            (Some(name), _) => name.as_str(),
            (None, ServerAddr::Tcp { host, .. }) => host.as_str(),
            (None, ServerAddr::Unix { .. }) => "localhost",
        };
        Some((config, name))
    }

    /// The listen address as a key identifying "the same listener" across reloads.
    pub fn listen_key(&self) -> String {
        match &self.cfg.listen {
            nutconf::Listen::Tcp { host, port } => format!("tcp:{host}:{port}"),
            nutconf::Listen::Unix { path, .. } => format!("unix:{path}"),
        }
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.cfg.timeout
    }
}

/// The route tree of an mcrouter config and where its pools are in [`Shared::pools`].
pub struct McRoutes {
    pub config: routetree::Config,
    /// The default routing prefix (`--route-prefix`).
    pub prefix: String,
    /// `pools[id]`: the index in `Shared::pools` of routetree pool `id`.
    pub pools: Vec<usize>,
    /// Which FailoverRoute child handed out each lease token (for this generation).
    pub leases: routetree::lease::LeaseBook,
    /// When this generation's config was read (`__mcrouter__.config_age`).
    pub loaded: Instant,
    /// The config file's path, when the config came from a file (`__mcrouter__.config_file`).
    pub config_file: Option<String>,
    /// The timeout settings, which give each pool's server timeout (destinations' names
    /// show it).
    pub timeouts: routetree::timeouts::Timeouts,
    /// The settings under mcrouter's option names (`__mcrouter__.options`).
    pub options: Vec<(&'static str, String)>,
    /// The config has a BigValueRoute: requests ask the tree for its settings.
    pub big_values: bool,
}

/// One configuration generation.
pub struct Shared {
    pub pools: Vec<Arc<PoolRt>>,
    /// The first `listening` pools accept clients; the rest (an mcrouter config's pools)
    /// are only sent to.
    pub listening: usize,
    /// The route tree when the config is mcrouter's.
    pub mcrouter: Option<Arc<McRoutes>>,
}

impl Shared {
    /// The pools clients connect to.
    pub fn listening_pools(&self) -> &[Arc<PoolRt>] {
        &self.pools[..self.listening]
    }

    pub fn new(config: Config, threads: usize, started: Instant) -> Result<Shared, RouteError> {
        let pools = config
            .pools
            .iter()
            .map(|p| PoolRt::new(p.clone(), threads, started).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Shared {
            listening: pools.len(),
            pools,
            mcrouter: None,
        })
    }
}

/// Process-wide connection counters (nutcracker's `total_connections`, `curr_connections`),
/// one slot per worker so no two threads write the same counter.
pub struct Globals {
    pub started: Instant,
    pub threads: usize,
    pub per_worker: Vec<crate::counters::WorkerCounters>,
    /// Connections handed to each worker and not yet adopted by it: the acceptor counts
    /// them as that worker's load so a burst of connects is dealt out evenly.
    pub handed_over: Vec<std::sync::atomic::AtomicI64>,
    /// Client requests the whole router may have in flight to servers (`--active-req-limit`;
    /// 0: no limit).
    pub active_req_limit: u32,
    /// Requests one client connection may have outstanding before it is no longer read
    /// (mcrouter's `--max-client-outstanding-reqs`; 0: only the router's own cap).
    pub max_client_outstanding: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(yaml: &str) -> PoolRt {
        let cfg = Config::from_yaml_str(yaml).unwrap();
        PoolRt::new(cfg.pools[0].clone(), 2, Instant::now()).unwrap()
    }

    const YAML: &str = "p:\n  listen: 127.0.0.1:22121\n  auto_eject_hosts: true\n  server_failure_limit: 2\n  server_retry_timeout: 0\n  servers:\n   - 127.0.0.1:1:1\n   - 127.0.0.1:2:1 two\n";

    #[test]
    fn ejects_after_failure_limit_and_remaps() {
        let p = pool(YAML);
        // Sorted as nutcracker sorts: shorter names first.
        assert_eq!(p.servers[0].stats_name, "two");
        assert_eq!(p.servers[1].stats_name, "127.0.0.1:1");
        let (gen, ring) = p.ring_if_newer(0).unwrap();
        let key = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| ring.server_for(k.as_bytes()) == Some(0))
            .unwrap();
        assert!(!p.record_failure(0));
        p.record_success(0);
        assert!(!p.record_failure(0), "success resets the count");
        assert!(p.record_failure(0));
        assert!(p.servers[0].is_ejected());
        assert_eq!(p.server_ejects.load(Relaxed), 1);
        let (gen2, ring2) = p.ring_if_newer(gen).unwrap();
        assert_eq!(ring2.server_for(key.as_bytes()), Some(1));
        assert_eq!(p.due_for_retry(), vec![0]);
        p.retry_result(0, true);
        let (_, ring3) = p.ring_if_newer(gen2).unwrap();
        assert_eq!(ring3.server_for(key.as_bytes()), Some(0));
        assert!(p.due_for_retry().is_empty());
    }

    #[test]
    fn no_ejection_without_auto_eject() {
        let p = pool(&YAML.replace("auto_eject_hosts: true", "auto_eject_hosts: false"));
        for _ in 0..10 {
            assert!(!p.record_failure(1));
        }
        assert!(!p.servers[1].is_ejected());
        assert!(p.ring_if_newer(1).is_none());
    }

    #[test]
    fn redis_pools_are_served() {
        let cfg = Config::from_yaml_str(&YAML.replace("  servers:", "  redis: true\n  servers:"))
            .unwrap();
        let shared = Shared::new(cfg, 1, Instant::now()).unwrap();
        assert!(shared.pools[0].cfg.redis);
    }
}
