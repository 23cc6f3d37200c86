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
