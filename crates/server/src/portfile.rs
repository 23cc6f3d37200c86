//! `MEMCACHED_PORT_FILENAME`: where the server tells which ports it listens on, as memcached
//! does, so a test harness can start it on `-p -1` / `-U -1` (any free port) and find it.
//!
//! One line per listening address, TCP first: `TCP INET: <port>`, `TCP INET6: <port>`,
//! `UDP INET: <port>`, `UDP INET6: <port>`. The lines go to `<file>.lck` (appended, as
//! memcached opens it), which is then renamed to `<file>`, so a reader polling for the file
//! never sees it half written. Not written when serving a unix socket only.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;

/// The environment variable naming the file.
pub const ENV: &str = "MEMCACHED_PORT_FILENAME";

/// The file's text for these listening addresses.
pub fn lines(tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let mut out = String::new();
    for (proto, addrs) in [("TCP", tcp), ("UDP", udp)] {
        for a in addrs {
            let family = if a.is_ipv4() { "INET" } else { "INET6" };
            out.push_str(&format!("{proto} {family}: {}\n", a.port()));
        }
    }
    out
}

/// Writes the port lines to `path`; a failure is reported and the server runs on.
pub fn write(path: &Path, tcp: &[SocketAddr], udp: &[SocketAddr]) {
    if tcp.is_empty() && udp.is_empty() {
        return;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".lck");
    let written = OpenOptions::new()
        .append(true)
        .create(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(lines(tcp, udp).as_bytes()));
    if let Err(e) = written {
        stderr_line!("Failed to open \"{}\": {e}", Path::new(&tmp).display());
        return;
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        stderr_line!("Failed to rename \"{}\": {e}", Path::new(&tmp).display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_lines_then_udp_lines_by_family() {
        let tcp = [
            "127.0.0.1:4000".parse().unwrap(),
            "[::1]:4001".parse().unwrap(),
        ];
        let udp = ["127.0.0.1:5000".parse().unwrap()];
        assert_eq!(
            lines(&tcp, &udp),
            "TCP INET: 4000\nTCP INET6: 4001\nUDP INET: 5000\n"
        );
    }

    #[test]
    fn written_through_a_lock_file() {
        let dir = std::env::temp_dir().join(format!("memfleet-portfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ports");
        write(&path, &["127.0.0.1:4000".parse().unwrap()], &[]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "TCP INET: 4000\n");
        assert!(!dir.join("ports.lck").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
