//! Why `memfleet route` could not start, or why a reload was refused. Each prints as the
//! message alone, which `memfleet` shows after its name and a reload logs.

use std::fmt;

#[derive(Debug)]
pub enum RouteError {
    /// A flag, a combination of flags or an environment variable.
    Usage(String),
    /// nutcracker.yml could not be read or was refused.
    Config(nutconf::LoadError),
    /// The mcrouter config could not be read, or none was given.
    McrouterSource(String),
    /// The mcrouter config was refused.
    Mcrouter(routetree::ConfigError),
    /// A server named by the config: its `security` field, or an address that does not resolve.
    Server(String),
    /// A `dns:`/`srv:` server or an mcrouter host name could not be looked up.
    Dns(String),
    /// TLS certificates, keys or CA files, or the flags that name them.
    Tls(String),
    /// A listening socket: a pool's or the stats port's.
    Listen(String),
    /// The metrics address (`--metrics`).
    Metrics(telemetry::http::Error),
    /// Daemonizing (`-d`) or the pid file.
    Daemon(daemon::Error),
    /// The log file (`-o`) or the asynclog spool directory.
    File(String),
    /// Signals, pollers or threads could not be set up.
    Run(String),
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::Config(e) => write!(f, "{e}"),
            RouteError::Mcrouter(e) => write!(f, "{e}"),
            RouteError::Metrics(e) => write!(f, "{e}"),
            RouteError::Daemon(e) => write!(f, "{e}"),
            RouteError::Usage(m)
            | RouteError::McrouterSource(m)
            | RouteError::Server(m)
            | RouteError::Dns(m)
            | RouteError::Tls(m)
            | RouteError::Listen(m)
            | RouteError::File(m)
            | RouteError::Run(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RouteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RouteError::Config(e) => Some(e),
            RouteError::Mcrouter(e) => Some(e),
            RouteError::Metrics(e) => Some(e),
            RouteError::Daemon(e) => Some(e),
            _ => None,
        }
    }
}

impl From<nutconf::LoadError> for RouteError {
    fn from(e: nutconf::LoadError) -> Self {
        RouteError::Config(e)
    }
}

impl From<routetree::ConfigError> for RouteError {
    fn from(e: routetree::ConfigError) -> Self {
        RouteError::Mcrouter(e)
    }
}

impl From<telemetry::http::Error> for RouteError {
    fn from(e: telemetry::http::Error) -> Self {
        RouteError::Metrics(e)
    }
}

impl From<daemon::Error> for RouteError {
    fn from(e: daemon::Error) -> Self {
        RouteError::Daemon(e)
    }
}
