//! Password-file authentication (`-Y FILE`, memcached's authfile).
//!
//! The file holds one `user:password` entry per line. [`PasswordFile`] is the parsed file and
//! answers "is this pair valid" in constant time; [`Authenticator`] owns the file's path, lets the
//! server reload it (SIGHUP, as memcached) without dropping the old entries on a bad reload, and
//! counts attempts for `stats` (`auth_cmds`, `auth_errors`).
//!
//! Parsing, as memcached 1.6 reads the file:
//! - entries are separated by `\n`; the user is everything before the first `:`, the password
//!   everything after it up to the end of the line, a `\r` or a NUL byte (so a password may
//!   contain `:`, and CRLF files work);
//! - a line with no `:` before its end (an empty line included) makes the whole file malformed;
//! - an empty file is valid and lets nobody in;
//! - the last line needs no newline (memcached 1.6.18 drops the last password byte there, a bug
//!   fixed later; memfleet keeps the whole password).
//!
//! Where memfleet differs on purpose: memcached reads at most 8 entries and silently ignores the
//! rest, and it splits lines longer than 255 bytes into pieces; memfleet keeps every entry and
//! refuses a line longer than [`MAX_LINE`] as malformed, so no entry is silently lost.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

use subtle::{Choice, ConstantTimeEq};

/// The longest line memcached's reader takes whole (its buffer is 256 bytes with the NUL).
pub const MAX_LINE: usize = 255;

/// Why a password file was refused; the messages are memcached's where it has one.
#[derive(Debug)]
pub enum AuthFileError {
    /// The file could not be opened or read.
    Open(PathBuf, std::io::Error),
    /// Line `line` (1-based) has no `user:` part or is longer than [`MAX_LINE`].
    Malformed(PathBuf, usize),
}

impl fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthFileError::Open(path, e) => write!(
                f,
                "Could not open authfile [{}] for reading, error {e}",
                path.display()
            ),
            AuthFileError::Malformed(path, line) => write!(
                f,
                "Authfile [{}] has a malformed entry at line {line}. Should be 'user:password'",
                path.display()
            ),
        }
    }
}

impl std::error::Error for AuthFileError {}

/// The entries of one password file.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct PasswordFile {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl PasswordFile {
    /// Parses the file's bytes; `Err(n)` names the first malformed line (1-based).
    pub fn parse(data: &[u8]) -> Result<Self, usize> {
        let mut entries = Vec::new();
        // A final newline ends the last entry; it does not start an empty one.
        let body = data.strip_suffix(b"\n").unwrap_or(data);
        if data.is_empty() {
            return Ok(Self { entries });
        }
        for (i, line) in body.split(|&b| b == b'\n').enumerate() {
            let malformed = i + 1;
            if line.len() > MAX_LINE {
                return Err(malformed);
            }
            let Some(colon) = line.iter().position(|&b| b == b':' || b == 0 || b == b'\r') else {
                return Err(malformed);
            };
            if line[colon] != b':' {
                return Err(malformed);
            }
            let rest = &line[colon + 1..];
            let end = rest
                .iter()
                .position(|&b| b == b'\r' || b == 0)
                .unwrap_or(rest.len());
            entries.push((line[..colon].to_vec(), rest[..end].to_vec()));
        }
        Ok(Self { entries })
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Self, AuthFileError> {
        let data = std::fs::read(path).map_err(|e| AuthFileError::Open(path.into(), e))?;
        Self::parse(&data).map_err(|line| AuthFileError::Malformed(path.into(), line))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the file lets nobody in.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True if `user`/`pass` match an entry. Every entry is compared, and each comparison takes
    /// the same time whatever bytes differ, so timing tells nothing about which entry or byte
    /// was close (only lengths, which memcached does not hide either).
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        let mut found = Choice::from(0);
        for (u, p) in &self.entries {
            found |= u.as_slice().ct_eq(user) & p.as_slice().ct_eq(pass);
        }
        found.into()
    }
}

/// Snapshot of the authentication counters, named as memcached's `stats` fields.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthCounts {
    /// Authentication attempts, successful or not.
    pub auth_cmds: u64,
    /// Failed attempts.
    pub auth_errors: u64,
}

/// The server's password file and its counters; shared by all worker threads.
#[derive(Debug)]
pub struct Authenticator {
    path: PathBuf,
    file: RwLock<PasswordFile>,
    cmds: AtomicU64,
    errors: AtomicU64,
}

impl Authenticator {
    /// Loads `path`; the server refuses to start on an error, as memcached exits.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, AuthFileError> {
        let path = path.into();
        let file = PasswordFile::load(&path)?;
        Ok(Self {
            path,
            file: RwLock::new(file),
            cmds: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        })
    }

    /// Re-reads the file. On an error the entries loaded before stay in force.
    pub fn reload(&self) -> Result<(), AuthFileError> {
        let file = PasswordFile::load(&self.path)?;
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = file;
        Ok(())
    }

    /// Checks one attempt and counts it (`auth_cmds`, and `auth_errors` when it fails).
    pub fn verify(&self, user: &[u8], pass: &[u8]) -> bool {
        let ok = self
            .file
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .check(user, pass);
        // Attempts are rare (once per connection), so a shared atomic costs nothing.
        self.cmds.fetch_add(1, Relaxed);
        if !ok {
            self.errors.fetch_add(1, Relaxed);
        }
        ok
    }

    /// The counters for `stats`.
    pub fn counts(&self) -> AuthCounts {
        AuthCounts {
            auth_cmds: self.cmds.load(Relaxed),
            auth_errors: self.errors.load(Relaxed),
        }
    }

    /// `stats reset` clears the counters.
    pub fn reset_counts(&self) {
        self.cmds.store(0, Relaxed);
        self.errors.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &[u8]) -> Vec<(String, String)> {
        PasswordFile::parse(text)
            .unwrap()
            .entries
            .into_iter()
            .map(|(u, p)| (String::from_utf8(u).unwrap(), String::from_utf8(p).unwrap()))
            .collect()
    }

    fn pair(u: &str, p: &str) -> (String, String) {
        (u.into(), p.into())
    }

    #[test]
    fn lines_split_at_the_first_colon() {
        assert_eq!(
            parsed(b"alice:secret\nbob:pa:ss\n"),
            vec![pair("alice", "secret"), pair("bob", "pa:ss")]
        );
    }

    #[test]
    fn crlf_and_missing_final_newline_keep_the_whole_password() {
        assert_eq!(
            parsed(b"a:one\r\nb:two"),
            vec![pair("a", "one"), pair("b", "two")]
        );
    }

    #[test]
    fn empty_user_or_password_are_entries() {
        assert_eq!(parsed(b":p\nu:\n"), vec![pair("", "p"), pair("u", "")]);
    }

    #[test]
    fn empty_file_is_valid_and_admits_nobody() {
        let f = PasswordFile::parse(b"").unwrap();
        assert!(f.is_empty());
        assert!(!f.check(b"", b""));
    }

    #[test]
    fn a_line_without_colon_or_an_empty_line_is_malformed() {
        assert_eq!(PasswordFile::parse(b"a:b\nnocolon\n"), Err(2));
        assert_eq!(PasswordFile::parse(b"a:b\n\nc:d\n"), Err(2));
        assert_eq!(PasswordFile::parse(b"\n"), Err(1));
        assert_eq!(PasswordFile::parse(b"us\0er:x\n"), Err(1));
        assert_eq!(PasswordFile::parse(b"us\rer:x\n"), Err(1));
    }

    #[test]
    fn overlong_line_is_malformed() {
        let mut line = b"u:".to_vec();
        line.resize(MAX_LINE, b'p');
        assert!(PasswordFile::parse(&line).is_ok());
        line.push(b'p');
        assert_eq!(PasswordFile::parse(&line), Err(1));
    }

    #[test]
    fn more_than_eight_entries_are_all_kept() {
        let text: String = (0..20).map(|i| format!("u{i}:p{i}\n")).collect();
        let f = PasswordFile::parse(text.as_bytes()).unwrap();
        assert_eq!(f.len(), 20);
        assert!(f.check(b"u19", b"p19"));
    }

    #[test]
    fn check_needs_user_and_password_of_the_same_entry() {
        let f = PasswordFile::parse(b"a:1\nb:2\n").unwrap();
        assert!(f.check(b"a", b"1"));
        assert!(f.check(b"b", b"2"));
        assert!(!f.check(b"a", b"2"));
        assert!(!f.check(b"a", b"11"));
        assert!(!f.check(b"a", b""));
        assert!(!f.check(b"", b"1"));
    }

    fn temp_file(name: &str, body: &[u8]) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("memfleet-auth-{}-{name}", std::process::id()));
        std::fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn authenticator_counts_and_keeps_entries_on_a_bad_reload() {
        let path = temp_file("reload", b"user:pw\n");
        let auth = Authenticator::load(&path).unwrap();
        assert!(auth.verify(b"user", b"pw"));
        assert!(!auth.verify(b"user", b"nope"));
        assert_eq!(
            auth.counts(),
            AuthCounts {
                auth_cmds: 2,
                auth_errors: 1
            }
        );
        std::fs::write(&path, b"broken\n").unwrap();
        let err = auth.reload().unwrap_err();
        assert!(
            err.to_string().contains("malformed entry at line 1"),
            "{err}"
        );
        assert!(auth.verify(b"user", b"pw"));
        std::fs::write(&path, b"other:pw2\n").unwrap();
        auth.reload().unwrap();
        assert!(!auth.verify(b"user", b"pw"));
        assert!(auth.verify(b"other", b"pw2"));
        auth.reset_counts();
        assert_eq!(auth.counts(), AuthCounts::default());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn missing_file_is_an_open_error() {
        let err = Authenticator::load("/nonexistent/memfleet-auth").unwrap_err();
        assert!(matches!(err, AuthFileError::Open(..)));
        assert!(err.to_string().starts_with("Could not open authfile"));
    }
}
