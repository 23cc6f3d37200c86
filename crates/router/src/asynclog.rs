//! mcrouter's asynclog: a delete that a PoolRoute with `asynclog` could not deliver is
//! appended to the spool of its destination under `--async-dir` (one file per server,
//! `HOST:PORT.asynclog`) and the client gets `NOT_FOUND`, as from mcrouter, once the entry
//! is on disk. A worker appends during its loop turn into a [`GroupCommit`] and syncs each
//! spool it touched once at the end of the turn (group commit): one fsync per spool per
//! turn, not per delete, and no client hears before its delete is durable. A replay
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
use routetree::reply::McResult;
use spool::Spool;

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

/// The spools a worker appended to in this loop turn, synced together by
/// [`GroupCommit::commit`]. Each append has a ticket: its spool's place here.
#[derive(Default)]
pub struct GroupCommit {
    spools: Vec<Arc<Mutex<Spool>>>,
}

impl GroupCommit {
    /// The ticket of `spool`, added if new.
    fn ticket(&mut self, spool: &Arc<Mutex<Spool>>) -> usize {
        match self.spools.iter().position(|s| Arc::ptr_eq(s, spool)) {
            Some(t) => t,
            None => {
                self.spools.push(spool.clone());
                self.spools.len() - 1
            }
        }
    }

    /// Syncs every spool once and starts a new group. Returns, per ticket, whether its
    /// appends are on disk.
    pub fn commit(&mut self) -> Vec<bool> {
        self.spools
            .drain(..)
            .map(|spool| {
                let mut spool = spool.lock().unwrap_or_else(|e| e.into_inner());
                match spool.sync() {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn(&format!("asynclog {}: {e}", spool.path().display()));
                        false
                    }
                }
            })
            .collect()
    }
}

/// Appends a delete of `key` for `host:port` to its spool, not yet synced: the delete is
/// durable once `group`'s next [`GroupCommit::commit`] says so for the returned ticket.
/// `None` when there is no asynclog or the write failed (the client then gets the error).
pub fn spool_delete(host: &str, port: u16, key: &[u8], group: &mut GroupCommit) -> Option<usize> {
    let a = ASYNCLOG.get()?;
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
                    return None;
                }
            }
        }
    };
    let mut locked = spool.lock().unwrap_or_else(|e| e.into_inner());
    match locked.append(key) {
        Ok(0) => {}
        Ok(dropped) => log::warn(&format!(
            "asynclog: spool for {dest} is full (--asynclog-max-bytes {}): dropped its \
             {dropped} oldest deletes ({} in all), {} bytes left",
            a.max_bytes,
            locked.dropped(),
            locked.bytes()
        )),
        Err(e) => {
            log::warn(&format!("asynclog {}: {e}", locked.path().display()));
            return None;
        }
    }
    drop(locked);
    Some(group.ticket(&spool))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_syncs_each_spool_once_and_keeps_the_order() {
        let dir = std::env::temp_dir().join(format!("memfleet-group-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let open = |name: &str| {
            let path = dir.join(name);
            (
                Arc::new(Mutex::new(Spool::open(&path, 1 << 20).unwrap())),
                path,
            )
        };
        let (a, a_path) = open("a:1.asynclog");
        let (b, b_path) = open("b:1.asynclog");
        let mut group = GroupCommit::default();
        let mut tickets = Vec::new();
        // Interleaved appends, as the deletes of several clients arrive in one turn.
        for i in 0..20 {
            let spool = if i % 3 == 0 { &b } else { &a };
            spool
                .lock()
                .unwrap()
                .append(format!("k{i}").as_bytes())
                .unwrap();
            tickets.push(group.ticket(spool));
        }
        assert_eq!(tickets[0], tickets[3], "one ticket per spool");
        assert_ne!(tickets[0], tickets[1]);
        assert_eq!(group.commit(), vec![true, true]);
        assert!(group.spools.is_empty(), "a commit starts a new group");
        assert_eq!(a.lock().unwrap().syncs(), 1);
        assert_eq!(b.lock().unwrap().syncs(), 1);
        let want = |m: u32| -> Vec<Vec<u8>> {
            (0..20)
                .filter(|i| (i % 3 == 0) == (m == 0))
                .map(|i| format!("k{i}").into_bytes())
                .collect()
        };
        drop((a, b));
        let reopened = |p: &std::path::Path| Spool::open(p, 1 << 20).unwrap().oldest(100).1;
        assert_eq!(reopened(&b_path), want(0));
        assert_eq!(reopened(&a_path), want(1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
