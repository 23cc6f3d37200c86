//! `memfleet serve`: the network layer of the cache server.
//!
//! An acceptor thread hands sockets to `-t` worker threads (see `placement`); each worker runs its own
//! mio event loop and owns its connections, so nothing on the request path takes a global lock.
//! Protocol parsing lives in `proto`, item storage in `store`; `execute` joins the two.

/// `eprintln!` that never panics: a server whose stderr is a closed pipe (its supervisor
/// gone) keeps serving, where `eprintln!` would panic the thread that logs.
macro_rules! stderr_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod auth;
mod batch;
mod binary;
mod bufpool;
mod bufring;
mod busy;
mod clock;
mod config;
mod conn;
mod engine;
mod env;
mod execute;
mod handoff;
mod hotkeys;
mod latency;
mod lifecycle;
mod meta;
mod metrics;
mod metrics_prom;
mod placement;
mod portfile;
mod report;
mod restart;
mod rusage;
mod shared;
mod stats;
mod textauth;
mod tls;
mod udp;
mod unsent;
mod uring;
mod verbose;
mod worker;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use clock::unix_now;
pub use config::{ServeArgs, Settings, VERSION};
use handoff::{Incoming, WAKER};
use shared::Shared;
use worker::Worker;

/// A listening socket and its name as `stats conns` prints it (shared by its connections).
enum Listener {
    /// True: a TLS listener (`-Z`, not `notls:`).
    Tcp(TcpListener, Arc<str>, bool),
    Unix(UnixListener, Arc<str>),
}

/// Runs the server until SIGINT/SIGTERM or `shutdown`.
pub fn serve(args: ServeArgs) -> Result<(), String> {
    if args.license {
        println!(
            "memfleet {}: a memcached-compatible cache server, router and tools.\n\
             Licensed under the Apache License, Version 2.0: \
             https://www.apache.org/licenses/LICENSE-2.0 (the LICENSE file of the source).",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(());
    }
    if args.version {
        println!(
            "memfleet {} (memcached {VERSION})",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(());
    }
    // A HUP or USR1 while the server starts (the io_uring probe, a warm restart's load) must not
    // stop it either: until `install_signal_handler` takes over, each only sets a flag, which
    // that handler then acts on (the port is open before then, so a signal sent at once counts).
    let early = EarlySignals::register().map_err(|e| e.to_string())?;
    let mut settings = args.settings()?;
    for w in &settings.warnings {
        stderr_line!("warning: {w}");
    }
    let (io_engine, uring_kernel, why) = engine::resolve(settings.io_engine, settings.tls.enabled);
    if let Some(line) = why {
        stderr_line!("{line}");
    } else if settings.verbose > 0 {
        stderr_line!("io_engine: {}", io_engine.name());
    }
    settings.io_engine = io_engine;
    settings.uring_kernel = uring_kernel;
    // As memcached: an unreadable or malformed password file stops the server from starting.
    let auth = match &settings.auth_file {
        Some(path) => Some(auth::Authenticator::load(path).map_err(|e| e.to_string())?),
        None => load_sasl_users(&settings)?,
    };
    raise_fd_limit(settings.conn_limit);
    // Certificates load before any socket opens: a bad file stops startup, as in memcached.
    let tls = match settings.tls.enabled {
        true => Some(tls::Tls::new(&settings.tls, unix_now())?),
        false => None,
    };
    let listeners = bind_listeners(&settings)?;
    let udp = bind_udp(&settings)?;
    if let Some(path) = std::env::var_os(portfile::ENV) {
        let tcp: Vec<std::net::SocketAddr> = listeners
            .iter()
            .filter_map(|l| match l {
                Listener::Tcp(l, _, _) => l.local_addr().ok(),
                Listener::Unix(..) => None,
            })
            .collect();
        // One socket per worker shares each UDP address: report the first worker's.
        let udp: Vec<std::net::SocketAddr> = udp
            .first()
            .map(|socks| socks.iter().filter_map(|s| s.local_addr().ok()).collect())
            .unwrap_or_default();
        portfile::write(std::path::Path::new(&path), &tcp, &udp);
    }
    let metrics = settings
        .metrics
        .as_deref()
        .map(telemetry::http::bind)
        .transpose()?;
    // As memcached: an unwritable pid file is reported, and the server runs anyway.
    let pidfile = settings.pidfile.as_deref().map(std::path::Path::new);
    if settings.daemon {
        daemon::daemonize(settings.verbose > 0, pidfile, daemon::PidFileError::Warn)?;
    } else if let Some(path) = pidfile {
        daemon::write_pid_file(path, daemon::PidFileError::Warn)?;
    }
    if let Some(user) = &settings.user {
        drop_privileges(user)?;
    }
    let result = run(settings.clone(), listeners, udp, tls, metrics, auth, early);
    if let Some((path, _)) = &settings.unix_socket {
        let _ = std::fs::remove_file(path);
    }
    if let Some(path) = &settings.pidfile {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// `-S`: the users of the password file $MEMCACHED_SASL_PWDB names (memcached's variable and
/// `user:password` format). memcached falls back on the system's SASL database; memfleet has
/// none, so it refuses to start without the file.
fn load_sasl_users(settings: &Settings) -> Result<Option<auth::Authenticator>, String> {
    if !settings.sasl {
        return Ok(None);
    }
    let path = std::env::var_os("MEMCACHED_SASL_PWDB")
        .ok_or("-S needs MEMCACHED_SASL_PWDB set to a password file (user:password lines)")?;
    auth::Authenticator::load(path)
        .map(Some)
        .map_err(|e| e.to_string())
}

fn run(
    settings: Settings,
    listeners: Vec<Listener>,
    udp: Vec<Vec<std::net::UdpSocket>>,
    tls: Option<tls::Tls>,
    metrics: Option<std::net::TcpListener>,
    auth: Option<auth::Authenticator>,
    early: EarlySignals,
) -> Result<(), String> {
    let threads = settings.threads;
    let now = unix_now();
    let store_config = store::Config {
        mem_limit: settings.mem_limit as u64,
        item_size_max: settings.item_size_max,
        process_start: now,
        evictions: settings.evictions,
    };
    let store = match &settings.memory_file {
        Some(path) => restart::load_or_cold(store_config, path, now),
        None => store::Store::new(store_config),
    };
    let limits = proto::Limits {
        item_size_max: settings.item_size_max,
        ..proto::Limits::default()
    };

    let mut polls = Vec::new();
    let mut wakers = Vec::new();
    for _ in 0..threads {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        let waker = Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?;
        wakers.push(Arc::new(waker));
        polls.push(poll);
    }
    let accept_poll = Poll::new().map_err(|e| e.to_string())?;
    let accept_waker =
        Arc::new(Waker::new(accept_poll.registry(), WAKER).map_err(|e| e.to_string())?);
    let mut all_wakers = wakers.clone();
    all_wakers.push(accept_waker);

    let shared = Arc::new(Shared {
        verbosity: AtomicU8::new(settings.verbose),
        limits,
        store,
        stats: (0..threads).map(|_| Arc::default()).collect(),
        registry: (0..threads).map(|_| Mutex::default()).collect(),
        curr_conns: AtomicUsize::new(0),
        worker_conns: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
        cpu_groups: (0..threads)
            .map(|_| {
                (0..placement::CPU_GROUPS)
                    .map(|_| AtomicUsize::new(0))
                    .collect()
            })
            .collect(),
        shutdown: AtomicBool::new(false),
        graceful: AtomicBool::new(false),
        process_start: now,
        wakers: all_wakers,
        auth,
        telemetry: metrics::Telemetry::new(threads, settings.latency, settings.hotkeys_rate),
        settings,
        tls,
    });
    if let Some(listener) = metrics {
        let shared = shared.clone();
        telemetry::http::spawn(listener, "metrics", move || metrics_prom::render(&shared))?;
    }

    install_signal_handler(shared.clone(), early)?;

    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel()).unzip();
    let mut handles = Vec::new();
    let mut udp = udp.into_iter();
    for ((id, poll), rx) in polls.into_iter().enumerate().zip(receivers) {
        let udp = udp.next().unwrap_or_default();
        if shared.settings.io_engine == engine::IoEngine::Uring {
            let (shared, peers) = (shared.clone(), senders.clone());
            handles.push(
                thread::Builder::new()
                    .name(format!("worker-{id}"))
                    .spawn(move || {
                        match uring::UringWorker::new(id, poll, rx, peers, shared.clone(), udp) {
                            Ok(w) => w.run(),
                            Err(e) => {
                                stderr_line!("worker {id}: io_uring setup failed: {e}");
                                shared.request_shutdown();
                            }
                        }
                    })
                    .map_err(|e| e.to_string())?,
            );
            continue;
        }
        let w = Worker::new(id, poll, rx, senders.clone(), shared.clone(), udp)
            .map_err(|e| e.to_string())?;
        handles.push(
            thread::Builder::new()
                .name(format!("worker-{id}"))
                .spawn(move || w.run())
                .map_err(|e| e.to_string())?,
        );
    }

    let maint = {
        let shared = shared.clone();
        thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || maintenance(&shared))
            .map_err(|e| e.to_string())?
    };

    accept_loop(&shared, accept_poll, listeners, &senders, &wakers);
    shared.request_shutdown();
    for h in handles {
        let _ = h.join();
    }
    let _ = maint.join();
    if shared.graceful.load(SeqCst) {
        stderr_line!("Gracefully stopping");
        if let Some(path) = &shared.settings.memory_file {
            restart::save(&shared.store, path, VERSION, unix_now())?;
        }
    }
    Ok(())
}

/// Items examined per maintenance pass, so a pass never holds shards for long.
const RECLAIM_BUDGET: usize = 20_000;

/// Reclaims expired items and does other bounded background work about once a second.
fn maintenance(shared: &Shared) {
    while !shared.shutdown.load(SeqCst) {
        shared.store.reclaim(unix_now(), RECLAIM_BUDGET);
        for _ in 0..10 {
            if shared.shutdown.load(SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

fn accept_loop(
    shared: &Shared,
    mut poll: Poll,
    mut listeners: Vec<Listener>,
    senders: &[mpsc::Sender<Incoming>],
    wakers: &[Arc<Waker>],
) {
    for (i, l) in listeners.iter_mut().enumerate() {
        let src: &mut dyn mio::event::Source = match l {
            Listener::Tcp(l, _, _) => l,
            Listener::Unix(l, _) => l,
        };
        if let Err(e) = poll.registry().register(src, Token(i), Interest::READABLE) {
            stderr_line!("failed to register listener: {e}");
        }
    }
    let mut events = Events::with_capacity(64);
    let mut rr = 0usize;
    let mut open = vec![0usize; senders.len()];
    let limit = shared.settings.conn_limit;
    while !shared.shutdown.load(SeqCst) {
        if poll
            .poll(&mut events, Some(Duration::from_millis(500)))
            .is_err()
        {
            continue;
        }
        for ev in events.iter() {
            let Some(l) = listeners.get(ev.token().0) else {
                continue;
            };
            loop {
                let incoming = match l {
                    Listener::Tcp(l, listen, tls) => match l.accept() {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            if *tls {
                                Incoming::Tls(s, listen.clone())
                            } else {
                                Incoming::Tcp(s, listen.clone())
                            }
                        }
                        Err(_) => break,
                    },
                    Listener::Unix(l, path) => match l.accept() {
                        Ok((s, _)) => Incoming::Unix(s, path.clone()),
                        Err(_) => break,
                    },
                };
                if shared.curr_conns.fetch_add(1, SeqCst) >= limit {
                    shared.curr_conns.fetch_sub(1, SeqCst);
                    reject(shared, incoming);
                    continue;
                }
                for (o, c) in open.iter_mut().zip(&shared.worker_conns) {
                    *o = c.load(SeqCst);
                }
                let cpu = match &incoming {
                    Incoming::Tcp(s, _) | Incoming::Tls(s, _) => {
                        placement::incoming_cpu(s.as_raw_fd())
                    }
                    _ => None,
                };
                let w = placement::choose(cpu, &open, &mut rr);
                shared.worker_conns[w].fetch_add(1, SeqCst);
                if senders[w].send(incoming).is_ok() {
                    handoff::wake(&wakers[w]);
                } else {
                    shared.worker_conns[w].fetch_sub(1, SeqCst);
                    shared.curr_conns.fetch_sub(1, SeqCst);
                }
            }
        }
    }
}

/// Over `-c`: tell the client as memcached does, then close.
fn reject(shared: &Shared, incoming: Incoming) {
    // Counters need a single writer per field: workers never touch this one, the acceptor owns it.
    shared.stats[0].rejected_connections.incr();
    if shared.verbose() > 0 {
        stderr_line!("Too many open connections");
    }
    const MSG: &[u8] = b"ERROR Too many open connections\r\n";
    match incoming {
        Incoming::Tcp(mut s, _) => {
            let _ = s.write(MSG);
        }
        Incoming::Unix(mut s, _) => {
            let _ = s.write(MSG);
        }
        // A TLS client could not read a plaintext reply: it just sees the connection close.
        Incoming::Tls(..) => {}
        // Only workers hand these to each other; they were admitted already.
        Incoming::Moved(_) => {}
    }
}

fn bind_listeners(settings: &Settings) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    if let Some((path, mask)) = &settings.unix_socket {
        // A stale socket file from a previous run would make bind fail.
        if std::fs::symlink_metadata(path).is_ok() {
            let _ = std::fs::remove_file(path);
        }
        let l = UnixListener::bind(path).map_err(|e| format!("bind(unix:{path}): {e}"))?;
        // memcached applies -a through umask on a 0777 socket, so the mask is the resulting mode.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mask))
            .map_err(|e| format!("chmod {path}: {e}"))?;
        out.push(Listener::Unix(l, format!("unix:{path}").into()));
    }
    for addr in &settings.tcp {
        let domain = socket2::Domain::for_address(*addr);
        let sock =
            socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
        sock.set_reuse_address(true).map_err(|e| e.to_string())?;
        if addr.is_ipv6() {
            let _ = sock.set_only_v6(true);
        }
        sock.bind(&(*addr).into())
            .map_err(|e| format!("failed to listen on TCP port {}: {e}", addr.port()))?;
        sock.listen(settings.backlog).map_err(|e| e.to_string())?;
        sock.set_nonblocking(true).map_err(|e| e.to_string())?;
        let std_l: std::net::TcpListener = sock.into();
        let local = std_l.local_addr().map_err(|e| e.to_string())?;
        let tls = settings.tls.enabled && !settings.notls.contains(addr);
        out.push(Listener::Tcp(
            TcpListener::from_std(std_l),
            format!("tcp:{local}").into(),
            tls,
        ));
    }
    if out.is_empty() && settings.udp.is_empty() {
        return Err("no listening sockets: give -p, -U or -s".into());
    }
    Ok(out)
}

/// One UDP socket per worker per address (SO_REUSEPORT), so each thread replies from its own
/// socket and the kernel spreads datagrams over threads.
fn bind_udp(settings: &Settings) -> Result<Vec<Vec<std::net::UdpSocket>>, String> {
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    for addr in &settings.udp {
        // Port 0 (-U -1): the first socket picks a free port and the others join it.
        let mut addr = *addr;
        for sockets in per_worker.iter_mut() {
            let domain = socket2::Domain::for_address(addr);
            let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, None)
                .map_err(|e| e.to_string())?;
            sock.set_reuse_address(true).map_err(|e| e.to_string())?;
            sock.set_reuse_port(true).map_err(|e| e.to_string())?;
            sock.bind(&addr.into())
                .map_err(|e| format!("failed to listen on UDP port {}: {e}", addr.port()))?;
            let sock: std::net::UdpSocket = sock.into();
            if addr.port() == 0 {
                addr.set_port(sock.local_addr().map_err(|e| e.to_string())?.port());
            }
            sockets.push(sock);
        }
    }
    Ok(per_worker)
}

/// SIGINT/SIGTERM stop the server; SIGUSR1 stops it gracefully (saving items for `-e`).
/// SIGHUP never stops it (a terminal closing or a log rotator's HUP must not take the cache
/// down); as in memcached it re-reads the `-Y` password file, keeping the old entries if the
/// new file is bad. What `early` caught while the server started is acted on first.
fn install_signal_handler(shared: Arc<Shared>, early: EarlySignals) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGUSR1])
        .map_err(|e| e.to_string())?;
    // Read after `signals` is registered, so a signal in between is seen at least once. The
    // password file is re-read here, before any worker serves a request.
    if early.hup.swap(false, SeqCst) {
        reload_auth(&shared);
    }
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            // Stopped from here, once the workers run, as a USR1 that arrives later would be.
            if early.usr1.swap(false, SeqCst) {
                shared.request_graceful_shutdown();
                return;
            }
            for sig in signals.forever() {
                let name = match sig {
                    SIGINT => "Interrupt",
                    SIGTERM => "Terminated",
                    SIGUSR1 => {
                        shared.request_graceful_shutdown();
                        return;
                    }
                    SIGHUP => {
                        reload_auth(&shared);
                        continue;
                    }
                    _ => continue,
                };
                shared.request_shutdown();
                stderr_line!("Signal handled: {name}.");
                return;
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// SIGHUP and SIGUSR1 as flags, from the start of `serve` until the signal thread runs.
struct EarlySignals {
    hup: Arc<AtomicBool>,
    usr1: Arc<AtomicBool>,
}

impl EarlySignals {
    fn register() -> std::io::Result<EarlySignals> {
        use signal_hook::consts::{SIGHUP, SIGUSR1};
        let early = EarlySignals {
            hup: Arc::default(),
            usr1: Arc::default(),
        };
        signal_hook::flag::register(SIGHUP, early.hup.clone())?;
        signal_hook::flag::register(SIGUSR1, early.usr1.clone())?;
        Ok(early)
    }
}

/// Re-reads the `-Y` password file; a bad file is reported and the old entries stay.
fn reload_auth(shared: &Shared) {
    if let Some(Err(e)) = shared.auth.as_ref().map(|a| a.reload()) {
        stderr_line!("{e}");
    }
}

/// Like memcached, lift the soft open-files limit so `-c` connections fit (up to the hard limit).
fn raise_fd_limit(conn_limit: usize) {
    let want = (conn_limit + 64) as libc::rlim_t;
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn drop_privileges(user: &str) -> Result<(), String> {
    // SAFETY: plain libc calls with a NUL-terminated name; getpwnam's result is read at once.
    unsafe {
        if libc::geteuid() != 0 {
            return Ok(());
        }
        let name = std::ffi::CString::new(user).map_err(|_| "bad user name")?;
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(format!("can't find the user {user} to switch to"));
        }
        if libc::setgid((*pw).pw_gid) < 0 || libc::setuid((*pw).pw_uid) < 0 {
            return Err(format!("failed to assume identity of user {user}"));
        }
    }
    Ok(())
}
