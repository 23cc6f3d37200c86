//! Starting the real memcached 1.6.18 the differential tests compare with (a dev-dependency
//! of proto and bench; nothing else builds it).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const MEMCACHED: &str = "/usr/bin/memcached";

/// A memcached this test started; stopped when dropped.
pub struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The port of the memcached to compare with, and the server when this test started it.
pub fn memcached() -> Option<(u16, Option<Server>)> {
    if let Ok(p) = std::env::var("MEMCACHED_PORT") {
        return Some((p.parse().expect("MEMCACHED_PORT"), None));
    }
    if !std::path::Path::new(MEMCACHED).exists() {
        eprintln!("SKIP: {MEMCACHED} not installed");
        return None;
    }
    let (port, child) = spawn_on_free_port(&["-U", "0"]);
    Some((port, Some(Server(child))))
}

/// Starts memcached on 127.0.0.1 (as nobody, with `args`) on a TCP port it picks itself, and
/// returns that port once it listens.
///
/// `-p -1` lets memcached bind any free port and write which to its port file, so no port
/// chosen here can be taken before memcached binds it: by another test, or by a readiness
/// probe that connected to itself (on loopback, a connect to a port nobody listens on can
/// pick that very port as its source).
pub fn spawn_on_free_port(args: &[&str]) -> (u16, Child) {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let portfile = std::env::temp_dir().join(format!("memcached-{}-{n}.ports", std::process::id()));
    let _ = std::fs::remove_file(&portfile);
    let mut child = Command::new(MEMCACHED)
        .args(["-u", "nobody", "-l", "127.0.0.1", "-p", "-1"])
        .args(args)
        .env("MEMCACHED_PORT_FILENAME", &portfile)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let start = Instant::now();
    loop {
        // memcached writes the file under another name and renames it when complete.
        if let Ok(text) = std::fs::read_to_string(&portfile) {
            let _ = std::fs::remove_file(&portfile);
            let port = text
                .lines()
                .find_map(|l| l.strip_prefix("TCP INET: "))
                .and_then(|p| p.trim().parse().ok());
            if let Some(port) = port {
                return (port, child);
            }
        }
        let exited = child.try_wait().ok().flatten().is_some();
        if exited || start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("memcached did not start (exited: {exited})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
