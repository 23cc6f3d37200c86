//! Why `serve` could not start, or stopped with an error. Each prints as the message alone,
//! which `memfleet` shows after its name.

use std::fmt;

use crate::auth::AuthFileError;

#[derive(Debug)]
pub enum ServeError {
    /// The command line or an `-o` option.
    Settings(String),
    /// The `-Y` or `-S` password file could not be read or is malformed.
    Auth(AuthFileError),
    /// `-S` without $MEMCACHED_SASL_PWDB.
    SaslUsersUnset,
    /// The `-Z` certificate, key or CA files.
    Tls(String),
    /// A listening socket (`-p`, `-U`, `-s`, the metrics address).
    Listen(String),
    /// The metrics address (`--metrics`).
    Metrics(telemetry::http::Error),
    /// Daemonizing (`-d`) or the pid file (`-P`).
    Daemon(daemon::Error),
    /// Switching to the `-u` user.
    Process(String),
    /// Signal handling or a thread could not be set up, or saving items for `-e` failed.
    Run(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Auth(e) => write!(f, "{e}"),
            ServeError::Metrics(e) => write!(f, "{e}"),
            ServeError::Daemon(e) => write!(f, "{e}"),
            ServeError::SaslUsersUnset => f.write_str(
                "-S needs MEMCACHED_SASL_PWDB set to a password file (user:password lines)",
            ),
            ServeError::Settings(m)
            | ServeError::Tls(m)
            | ServeError::Listen(m)
            | ServeError::Process(m)
            | ServeError::Run(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ServeError {}
