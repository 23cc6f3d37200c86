//! mcrouter's asynclog: a delete that a PoolRoute with `asynclog` could not deliver is
//! appended to the spool of its destination under `--async-dir` (one file per server,
//! `HOST:PORT.asynclog`) and the client gets `NOT_FOUND`, as from mcrouter. A replay
//! thread, with its own blocking connections, sends each spool's deletes in order once
//! its server answers again; entries leave the spool only once `DELETED` or `NOT_FOUND`
//! came back. Spools left by an earlier run (a crash, kill -9) are replayed at start.
//!
//! The process has one asynclog, set at start; without `--async-dir` (or with
//! `--asynclog-disable`) there is none and failed deletes get their error.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::log;
use crate::mcrouter::reply::McResult;
use crate::mcrouter::spool::Spool;

/// Default `--asynclog-max-bytes`: 64 MiB per destination.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// How often the replay thread looks for spools to replay.
const REPLAY_EVERY: Duration = Duration::from_millis(500);
/// Deletes sent per round trip while replaying.
const BATCH: usize = 256;
const SUFFIX: &str = ".asynclog";

static ASYNCLOG: OnceLock<Asynclog> = OnceLock::new();

/// The destinations (`host:port`) whose server entry says `ssl` in the configuration last
/// loaded, with their TLS config and the name to verify: replays to them speak TLS.
static TLS_DESTINATIONS: Mutex<Vec<(String, TlsTo)>> = Mutex::new(Vec::new());

/// A TLS client config and the server name it verifies.
pub type TlsTo = (Arc<rustls::ClientConfig>, String);

/// Replaces the TLS destinations (each configuration load).
pub fn set_tls_destinations(list: Vec<(String, TlsTo)>) {
    *TLS_DESTINATIONS.lock().unwrap_or_else(|e| e.into_inner()) = list;
}

fn tls_for(dest: &str) -> Option<TlsTo> {
    let list = TLS_DESTINATIONS.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().find(|(d, _)| d == dest).map(|(_, t)| t.clone())
}

/// A replay connection, plain or TLS.
trait Conn: io::Read + Write {}
impl<T: io::Read + Write> Conn for T {}

struct Asynclog {
    dir: PathBuf,
    max_bytes: u64,
    /// Spools by destination (`host:port`).
    spools: Mutex<HashMap<String, Arc<Mutex<Spool>>>>,
    timeout: Duration,
}

/// Whether failed deletes are spooled.
pub fn enabled() -> bool {
    ASYNCLOG.get().is_some()
}

/// Whether mcrouter logs a delete that ended with `result` (a delivery failure).
pub fn spools(result: McResult) -> bool {
    matches!(
        result,
        McResult::Timeout
            | McResult::ConnectTimeout
            | McResult::ConnectError
            | McResult::Tko
            | McResult::RemoteError
    )
}

/// Sets up the asynclog in `dir`, loads the spools an earlier run left and starts the
/// replay thread. `timeout` bounds each replay connect and read.
pub fn start(dir: PathBuf, max_bytes: u64, timeout: Duration) -> Result<(), String> {
    std::fs::create_dir_all(&dir).map_err(|e| format!("--async-dir {}: {e}", dir.display()))?;
    let mut spools = HashMap::new();
    let listing =
        std::fs::read_dir(&dir).map_err(|e| format!("--async-dir {}: {e}", dir.display()))?;
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(dest) = name.strip_suffix(SUFFIX) else {
            continue;
        };
        let spool = Spool::open(&entry.path(), max_bytes)
            .map_err(|e| format!("asynclog {}: {e}", entry.path().display()))?;
        if !spool.is_empty() {
            log::notice(&format!(
                "asynclog: {} deletes for {dest} left from an earlier run",
                spool.len()
            ));
        }
        spools.insert(dest.to_owned(), Arc::new(Mutex::new(spool)));
    }
    let log = Asynclog {
        dir,
        max_bytes,
        spools: Mutex::new(spools),
        timeout,
    };
    if ASYNCLOG.set(log).is_err() {
        return Err("asynclog started twice".into());
    }
    std::thread::Builder::new()
        .name("asynclog".into())
        .spawn(replay_loop)
        .map_err(|e| format!("asynclog thread: {e}"))?;
    Ok(())
}

/// Spools a delete of `key` for `host:port`, on disk before this returns. False when
/// there is no asynclog or the write failed (the client then gets the error).
pub fn spool_delete(host: &str, port: u16, key: &[u8]) -> bool {
    let Some(a) = ASYNCLOG.get() else {
        return false;
    };
    let dest = format!("{host}:{port}");
    let spool = {
        let mut spools = a.spools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = spools.get(&dest) {
            s.clone()
        } else {
            let path = a.dir.join(format!("{dest}{SUFFIX}"));
            match Spool::open(&path, a.max_bytes) {
                Ok(s) => {
                    let s = Arc::new(Mutex::new(s));
                    spools.insert(dest.clone(), s.clone());
                    s
                }
                Err(e) => {
                    log::warn(&format!("asynclog {}: {e}", path.display()));
                    return false;
                }
            }
        }
    };
    let mut spool = spool.lock().unwrap_or_else(|e| e.into_inner());
    match spool.push(key) {
        Ok(0) => true,
        Ok(dropped) => {
            log::warn(&format!(
                "asynclog: spool for {dest} is full (--asynclog-max-bytes {}): dropped its \
                 {dropped} oldest deletes ({} in all), {} bytes left",
                a.max_bytes,
                spool.dropped(),
                spool.bytes()
            ));
            true
        }
        Err(e) => {
            log::warn(&format!("asynclog {}: {e}", spool.path().display()));
            false
        }
    }
}

fn replay_loop() {
    let Some(a) = ASYNCLOG.get() else {
        return;
    };
    loop {
        let pending: Vec<(String, Arc<Mutex<Spool>>)> = {
            let spools = a.spools.lock().unwrap_or_else(|e| e.into_inner());
            spools
                .iter()
                .filter(|(_, s)| !s.lock().unwrap_or_else(|e| e.into_inner()).is_empty())
                .map(|(d, s)| (d.clone(), s.clone()))
                .collect()
        };
        for (dest, spool) in pending {
            match replay(&dest, &spool, a.timeout) {
                Ok(0) => {}
                Ok(n) => log::notice(&format!("asynclog: replayed {n} deletes to {dest}")),
                Err(e) => log::info(&format!("asynclog: {dest} not reachable yet: {e}")),
            }
        }
        std::thread::sleep(REPLAY_EVERY);
    }
}

/// Sends `dest` its spooled deletes, oldest first, until the spool is empty or the
/// server fails to acknowledge one. Returns how many were acknowledged.
fn replay(dest: &str, spool: &Mutex<Spool>, timeout: Duration) -> io::Result<usize> {
    let addr = dest
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    tcp.set_nodelay(true)?;
    let stream: Box<dyn Conn> = match tls_for(dest) {
        Some((config, name)) => Box::new(crate::tls::blocking_client(tcp, &config, &name)?),
        None => Box::new(tcp),
    };
    let mut reader = BufReader::new(stream);
    // A hung server still completes connects and takes writes into its socket buffer: deletes
    // sent now would run whenever it resumes, unacknowledged. Ask it to answer first.
    reader.get_mut().write_all(b"version\r\n")?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if !line.starts_with("VERSION ") {
        return Err(io::Error::other(format!(
            "replied {:?} to version",
            line.trim_end()
        )));
    }
    let mut total = 0;
    loop {
        let (seq, batch) = spool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .oldest(BATCH);
        if batch.is_empty() {
            return Ok(total);
        }
        let mut out = Vec::new();
        for key in &batch {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        reader.get_mut().write_all(&out)?;
        let mut acked = 0;
        let mut refused = None;
        for _ in &batch {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                refused = Some("connection closed".to_owned());
                break;
            }
            match line.trim_end() {
                "DELETED" | "NOT_FOUND" => acked += 1,
                other => {
                    refused = Some(format!("replied {other:?}"));
                    break;
                }
            }
        }
        spool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ack(seq, acked)?;
        total += acked;
        if let Some(why) = refused {
            return Err(io::Error::other(why));
        }
    }
}
