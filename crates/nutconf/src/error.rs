//! Why a configuration was refused, worded like nutcracker where it has words.

use std::fmt;

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
