//! Why a benchmark could not run. Each prints as the message alone, which `memfleet`
//! shows after its name. Layers: `ArgError` (options), `TlsError` (the `--tls` files),
//! `ConnError` (one connection), `BenchError` (the run).

use std::fmt;
use std::io;

use proto::response::tally::ProtocolError;

/// An option value that does not parse, or options that do not go together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    Invalid(String),
    /// A memtier option memfleet bench does not implement.
    Unsupported {
        option: &'static str,
        why: &'static str,
    },
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Invalid(m) => f.write_str(m),
            ArgError::Unsupported { option, why } => {
                write!(f, "{option} is not supported by memfleet bench: {why}")
            }
        }
    }
}

impl std::error::Error for ArgError {}

/// The `--tls` settings: certificate, key and CA files, the server name.
#[derive(Debug)]
pub enum TlsError {
    /// `--cert`, `--key`, `--cacert`, `--tls-skip-verify` or `--sni` without `--tls`.
    NeedsTls,
    /// rustls refused its own defaults (protocol versions).
    Setup(rustls::Error),
    /// A certificate or CA file.
    Certs { path: String, error: tlsload::Error },
    /// The `--key` file.
    Key { path: String, error: tlsload::Error },
    /// The certificate and key do not go together.
    ClientAuth(rustls::Error),
    /// A CA file's certificate is not a usable trust anchor.
    Roots { path: String, error: rustls::Error },
    /// `--sni` or `--server` is not a host name or address.
    ServerName(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::NeedsTls => {
                f.write_str("--cert, --key, --cacert, --tls-skip-verify and --sni need --tls")
            }
            TlsError::Setup(e) => write!(f, "{e}"),
            TlsError::Certs { path, error } => write!(f, "{path}: {error}"),
            TlsError::Key { path, error } => write!(f, "--key {path}: {error}"),
            TlsError::ClientAuth(e) => write!(f, "--cert/--key: {e}"),
            TlsError::Roots { path, error } => write!(f, "CA certificate in {path}: {error}"),
            TlsError::ServerName(host) => write!(
                f,
                "--sni/--server '{host}' is not a host name or IP address"
            ),
        }
    }
}

impl std::error::Error for TlsError {}

/// Why one connection could not be made or broke.
#[derive(Debug)]
pub enum ConnError {
    /// A worker thread's runtime could not be built.
    Runtime(io::Error),
    Connect {
        target: String,
        error: io::Error,
    },
    NoDelay(io::Error),
    Handshake(io::Error),
    Write(io::Error),
    Read(io::Error),
    Closed,
    /// A reply that is not one the request can get.
    Reply(ProtocolError),
    /// Bytes with no request waiting for them.
    Unasked,
    /// This many connections still had replies due when the run ended; they were cut.
    Stalled(u64),
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Runtime(e) => write!(f, "runtime: {e}"),
            ConnError::Connect { target, error } => write!(f, "connect {target}: {error}"),
            ConnError::NoDelay(e) => write!(f, "nodelay: {e}"),
            ConnError::Handshake(e) => write!(f, "TLS handshake: {e}"),
            ConnError::Write(e) => write!(f, "write: {e}"),
            ConnError::Read(e) => write!(f, "read: {e}"),
            ConnError::Closed => f.write_str("server closed the connection"),
            ConnError::Reply(e) => f.write_str(&e.0),
            ConnError::Unasked => f.write_str("server sent bytes nobody asked for"),
            ConnError::Stalled(n) => write!(f, "{n} connection(s) stopped answering"),
        }
    }
}

impl std::error::Error for ConnError {}

/// Why `bench` could not run.
#[derive(Debug)]
pub enum BenchError {
    Args(ArgError),
    Tls(TlsError),
    /// The first, synchronous connect to the server failed.
    Unreachable {
        target: String,
        error: io::Error,
    },
    /// A worker thread could not be started.
    Spawn(io::Error),
    /// No client connected; the first connection's error, if one was seen.
    NoConnection(Option<ConnError>),
    /// `--json-out-file` could not be written.
    WriteJson {
        path: String,
        error: io::Error,
    },
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Args(e) => write!(f, "{e}"),
            BenchError::Tls(e) => write!(f, "{e}"),
            BenchError::Unreachable { target, error } => {
                write!(f, "cannot connect to {target}: {error}")
            }
            BenchError::Spawn(e) => write!(f, "spawn thread: {e}"),
            BenchError::NoConnection(Some(e)) => write!(f, "{e}"),
            BenchError::NoConnection(None) => f.write_str("no connection could be made"),
            BenchError::WriteJson { path, error } => write!(f, "writing {path}: {error}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<ArgError> for BenchError {
    fn from(e: ArgError) -> Self {
        BenchError::Args(e)
    }
}

impl From<TlsError> for BenchError {
    fn from(e: TlsError) -> Self {
        BenchError::Tls(e)
    }
}
