//! Config errors: where (file, line, column, key path) and what.

use std::fmt;

/// One step into a JSON document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    /// An object member, by key.
    Key(String),
    /// An array element, by position.
    Index(usize),
}

/// Where a value sits in the document, e.g. `pools.A.servers[2]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path(pub Vec<Seg>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A config the router must refuse. `line`/`column` are 1-based; 0 when unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The config file's name as given.
    pub file: String,
    /// 1-based line of the offending value; 0 when unknown.
    pub line: usize,
    /// 1-based column of the offending value; 0 when unknown.
    pub column: usize,
    /// Key path to the offending value.
    pub path: Path,
    /// What is wrong, for the operator.
    pub message: String,
}

impl ConfigError {
    /// An error at `line`:`column` of `file` with no key path.
    pub fn at(file: &str, line: usize, column: usize, message: &str) -> ConfigError {
        ConfigError {
            file: file.to_owned(),
            line,
            column,
            path: Path::default(),
            message: message.to_owned(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.path.0.is_empty() {
            write!(f, ": at {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}
