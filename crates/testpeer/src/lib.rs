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

/// Starts memcached on 127.0.0.1 (as nobody, with `args`) on a free TCP port above 61000 and
/// returns that port once it listens.
///
/// Ports above 61000 are outside the kernel's client-port range (32768–60999), so a readiness
/// probe or another test's connection can never take the port as its source. A port found
/// free can still be taken before memcached binds it: then memcached exits and the next
/// port is tried. memcached writes the port it bound to `MEMCACHED_PORT_FILENAME` once it
/// listens, which is the readiness signal.
pub fn spawn_on_free_port(args: &[&str]) -> (u16, Child) {
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    const FIRST: u32 = 61_000;
    const SPAN: u32 = 65_535 - FIRST;
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    // Different test processes start at different ports.
    let offset = (std::process::id().wrapping_mul(7919) + n as u32 * 97) % SPAN;
    for attempt in 0..64 {
        let port = (FIRST + (offset + attempt * 31) % SPAN) as u16;
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if !free {
            continue;
        }
        if let Some(child) = spawn_on(port, n, args) {
            return (port, child);
        }
    }
    panic!("memcached did not start on any free port above {FIRST}");
}

/// memcached on `port`, once it listens; None when it exited (the port was taken).
fn spawn_on(port: u16, n: usize, args: &[&str]) -> Option<Child> {
    let portfile = std::env::temp_dir().join(format!("memcached-{}-{n}.ports", std::process::id()));
    let _ = std::fs::remove_file(&portfile);
    let mut child = Command::new(MEMCACHED)
        .args(["-u", "nobody", "-l", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .env("MEMCACHED_PORT_FILENAME", &portfile)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let start = Instant::now();
    loop {
        // memcached writes the file under another name and renames it when complete.
        if std::fs::metadata(&portfile).is_ok() {
            let _ = std::fs::remove_file(&portfile);
            return Some(child);
        }
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        if start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("memcached did not start on port {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
