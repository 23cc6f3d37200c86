//! The sockets the server listens on (`-l`/`-p`, `-s`, `-U`), bound before the server
//! daemonizes or drops privileges.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use mio::net::{TcpListener, UnixListener};

use crate::config::Settings;

/// A listening socket and its name as `stats conns` prints it (shared by its connections).
pub enum Listener {
    /// True: a TLS listener (`-Z`, not `notls:`).
    Tcp(TcpListener, Arc<str>, bool),
    Unix(UnixListener, Arc<str>),
}

pub fn bind_listeners(settings: &Settings) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    if let Some((path, mask)) = &settings.unix_socket {
        // A stale socket file from a previous run would make bind fail.
        if std::fs::symlink_metadata(path).is_ok() {
            let _ = std::fs::remove_file(path);
        }
        let l = UnixListener::bind(path).map_err(|e| format!("bind(unix:{path}): {e}"))?;
        // memcached applies -a through umask on a 0777 socket, so the mask is the resulting mode.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mask))
            .map_err(|e| format!("chmod {path}: {e}"))?;
        out.push(Listener::Unix(l, format!("unix:{path}").into()));
    }
    for addr in &settings.tcp {
        let domain = socket2::Domain::for_address(*addr);
        let sock =
            socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
        sock.set_reuse_address(true).map_err(|e| e.to_string())?;
        if addr.is_ipv6() {
            let _ = sock.set_only_v6(true);
        }
        sock.bind(&(*addr).into())
            .map_err(|e| format!("failed to listen on TCP port {}: {e}", addr.port()))?;
        sock.listen(settings.backlog).map_err(|e| e.to_string())?;
        sock.set_nonblocking(true).map_err(|e| e.to_string())?;
        let std_l: std::net::TcpListener = sock.into();
        let local = std_l.local_addr().map_err(|e| e.to_string())?;
        let tls = settings.tls.enabled && !settings.notls.contains(addr);
        out.push(Listener::Tcp(
            TcpListener::from_std(std_l),
            format!("tcp:{local}").into(),
            tls,
        ));
    }
    if out.is_empty() && settings.udp.is_empty() {
        return Err("no listening sockets: give -p, -U or -s".into());
    }
    Ok(out)
}

/// One UDP socket per worker per address (SO_REUSEPORT), so each thread replies from its own
/// socket and the kernel spreads datagrams over threads.
pub fn bind_udp(settings: &Settings) -> Result<Vec<Vec<std::net::UdpSocket>>, String> {
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    for addr in &settings.udp {
        // Port 0 (-U -1): the first socket picks a free port and the others join it.
        let mut addr = *addr;
        for sockets in per_worker.iter_mut() {
            let domain = socket2::Domain::for_address(addr);
            let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, None)
                .map_err(|e| e.to_string())?;
            sock.set_reuse_address(true).map_err(|e| e.to_string())?;
            sock.set_reuse_port(true).map_err(|e| e.to_string())?;
            sock.bind(&addr.into())
                .map_err(|e| format!("failed to listen on UDP port {}: {e}", addr.port()))?;
            let sock: std::net::UdpSocket = sock.into();
            if addr.port() == 0 {
                addr.set_port(sock.local_addr().map_err(|e| e.to_string())?.port());
            }
            sockets.push(sock);
        }
    }
    Ok(per_worker)
}

/// With $MEMFLEET_PORT_FILE set, the addresses bound (for tests and supervisors that ask for
/// port 0).
pub fn write_port_file(listeners: &[Listener], udp: &[Vec<std::net::UdpSocket>]) {
    let Some(path) = std::env::var_os(crate::portfile::ENV) else {
        return;
    };
    let tcp: Vec<std::net::SocketAddr> = listeners
        .iter()
        .filter_map(|l| match l {
            Listener::Tcp(l, _, _) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        })
        .collect();
    // One socket per worker shares each UDP address: report the first worker's.
    let udp: Vec<std::net::SocketAddr> = udp
        .first()
        .map(|socks| socks.iter().filter_map(|s| s.local_addr().ok()).collect())
        .unwrap_or_default();
    crate::portfile::write(std::path::Path::new(&path), &tcp, &udp);
}
