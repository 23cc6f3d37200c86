//! `memfleet route`: a multi-threaded, drop-in replacement for twemproxy (nutcracker) in
//! front of memcached pools. Reads nutcracker.yml unchanged and accepts nutcracker's flags.
//!
//! Threads: N workers (`-T`, default one per core), each a mio loop that owns its client
//! connections and its own backend connections. One worker accepts on each listen address
//! and hands new connections to a less busy worker when it has more than its share (see
//! `worker::accept`). One control thread handles SIGHUP (reload), SIGTERM/SIGINT and the
//! re-probing of ejected servers; one thread serves the stats port.
//!
//! Modules: `nutconf` (its own crate) reads nutcracker.yml, `dns` looks up its `dns:`/`srv:` servers (on the
//! control thread), `shared` holds a configuration generation and
//! server health, `route` chooses the server(s) of a request, `worker` is the event loop
//! (clients, backends, memcached and Redis routing), `stats` the counters and their report.
//! mcrouter configs: `mcrouter` (the route tree's execution, and loading a generation with
//! its host names looked up through `dns`), `mcrouter_tls` (the `:ssl` field and mcrouter's
//! TLS flags as the same `PoolTls` the YAML path uses), `mcrouter_config`
//! (`--validate-config`). `args` is the command line; `probe` tries servers out of rotation.

mod args;
mod asynclog;
mod buf;
mod cluster_slots;
mod counters;
mod dns;
mod error;
mod failovers;
mod fair_queue;
mod hot;
mod learned;
mod log;
mod mcrouter;
mod mcrouter_config;
mod mcrouter_tls;
mod mcstats;
mod metrics;
mod net;
mod probe;
mod route;
mod shared;
mod stats;
mod tls;
mod topology;
mod worker;

use std::collections::HashMap;
use std::io::Write;
use std::sync::mpsc::channel;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use net::StdListener;
use nutconf::{Config, Listen};
use shared::{Globals, Shared};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2};
use worker::{Control, ListenerUpdate, Worker};

use args::Dialect;
pub use args::RouteArgs;
pub use error::RouteError;

const DESCRIBE: &str = "pool stats:
  client_eof          \"# eof on client connections\"
  client_err          \"# errors on client connections\"
  client_connections  \"# active client connections\"
  server_ejects       \"# times backend server was ejected\"
  forward_error       \"# times we encountered a forwarding error\"
  fragments           \"# fragments created from a multi-vector request\"

server stats:
  server_eof          \"# eof on server connections\"
  server_err          \"# errors on server connections\"
  server_timedout     \"# timeouts on server connections\"
  server_connections  \"# active server connections\"
  server_ejected_at   \"timestamp when server was ejected in usec since epoch\"
  requests            \"# requests\"
  request_bytes       \"total request bytes\"
  responses           \"# responses\"
  response_bytes      \"total response bytes\"
  in_queue            \"# requests in incoming queue\"
  in_queue_bytes      \"current request bytes in incoming queue\"
  out_queue           \"# requests in outgoing queue\"
  out_queue_bytes     \"current request bytes in outgoing queue\"
";

struct Running {
    args: RouteArgs,
    dialect: Dialect,
    threads: usize,
    started: Instant,
    globals: Arc<Globals>,
    current: Arc<RwLock<Arc<Shared>>>,
    workers: Vec<worker::Peer>,
    listeners: HashMap<String, (StdListener, Listen)>,
    watch: Watch,
    dns: dns::Dns,
    /// What the last look-ups found, for DNS refreshes.
    resolved: Resolved,
    /// Learned pools' watchers report here.
    topo_tx: std::sync::mpsc::Sender<topology::watch::Change>,
    topo_rx: std::sync::mpsc::Receiver<topology::watch::Change>,
}

/// The DNS look-ups behind the running generation.
enum Resolved {
    /// A nutcracker config and its `dns:`/`srv:` servers' membership.
    Nutcracker(Config, dns::Membership, topology::Topologies),
    /// An mcrouter config's server host names and their addresses.
    Mcrouter(shared::HostAddrs),
}

/// The watched config file's last modification time, and when it was last looked at.
struct Watch {
    mtime: Option<std::time::SystemTime>,
    checked: Instant,
}

impl Watch {
    fn new(args: &RouteArgs) -> Watch {
        Watch {
            mtime: mcrouter::config_path(args).and_then(|p| modified(&p)),
            checked: Instant::now(),
        }
    }
}

fn modified(path: &std::path::Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A generation and the DNS look-ups behind it.
type Generation = (Shared, Resolved);

/// Reads the configuration (nutcracker's YAML, or mcrouter's JSON when `--config...` is
/// given) into a generation, looking up its DNS servers.
fn load_generation(
    args: &RouteArgs,
    dialect: Dialect,
    dns: &mut dns::Dns,
    threads: usize,
    started: Instant,
) -> Result<Generation, RouteError> {
    if dialect == Dialect::Mcrouter {
        let (shared, names) = mcrouter::load(args, threads, started, dns, false)?;
        return Ok((shared, Resolved::Mcrouter(names)));
    }
    let config = Config::load(&args.conf_file)?;
    let members = dns.resolve(&config)?;
    let found = topology::discover_all(&config)?;
    let shared = nutcracker_generation(&config, &members, &found, threads, started)?;
    Ok((shared, Resolved::Nutcracker(config, members, found)))
}

/// A nutcracker config's generation: DNS servers and learned Redis pools filled in.
fn nutcracker_generation(
    config: &Config,
    members: &dns::Membership,
    found: &topology::Topologies,
    threads: usize,
    started: Instant,
) -> Result<Shared, RouteError> {
    let expanded = topology::expand(&dns::expand(config, members), found);
    let mut shared = Shared::new(expanded, threads, started)?;
    topology::attach(&mut shared, config, found, started);
    Ok(shared)
}

/// `--dns-server`, else MEMFLEET_DNS_SERVER.
fn dns_server(args: &RouteArgs) -> Result<Option<std::net::SocketAddr>, RouteError> {
    if args.dns_server.is_some() {
        return Ok(args.dns_server);
    }
    match std::env::var("MEMFLEET_DNS_SERVER") {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map(Some)
            .map_err(|_| RouteError::Usage(format!("MEMFLEET_DNS_SERVER: '{v}' is not IP:PORT"))),
        _ => Ok(None),
    }
}

/// Runs the router until SIGTERM/SIGINT. Errors are for startup problems only.
pub fn run(args: RouteArgs) -> Result<(), RouteError> {
    if mcrouter_config::print_expanded(&args)? {
        return Ok(());
    }
    if !mcrouter_config::validate(&args)? {
        return Ok(());
    }
    if args.describe_stats {
        print!("{DESCRIBE}");
        return Ok(());
    }
    let dialect = args.dialect();
    if args.test_conf && dialect == Dialect::Nutcracker {
        Config::load(&args.conf_file)?;
        eprintln!(
            "memfleet route: configuration file '{}' syntax is ok",
            args.conf_file.display()
        );
        return Ok(());
    }
    // KeySplitRoute's replica for this host, as mcrouter's host id picks it.
    routetree::plan::set_host_id(ring::hash::Hash::Crc32.hash(stats::hostname().as_bytes()));
    // Signals first: one that arrives while starting must not kill or stop the process.
    let signals = ControlSignals::new().map_err(|e| RouteError::Run(format!("signal: {e}")))?;
    let log_file = args
        .output
        .as_deref()
        .map(log::open)
        .transpose()
        .map_err(RouteError::File)?;
    log::init(args.verbose, log_file);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let started = Instant::now();
    let mut dns = dns::Dns::new(dns_server(&args)?);
    let (shared, resolved) = load_generation(&args, dialect, &mut dns, threads, started)?;
    let shared = Arc::new(shared);

    // Bind everything before daemonizing so errors reach the terminal.
    let mut listeners = HashMap::new();
    for pool in shared.listening_pools() {
        let l = bind_pool(pool)?;
        listeners.insert(pool.listen_key(), (l, pool.cfg.listen.clone()));
    }
    let stats_listener = match args.stats_port(dialect) {
        Some(port) => Some(
            std::net::TcpListener::bind((args.stats_addr.as_str(), port)).map_err(|e| {
                RouteError::Listen(format!(
                    "cannot listen on stats {}:{port}: {e}",
                    args.stats_addr
                ))
            })?,
        ),
        None => None,
    };
    let metrics_listener = args
        .metrics
        .as_deref()
        .map(telemetry::http::bind)
        .transpose()?;

    // As nutcracker: an unwritable pid file stops the start.
    let pid_file = args.pid_path(dialect);
    if args.daemonize {
        daemon::daemonize(false, pid_file.as_deref(), daemon::PidFileError::Fail)?;
    } else if let Some(p) = &pid_file {
        daemon::write_pid_file(p, daemon::PidFileError::Fail)?;
    }

    // After daemonizing: the replay thread must live in the process that serves.
    if let (Some(dir), false) = (&args.async_dir, args.asynclog_disable) {
        if dialect == Dialect::Mcrouter {
            let timeout = std::time::Duration::from_millis(args.server_timeout.max(1));
            asynclog::start(dir.clone(), args.asynclog_max_bytes, timeout)
                .map_err(RouteError::File)?;
        }
    }

    let globals = Arc::new(Globals {
        started,
        threads,
        per_worker: (0..threads)
            .map(|_| counters::WorkerCounters::default())
            .collect(),
        handed_over: (0..threads).map(|_| Default::default()).collect(),
        active_req_limit: args.active_req_limit,
        max_client_outstanding: match dialect {
            Dialect::Mcrouter => args.max_client_outstanding_reqs,
            Dialect::Nutcracker => 0,
        },
    });
    let current = Arc::new(RwLock::new(shared.clone()));
    // All pollers first: every worker gets a handle on every other one to hand over
    // the connections it accepts.
    let mut polls = Vec::with_capacity(threads);
    let mut workers: Vec<worker::Peer> = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (poll, waker) =
            Worker::new_poll().map_err(|e| RouteError::Run(format!("poll: {e}")))?;
        let (tx, rx) = channel();
        polls.push((poll, rx));
        workers.push((tx, waker));
    }
    for (id, (poll, rx)) in polls.into_iter().enumerate() {
        let mut updates = Vec::new();
        for (i, pool) in shared.listening_pools().iter().enumerate() {
            let (l, _) = &listeners[&pool.listen_key()];
            updates.push(ListenerUpdate {
                key: pool.listen_key(),
                pool: i,
                new: Some(clone_listener(l)?),
            });
        }
        let (tx, waker) = &workers[id];
        tx.send(Control::Reload {
            shared: shared.clone(),
            listeners: updates,
        })
        .map_err(|_| RouteError::Run("worker channel closed".into()))?;
        waker
            .wake()
            .map_err(|e| RouteError::Run(format!("waker: {e}")))?;
        let w = Worker::new(
            id,
            poll,
            rx,
            workers.clone(),
            shared.clone(),
            globals.clone(),
        );
        std::thread::Builder::new()
            .name(format!("route-w{id}"))
            .spawn(move || {
                // A worker that died would leave its clients hanging: better to exit and
                // let the supervisor restart the router.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.run())).is_err() {
                    log::warn(&format!("worker {id} panicked; exiting"));
                    std::process::exit(70);
                }
            })
            .map_err(spawn_failed)?;
    }
    if let Some(stats_listener) = stats_listener {
        let current = current.clone();
        let globals = globals.clone();
        std::thread::Builder::new()
            .name("route-stats".into())
            .spawn(move || serve_stats(stats_listener, current, globals))
            .map_err(spawn_failed)?;
    }
    if let Some(listener) = metrics_listener {
        let current = current.clone();
        let globals = globals.clone();
        telemetry::http::spawn(listener, "route-metrics", move || {
            let shared = current.read().unwrap_or_else(|e| e.into_inner()).clone();
            metrics::render(&shared, &globals)
        })?;
    }
    log::notice(&format!(
        "memfleet route {} started on pid {} with {threads} threads, {} pools",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        match shared.mcrouter {
            // Its listening pools have no servers: count the mcrouter pools.
            Some(_) => shared.pools.len() - shared.listening,
            None => shared.pools.len(),
        }
    ));
    let watch = Watch::new(&args);
    let (topo_tx, topo_rx) = channel();
    for pool in &shared.pools {
        topology::watch::spawn(pool, started, topo_tx.clone());
    }
    let mut running = Running {
        args,
        dialect,
        threads,
        started,
        globals,
        current,
        workers,
        listeners,
        watch,
        dns,
        resolved,
        topo_tx,
        topo_rx,
    };
    running.control_loop(signals);
    Ok(())
}

fn bind_pool(pool: &shared::PoolRt) -> Result<StdListener, RouteError> {
    StdListener::bind(&pool.cfg.listen, pool.cfg.backlog)
        .map_err(|e| RouteError::Listen(format!("pool '{}': cannot listen: {e}", pool.cfg.name)))
}

/// A worker's handle on a listening socket.
fn clone_listener(l: &StdListener) -> Result<net::Listener, RouteError> {
    l.try_clone()
        .map_err(|e| RouteError::Run(format!("listener: {e}")))
}

fn spawn_failed(e: std::io::Error) -> RouteError {
    RouteError::Run(format!("spawn: {e}"))
}

/// The signals the control loop acts on, as nutcracker does where it has a meaning there:
/// TERM/INT stop; HUP re-opens the `-o` log file and (memfleet's addition) reloads the
/// configuration; TTIN/TTOU make the log chattier or quieter; USR1/USR2 are ignored. Caught
/// from the start, so none of them stops (TTIN, TTOU) or kills the process by default.
struct ControlSignals(signal_hook::iterator::Signals);

impl ControlSignals {
    fn new() -> std::io::Result<ControlSignals> {
        signal_hook::iterator::Signals::new([
            SIGTERM, SIGINT, SIGHUP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2,
        ])
        .map(ControlSignals)
    }
}

fn serve_stats(
    listener: std::net::TcpListener,
    current: Arc<RwLock<Arc<Shared>>>,
    globals: Arc<Globals>,
) {
    let source = stats::hostname();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let shared = current.read().unwrap_or_else(|e| e.into_inner()).clone();
        let body = stats::json(&shared, &globals, &source);
        let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = conn.write_all(body.as_bytes());
    }
}

impl Running {
    fn control_loop(&mut self, mut signals: ControlSignals) {
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let mut hup = false;
            for sig in signals.0.pending() {
                match sig {
                    SIGTERM | SIGINT => {
                        self.shutdown();
                        return;
                    }
                    SIGHUP => hup = true,
                    SIGTTIN | SIGTTOU => log::change_level(sig == SIGTTIN),
                    _ => log::notice(&format!("signal {sig} ignored")),
                }
            }
            if hup {
                if let Some(path) = &self.args.output {
                    log::reopen(path);
                }
            }
            let changed = self.watched_file_changed();
            if hup || changed {
                if hup {
                    // The file as of now is what this reload reads: the watch must not
                    // reload it again for the same change.
                    self.watch.mtime = mcrouter::config_path(&self.args).and_then(|p| modified(&p));
                }
                match self.reload() {
                    Ok(()) => log::notice("configuration reloaded"),
                    Err(e) => log::warn(&format!(
                        "reload refused, keeping the old configuration: {e}"
                    )),
                }
            }
            if self.dns.due() {
                self.refresh_dns();
            }
            while let Ok(change) = self.topo_rx.try_recv() {
                self.topology_changed(change);
            }
            let shared = self
                .current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            for pool in &shared.pools {
                for s in pool.due_for_retry() {
                    probe::spawn_probe(pool.clone(), s);
                }
                for s in pool.tko_probes_due() {
                    probe::spawn_tko_probe(pool.clone(), s);
                }
            }
        }
    }

    /// An mcrouter config file is watched as mcrouter does: a new modification time
    /// (checked once a second) reloads it, as SIGHUP does.
    fn watched_file_changed(&mut self) -> bool {
        let Some(path) = mcrouter::config_path(&self.args) else {
            return false;
        };
        if self.watch.checked.elapsed() < Duration::from_secs(1) {
            return false;
        }
        self.watch.checked = Instant::now();
        let mtime = modified(&path);
        if mtime.is_none() || mtime == self.watch.mtime {
            return false;
        }
        let first = self.watch.mtime.is_none();
        self.watch.mtime = mtime;
        !first
    }

    /// An mcrouter config's host names looked up again: when an address changed, the
    /// generation built with the new ones (from the config file as it is now) is installed.
    fn refresh_mcrouter_dns(&mut self, old: &shared::HostAddrs) {
        let built = mcrouter::load(&self.args, self.threads, self.started, &mut self.dns, true);
        let (shared, names) = match built {
            Ok(b) => b,
            Err(e) => {
                // Look again at the next interval.
                self.dns
                    .schedule(Some(Duration::from_millis(self.args.dns_refresh_ms.max(1))));
                log::warn(&format!("{e}; keeping the current servers"));
                return;
            }
        };
        let changed = mcrouter::changed_hosts(old, &names);
        if changed.is_empty() {
            return;
        }
        match self.install(shared) {
            Ok(()) => {
                log::notice(&format!(
                    "dns: server addresses changed: {}",
                    changed.join(", ")
                ));
                self.resolved = Resolved::Mcrouter(names);
            }
            Err(e) => log::warn(&format!("dns: new addresses refused: {e}")),
        }
    }

    /// Looks the DNS servers up again; a changed membership is installed as a reload of
    /// the config last loaded (the file is read again only on SIGHUP).
    fn refresh_dns(&mut self) {
        let (config, old, found) = match &self.resolved {
            Resolved::Nutcracker(config, old, found) => (config, old, found),
            Resolved::Mcrouter(old) => return self.refresh_mcrouter_dns(&old.clone()),
        };
        let members = match self.dns.resolve(config) {
            Ok(m) => m,
            Err(e) => {
                log::warn(&format!("{e}; keeping the current servers"));
                return;
            }
        };
        if &members == old {
            return;
        }
        let (added, removed) = dns::diff(old, &members);
        let (config, found) = (config.clone(), found.clone());
        let built = nutcracker_generation(&config, &members, &found, self.threads, self.started);
        match built.and_then(|shared| self.install(shared)) {
            Ok(()) => {
                log::notice(&format!(
                    "dns: servers added [{}], removed [{}]",
                    added.join(", "),
                    removed.join(", ")
                ));
                self.resolved = Resolved::Nutcracker(config, members, found);
            }
            Err(e) => log::warn(&format!("dns: new membership refused: {e}")),
        }
    }

    /// A learned pool's watcher found a new node set or primary: installed as a new
    /// generation of the config last loaded.
    fn topology_changed(&mut self, change: topology::watch::Change) {
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let watched = current
            .pools
            .iter()
            .any(|p| p.cfg.name == change.pool && Arc::as_ptr(p) == change.from);
        let Resolved::Nutcracker(config, members, found) = &self.resolved else {
            return;
        };
        if !watched {
            return;
        }
        let mut found = found.clone();
        let before = found.insert(change.pool.clone(), change.found.clone());
        let (config, members) = (config.clone(), members.clone());
        let built = nutcracker_generation(&config, &members, &found, self.threads, self.started);
        match built.and_then(|shared| self.install(shared)) {
            Ok(()) => {
                log::notice(&format!(
                    "pool '{}': {}",
                    change.pool,
                    topology::describe_change(before.as_ref(), &change.found)
                ));
                self.resolved = Resolved::Nutcracker(config, members, found);
            }
            Err(e) => log::warn(&format!("pool '{}': new servers refused: {e}", change.pool)),
        }
    }

    fn reload(&mut self) -> Result<(), RouteError> {
        let (shared, resolved) = load_generation(
            &self.args,
            self.dialect,
            &mut self.dns,
            self.threads,
            self.started,
        )?;
        self.install(shared)?;
        self.resolved = resolved;
        Ok(())
    }

    /// Hands a new generation to the workers, binding its new listen addresses first.
    fn install(&mut self, mut shared: Shared) -> Result<(), RouteError> {
        keep_hot_keys(
            &self.current.read().unwrap_or_else(|e| e.into_inner()),
            &mut shared,
            self.threads,
        );
        let shared = Arc::new(shared);
        // Bind new addresses first: any failure leaves the running generation untouched.
        let mut fresh: HashMap<String, (StdListener, Listen)> = HashMap::new();
        for pool in shared.listening_pools() {
            let key = pool.listen_key();
            if self.listeners.contains_key(&key) || fresh.contains_key(&key) {
                continue;
            }
            let l = bind_pool(pool)?;
            fresh.insert(key, (l, pool.cfg.listen.clone()));
        }
        let mut per_worker = Vec::with_capacity(self.workers.len());
        for _ in &self.workers {
            let mut updates = Vec::new();
            for (i, pool) in shared.listening_pools().iter().enumerate() {
                let key = pool.listen_key();
                let new = match fresh.get(&key) {
                    Some((l, _)) => Some(clone_listener(l)?),
                    None => None,
                };
                updates.push(ListenerUpdate { key, pool: i, new });
            }
            per_worker.push(updates);
        }
        for ((tx, waker), updates) in self.workers.iter().zip(per_worker) {
            let _ = tx.send(Control::Reload {
                shared: shared.clone(),
                listeners: updates,
            });
            let _ = waker.wake();
        }
        let keep: std::collections::HashSet<String> = shared
            .listening_pools()
            .iter()
            .map(|p| p.listen_key())
            .collect();
        let old: Vec<String> = self.listeners.keys().cloned().collect();
        for key in old {
            if !keep.contains(&key) {
                if let Some((_, Listen::Unix { path, .. })) = self.listeners.remove(&key) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        self.listeners.extend(fresh);
        for pool in &shared.pools {
            topology::watch::spawn(pool, self.started, self.topo_tx.clone());
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = shared;
        Ok(())
    }

    fn shutdown(&mut self) {
        log::notice("signal received, exiting");
        for (_, listen) in self.listeners.values() {
            if let Listen::Unix { path, .. } = listen {
                let _ = std::fs::remove_file(path);
            }
        }
        if let Some(p) = self.args.pid_path(self.dialect) {
            let _ = std::fs::remove_file(p);
        }
        let _ = &self.globals;
        std::process::exit(0);
    }
}

/// A pool that keeps its listen address and hot-key settings keeps its hot-key state, so
/// writes routed by threads already on the new generation still hide what the others serve.
/// Pools that share one state (an mcrouter config's listen addresses) keep sharing it.
fn keep_hot_keys(old: &Shared, new: &mut Shared, threads: usize) {
    let mut kept: Vec<(*const crate::hot::HotShared, Arc<crate::hot::HotShared>)> = Vec::new();
    for p in &new.pools {
        let Some(h) = &p.hot else { continue };
        let key = p.listen_key();
        let found = old.pools.iter().find_map(|o| {
            let oh = o.hot.as_ref()?;
            (o.listen_key() == key && oh.same_settings(&p.cfg.hot_keys, threads))
                .then(|| oh.clone())
        });
        if let Some(found) = found {
            if !kept.iter().any(|(n, _)| *n == Arc::as_ptr(h)) {
                kept.push((Arc::as_ptr(h), found));
            }
        }
    }
    for pool in &mut new.pools {
        let Some(p) = Arc::get_mut(pool) else {
            continue;
        };
        let Some(h) = &p.hot else { continue };
        if let Some((_, found)) = kept.iter().find(|(n, _)| *n == Arc::as_ptr(h)) {
            p.hot = Some(found.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(yaml: &str) -> Shared {
        let cfg = nutconf::Config::from_yaml_str(yaml).unwrap();
        Shared::new(cfg, 2, std::time::Instant::now()).unwrap()
    }

    #[test]
    fn a_reload_keeps_a_pools_hot_key_cache_while_its_settings_stay() {
        let yaml = |ttl: u32| {
            format!(
                "a:\n  listen: 127.0.0.1:22121\n  hot_keys: true\n  hot_key_ttl: {ttl}\n  servers:\n   - 127.0.0.1:11211:1\n"
            )
        };
        let old = generation(&yaml(500));
        let mut same = generation(&yaml(500));
        keep_hot_keys(&old, &mut same, 2);
        let (o, n) = (old.pools[0].hot.as_ref(), same.pools[0].hot.as_ref());
        assert!(Arc::ptr_eq(o.unwrap(), n.unwrap()));
        let mut changed = generation(&yaml(600));
        keep_hot_keys(&old, &mut changed, 2);
        assert!(!Arc::ptr_eq(
            o.unwrap(),
            changed.pools[0].hot.as_ref().unwrap()
        ));
    }
}
