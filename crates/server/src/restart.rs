//! Warm restart (`-e FILE`, memcached 1.6's memory file): on SIGUSR1 or `shutdown graceful`
//! the server stops serving and writes its items to FILE; the next start with the same `-e`,
//! `-m` and `-I` serves them again with their flags, cas values and remaining TTLs.
//!
//! The file is read once at start-up and then removed, whatever its state, so a later crash
//! never brings back items that were changed or deleted since: only a clean SIGUSR1 stop
//! writes a new one. A file that is corrupt, truncated or from other settings is reported and
//! the server starts with an empty cache (the format is checksummed, see `store::snapshot`).

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::time::Instant;

use store::Store;

/// Read and write buffer: a snapshot block is 1 MiB.
const IO_BUF: usize = 2 << 20;

/// Fills the new `store` with FILE's items if it holds a valid snapshot; it is emptied
/// otherwise (flash items kept by `load_flash` included).
pub fn load(store: &Store, path: &str, now: u32) {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            stderr_line!("[restart] no saved state in {path}, starting with a clean cache");
            return;
        }
        Err(e) => {
            stderr_line!("[restart] cannot open {path}: {e}; starting with a clean cache");
            store.clear();
            return;
        }
    };
    let started = Instant::now();
    let cpu = thread_cpu_seconds();
    let loaded = store.load_snapshot(BufReader::with_capacity(IO_BUF, file), now);
    // Used up either way: a crash after this point must not bring these items back.
    if let Err(e) = std::fs::remove_file(path) {
        stderr_line!("[restart] cannot remove {path}: {e}");
    }
    match loaded {
        Ok(r) => {
            stderr_line!(
                "[restart] restored {} items from {path} in {:.3} s ({:.3} s CPU; saved at {} by {}; {} expired meanwhile, {} refused)",
                r.restored,
                started.elapsed().as_secs_f64(),
                thread_cpu_seconds() - cpu,
                r.header.saved_at,
                r.header.version,
                r.expired,
                r.refused
            );
        }
        Err(e) => {
            stderr_line!("[restart] {path}: {e}; starting with a clean cache");
            // Whatever part of the file was stored is dropped.
            store.clear();
        }
    }
}

/// Where a graceful stop keeps the index of the items on flash: beside the first flash
/// file, so that every start with that file finds (and uses up) it, with `-e` or without.
pub fn flash_index_path(flash: &crate::flash::options::FlashOptions) -> String {
    format!("{}.index", flash.paths[0].path)
}

/// Takes the flash items back from `path` when memory items are about to be restored too
/// (`load` runs next and drops the flash copies of the keys it stores, or everything if it
/// fails: flash copies never come back without the newer memory items), and removes the
/// file in any case: the flash space is written again from now on.
pub fn load_flash(store: &Store, path: &str, memory_file_present: bool, now: u32) {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            stderr_line!("[restart] cannot open {path}: {e}; flash items are not kept");
            return;
        }
    };
    let started = Instant::now();
    let loaded = memory_file_present
        .then(|| store.load_flash_index(BufReader::with_capacity(IO_BUF, file), now));
    if let Err(e) = std::fs::remove_file(path) {
        stderr_line!("[restart] cannot remove {path}: {e}");
    }
    match loaded {
        Some(Ok(r)) => stderr_line!(
            "[restart] kept {} items on flash from {path} in {:.3} s ({} dropped)",
            r.restored,
            started.elapsed().as_secs_f64(),
            r.dropped
        ),
        Some(Err(e)) => stderr_line!("[restart] {path}: {e}; flash items are not kept"),
        None => stderr_line!("[restart] {path} not used: there are no memory items to restore"),
    }
}

/// Writes the index of the items on flash to `path` (through a temporary file).
pub fn save_flash(store: &Store, path: &str) -> Result<(), String> {
    let started = Instant::now();
    let n = write_through_tmp(path, |out| store.save_flash_index(out))?;
    stderr_line!(
        "[restart] saved the places of {n} items on flash to {path} in {:.3} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// CPU time of the calling thread: other load on the machine inflates wall time.
fn thread_cpu_seconds() -> f64 {
    let u = crate::rusage::getrusage(libc::RUSAGE_THREAD);
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Writes the store's items to `path` (through a temporary file renamed into place, so a
/// failed save never leaves a partial file under the name the next start reads).
pub fn save(store: &Store, path: &str, version: &str, now: u32) -> Result<(), String> {
    let started = Instant::now();
    let r = write_through_tmp(path, |out| store.save_snapshot(out, version, now))?;
    stderr_line!(
        "[restart] saved {} items ({} bytes) to {path} in {:.3} s",
        r.items,
        r.bytes,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes `path` with `write` through `path.tmp`, synced and renamed into place once
/// complete, so a failed save never leaves a partial file under the name a start reads.
fn write_through_tmp<T>(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<T>,
) -> Result<T, String> {
    let tmp = format!("{path}.tmp");
    let attempt = || -> std::io::Result<T> {
        let mut out = BufWriter::with_capacity(IO_BUF, File::create(&tmp)?);
        let made = write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(made)
    };
    attempt().map_err(|e| {
        let _ = std::fs::remove_file(Path::new(&tmp));
        format!("[restart] failed to save to {path}: {e}")
    })
}
