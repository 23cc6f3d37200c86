//! Why a configuration was refused, worded like nutcracker where it has words.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration was refused. `Display` gives one line naming the pool,
/// directive and YAML line where known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Not YAML at all.
    Yaml {
        line: usize,
        col: usize,
        msg: String,
    },
    /// YAML that nutcracker refuses (flow style, anchors, wrong nesting, ...).
    Structure { line: usize, msg: String },
    /// A bad directive value: `directive "<key>" <msg>`.
    Directive {
        pool: String,
        key: String,
        line: usize,
        msg: String,
    },
    /// A pool that fails validation after parsing.
    Pool { pool: String, msg: String },
    /// A whole-file problem (no pools, duplicate listen addresses, ...).
    File { msg: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Yaml { line, col, msg } => {
                write!(f, "conf: invalid YAML at line {line} column {col}: {msg}")
            }
            ConfigError::Structure { line, msg } => write!(f, "conf: line {line}: {msg}"),
            ConfigError::Directive {
                pool,
                key,
                line,
                msg,
            } => write!(
                f,
                "conf: pool '{pool}' line {line}: directive \"{key}\" {msg}"
            ),
            ConfigError::Pool { pool, msg } => write!(f, "conf: pool '{pool}' {msg}"),
            ConfigError::File { msg } => write!(f, "conf: {msg}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a configuration file could not be used: unreadable, or refused. `Display` names the
/// file.
#[derive(Debug)]
pub enum LoadError {
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    Invalid {
        path: PathBuf,
        error: ConfigError,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Read { path, source } => write!(
                f,
                "cannot read configuration file '{}': {source}",
                path.display()
            ),
            LoadError::Invalid { path, error } => write!(
                f,
                "configuration file '{}' syntax is invalid: {error}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Read { source, .. } => Some(source),
            LoadError::Invalid { error, .. } => Some(error),
        }
    }
}
