//! Why `invalidate` could not start, or stopped. Each prints as the message alone, which
//! `memfleet` shows after its name.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;

#[derive(Debug)]
pub enum InvalidateError {
    /// The `-c` file could not be read.
    ReadConfig { path: PathBuf, error: io::Error },
    /// The `-c` file is not a valid configuration.
    Config { path: PathBuf, error: ConfigError },
    /// The runtime (`what` = "runtime") or a signal handler could not be set up.
    Setup {
        what: &'static str,
        error: io::Error,
    },
    /// `source.dsn` does not parse.
    Dsn(tokio_postgres::Error),
    /// `source.replica_dsn` does not parse.
    ReplicaDsn(tokio_postgres::Error),
    /// `source.dsn` names no user and $USER is unset.
    NoUser,
    /// PostgreSQL could not be reached, or a catalog query failed.
    Database(String),
    /// The database does not match the configuration (a table, column, publication or
    /// slot), or refused to create the publication or slot.
    Refused(String),
    /// The replication connection to the slot.
    Replication {
        slot: String,
        error: pgwire_replication::PgWireError,
    },
    /// A replication message that does not decode: nothing past it is confirmed.
    Decode(pgoutput::DecodeError),
    /// The `spool_dir` could not be opened.
    SpoolDir { dir: PathBuf, error: io::Error },
    /// Spooling a batch's undelivered deletes failed: nothing of it is confirmed.
    SpoolWrite(io::Error),
    /// Rewriting a spool after a replay failed.
    SpoolRewrite(io::Error),
    /// The `stats` listening address.
    Stats { addr: String, error: io::Error },
}

impl fmt::Display for InvalidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use InvalidateError::*;
        match self {
            ReadConfig { path, error } => write!(f, "{}: {error}", path.display()),
            Config { path, error } => write!(f, "{}: {error}", path.display()),
            Setup { what, error } => write!(f, "{what}: {error}"),
            Dsn(e) => write!(f, "source.dsn: {e}"),
            ReplicaDsn(e) => write!(f, "source.replica_dsn: {e}"),
            NoUser => f.write_str("source.dsn names no user"),
            Database(m) | Refused(m) => f.write_str(m),
            Replication { slot, error } => {
                write!(f, "replication connection to slot {slot}: {error}")
            }
            Decode(e) => write!(f, "{e}; stopping with nothing confirmed past it"),
            SpoolDir { dir, error } => write!(f, "spool_dir {}: {error}", dir.display()),
            SpoolWrite(e) => write!(
                f,
                "cannot write the spool: {e}; stopping with nothing confirmed"
            ),
            SpoolRewrite(e) => write!(f, "cannot rewrite the spool: {e}"),
            Stats { addr, error } => write!(f, "stats listener {addr}: {error}"),
        }
    }
}

impl std::error::Error for InvalidateError {}
