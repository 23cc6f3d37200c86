//! Starting the real memcached 1.6.18 the differential tests compare with.

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
    // `-p -1` lets memcached bind any free port, and it writes which to the port file: no
    // port chosen here can be taken (by another test, or by a probe connected to itself)
    // before memcached binds it.
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let portfile = std::env::temp_dir().join(format!("memcached-{}-{n}.ports", std::process::id()));
    let _ = std::fs::remove_file(&portfile);
    let child = Command::new(MEMCACHED)
        .args(["-u", "nobody", "-U", "0", "-l", "127.0.0.1", "-p", "-1"])
        .env("MEMCACHED_PORT_FILENAME", &portfile)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let mut server = Server(child);
    let start = Instant::now();
    loop {
        // memcached writes the file under another name and renames it when complete.
        if let Ok(text) = std::fs::read_to_string(&portfile) {
            let _ = std::fs::remove_file(&portfile);
            let port = text
                .lines()
                .find_map(|l| l.strip_prefix("TCP INET: "))
                .and_then(|p| p.trim().parse().ok())
                .expect("a TCP port in memcached's port file");
            return Some((port, Some(server)));
        }
        assert!(
            server.0.try_wait().ok().flatten().is_none(),
            "memcached exited at start"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "memcached did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
