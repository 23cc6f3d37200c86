//! A minimal logger in nutcracker's format (`[time] message`), to stderr or the `-o` file.
//! Logging happens on rare events only (start, reload, ejection), so a mutex is fine.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

static LEVEL: AtomicU8 = AtomicU8::new(5);
static OUT: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// nutcracker's `-v` levels: 5 = notice (default), higher is chattier.
pub fn init(level: u8, file: Option<std::fs::File>) {
    LEVEL.store(level, Relaxed);
    *OUT.lock().unwrap_or_else(|e| e.into_inner()) = file;
}

/// nutcracker's most verbose level (LOG_PVERB).
const MAX_LEVEL: u8 = 11;

/// SIGTTIN and SIGTTOU, as in nutcracker: one level chattier or quieter (0 to 11).
pub fn change_level(louder: bool) {
    let now = LEVEL.load(Relaxed);
    let new = if louder {
        now.saturating_add(1).min(MAX_LEVEL)
    } else {
        now.saturating_sub(1)
    };
    LEVEL.store(new, Relaxed);
    // Written whatever the new level is.
    write(0, &format!("log level set to {new}"));
}

/// Opens the `-o` file for appending (created if missing).
pub fn open(path: &std::path::Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open log file '{}': {e}", path.display()))
}

/// SIGHUP, as in nutcracker: a log rotator renamed the file, so the name is opened again; if
/// that fails, the old file is kept.
pub fn reopen(path: &std::path::Path) {
    match open(path) {
        Ok(f) => *OUT.lock().unwrap_or_else(|e| e.into_inner()) = Some(f),
        Err(e) => warn(&e),
    }
}

fn write(level: u8, msg: &str) {
    if level > LEVEL.load(Relaxed) {
        return;
    }
    let secs = epoch_us() / 1_000_000;
    let line = format!("[{secs}] {msg}\n");
    let mut out = OUT.lock().unwrap_or_else(|e| e.into_inner());
    match out.as_mut() {
        Some(f) => {
            let _ = f.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

/// Warnings and notices: ejections, reloads, refused configurations.
pub fn warn(msg: &str) {
    write(4, msg);
}

pub fn notice(msg: &str) {
    write(5, msg);
}

pub fn info(msg: &str) {
    write(6, msg);
}

/// Wall-clock microseconds since the Unix epoch (0 if the clock is before it).
pub fn epoch_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
