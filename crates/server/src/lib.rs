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
mod clock;
mod config;
mod departures;
mod engine;
mod error;
mod event;
mod exec;
mod flash;
mod io;
mod latency;
mod metrics;
mod metrics_prom;
mod placement;
mod portfile;
mod restart;
mod rusage;
mod shared;
mod size;
mod start;
mod stats;
mod tls;
mod tracking;
mod verbose;
mod watch;

pub use config::{ServeArgs, Settings, VERSION};
pub use error::ServeError;
use start::signals::EarlySignals;
use start::{listen, process, threads};

/// Runs the server until SIGINT/SIGTERM or `shutdown`.
pub fn serve(args: ServeArgs) -> Result<(), ServeError> {
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
    let early = EarlySignals::register().map_err(|e| ServeError::Run(e.to_string()))?;
    let mut settings = args.settings().map_err(ServeError::Settings)?;
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
    let auth = start::load_auth(&settings)?;
    process::raise_fd_limit(settings.conn_limit);
    // Certificates load before any socket opens: a bad file stops startup, as in memcached.
    let tls = match settings.tls.enabled {
        true => Some(tls::Tls::new(&settings.tls, clock::unix_now()).map_err(ServeError::Tls)?),
        false => None,
    };
    let listeners = listen::bind_listeners(&settings).map_err(ServeError::Listen)?;
    let udp = listen::bind_udp(&settings).map_err(ServeError::Listen)?;
    listen::write_port_file(&listeners, &udp);
    let metrics = settings
        .metrics
        .as_deref()
        .map(telemetry::http::bind)
        .transpose()
        .map_err(ServeError::Metrics)?;
    // As memcached: an unwritable pid file is reported, and the server runs anyway.
    let pidfile = settings.pidfile.as_deref().map(std::path::Path::new);
    if settings.daemon {
        daemon::daemonize(settings.verbose > 0, pidfile, daemon::PidFileError::Warn)
            .map_err(ServeError::Daemon)?;
    } else if let Some(path) = pidfile {
        daemon::write_pid_file(path, daemon::PidFileError::Warn).map_err(ServeError::Daemon)?;
    }
    if let Some(user) = &settings.user {
        process::drop_privileges(user).map_err(ServeError::Process)?;
    }
    let result = threads::run(settings.clone(), listeners, udp, tls, metrics, auth, early)
        .map_err(ServeError::Run);
    if let Some((path, _)) = &settings.unix_socket {
        let _ = std::fs::remove_file(path);
    }
    if let Some(path) = &settings.pidfile {
        let _ = std::fs::remove_file(path);
    }
    result
}
