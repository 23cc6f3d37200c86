//! Signals: stop, stop gracefully, or re-read the password file.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;

use crate::shared::Shared;

/// SIGINT/SIGTERM stop the server; SIGUSR1 stops it gracefully (saving items for `-e`).
/// SIGHUP never stops it (a terminal closing or a log rotator's HUP must not take the cache
/// down); as in memcached it re-reads the `-Y` password file, keeping the old entries if the
/// new file is bad. What `early` caught while the server started is acted on first.
pub fn install_signal_handler(shared: Arc<Shared>, early: EarlySignals) -> Result<(), String> {
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
pub struct EarlySignals {
    hup: Arc<AtomicBool>,
    usr1: Arc<AtomicBool>,
}

impl EarlySignals {
    pub fn register() -> std::io::Result<EarlySignals> {
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
