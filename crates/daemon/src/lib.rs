//! Running in the background (`memfleet serve -d`, `memfleet route -d`) and pid files.
//!
//! The pid file holds the daemon's pid and is written after the fork, by the parent, so it
//! exists by the time the command returns. What an unwritable pid file means is the
//! caller's choice: memcached warns and runs, nutcracker refuses to start.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why going to the background or writing the pid file failed.
#[derive(Debug)]
pub enum Error {
    Fork(io::Error),
    Setsid(io::Error),
    PidFile { path: PathBuf, source: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Fork(e) => write!(f, "daemonize failed: {e}"),
            Error::Setsid(_) => f.write_str("setsid failed"),
            Error::PidFile { path, source } => {
                write!(f, "cannot write pid file '{}': {source}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Fork(e) | Error::Setsid(e) | Error::PidFile { source: e, .. } => Some(e),
        }
    }
}

/// What to do when the pid file cannot be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PidFileError {
    /// Say so on stderr and run anyway (memcached).
    Warn,
    /// Do not run (nutcracker).
    Fail,
}

/// Forks into the background; returns in the child only. The parent writes `pid_file` with
/// the child's pid and exits (with status 1, stopping the child, when that fails under
/// `PidFileError::Fail`). The child leaves the terminal's session and, unless `keep_stdio`,
/// points fds 0-2 at /dev/null. Call it before any thread is spawned.
pub fn daemonize(
    keep_stdio: bool,
    pid_file: Option<&Path>,
    on_error: PidFileError,
) -> Result<(), Error> {
    // SAFETY: no threads exist yet, so the child may keep running Rust code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::Fork(io::Error::last_os_error()));
    }
    if pid > 0 {
        let code = match pid_file.map(|p| write_pid(p, pid as u32, on_error)) {
            Some(Err(e)) => {
                eprintln!("memfleet: {e}");
                // SAFETY: plain libc call; the child is ours to stop.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                1
            }
            _ => 0,
        };
        // SAFETY: leave without running the parent's destructors (the child owns the
        // listeners and removes the socket files and the pid file itself).
        unsafe { libc::_exit(code) };
    }
    // SAFETY: plain libc calls on our own process and fds 0-2.
    unsafe {
        if libc::setsid() == -1 {
            return Err(Error::Setsid(io::Error::last_os_error()));
        }
        if !keep_stdio {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
                if null > 2 {
                    libc::close(null);
                }
            }
        }
    }
    Ok(())
}

/// Writes this process's pid to `path` (for a process that stays in the foreground).
pub fn write_pid_file(path: &Path, on_error: PidFileError) -> Result<(), Error> {
    write_pid(path, std::process::id(), on_error)
}

fn write_pid(path: &Path, pid: u32, on_error: PidFileError) -> Result<(), Error> {
    match std::fs::write(path, format!("{pid}\n")) {
        Ok(()) => Ok(()),
        Err(source) => {
            let err = Error::PidFile {
                path: path.to_path_buf(),
                source,
            };
            if on_error == PidFileError::Fail {
                return Err(err);
            }
            eprintln!("warning: {err}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_file_holds_the_pid_and_an_unwritable_one_warns_or_fails() {
        let dir = std::env::temp_dir().join(format!("memfleet-daemon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.pid");
        write_pid_file(&path, PidFileError::Fail).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        let missing = dir.join("no/such/dir/x.pid");
        assert!(write_pid_file(&missing, PidFileError::Warn).is_ok());
        let err = write_pid_file(&missing, PidFileError::Fail).unwrap_err();
        assert!(matches!(err, Error::PidFile { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with("cannot write pid file '"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
