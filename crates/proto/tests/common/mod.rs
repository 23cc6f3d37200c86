//! Starting the real memcached 1.6.18 the differential tests compare with.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
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
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = Command::new(MEMCACHED)
        .args(["-u", "nobody", "-U", "0", "-l", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn memcached");
    let server = Server(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "memcached did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((port, Some(server)))
}
