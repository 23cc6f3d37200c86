//! TCP and unix-socket listeners and streams behind one type each, plus socket options.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use mio::event::Source;
use mio::{Interest, Registry, Token};

use crate::shared::BackendAddr;
use crate::tls::TlsStream;
use nutconf::Listen;

/// A bound listening socket, before it is handed to worker threads.
pub enum StdListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl StdListener {
    /// Binds `listen` with `backlog`: SO_REUSEADDR for TCP; an old socket file is replaced
    /// and `mode` applied for unix sockets.
    pub fn bind(listen: &Listen, backlog: u32) -> io::Result<StdListener> {
        let backlog = i32::try_from(backlog).unwrap_or(i32::MAX).max(1);
        match listen {
            Listen::Tcp { host, port } => {
                let addr = (host.as_str(), *port)
                    .to_socket_addrs()?
                    .next()
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve '{host}'"))
                    })?;
                let sock = socket2::Socket::new(
                    socket2::Domain::for_address(addr),
                    socket2::Type::STREAM,
                    None,
                )?;
                sock.set_reuse_address(true)?;
                sock.bind(&addr.into())?;
                sock.listen(backlog)?;
                sock.set_nonblocking(true)?;
                Ok(StdListener::Tcp(sock.into()))
            }
            Listen::Unix { path, mode } => {
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    use std::os::unix::fs::FileTypeExt;
                    if meta.file_type().is_socket() {
                        let _ = std::fs::remove_file(path);
                    }
                }
                let sock =
                    socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
                sock.bind(&socket2::SockAddr::unix(path)?)?;
                sock.listen(backlog)?;
                sock.set_nonblocking(true)?;
                if let Some(mode) = mode {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))?;
                }
                Ok(StdListener::Unix(sock.into()))
            }
        }
    }

    /// Another handle on the same socket for one more worker's poller.
    pub fn try_clone(&self) -> io::Result<Listener> {
        Ok(match self {
            StdListener::Tcp(l) => Listener::Tcp(mio::net::TcpListener::from_std(l.try_clone()?)),
            StdListener::Unix(l) => {
                Listener::Unix(mio::net::UnixListener::from_std(l.try_clone()?))
            }
        })
    }
}

/// A worker's handle on a listening socket.
pub enum Listener {
    Tcp(mio::net::TcpListener),
    Unix(mio::net::UnixListener),
}

impl Listener {
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }

    fn source(&mut self) -> &mut dyn Source {
        match self {
            Listener::Tcp(l) => l,
            Listener::Unix(l) => l,
        }
    }

    /// Watches the listener in `poll`.
    pub fn watch(&mut self, poll: &mio::Poll, token: Token) -> io::Result<()> {
        poll.registry()
            .register(self.source(), token, Interest::READABLE)
    }

    /// Stops watching (the listener is about to be dropped); harmless if never watched.
    pub fn unwatch(&mut self, poll: &mio::Poll) {
        let _ = poll.registry().deregister(self.source());
    }
}

/// A client or backend connection.
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<crate::tls::TlsStream>),
}

impl Stream {
    /// Starts a non-blocking connect; completion (or failure) shows up as writable.
    pub fn connect(addr: &BackendAddr, keepalive: bool) -> io::Result<Stream> {
        match addr {
            BackendAddr::Tcp(a) => {
                let s = mio::net::TcpStream::connect(*a)?;
                let _ = s.set_nodelay(true);
                if keepalive {
                    let _ = socket2::SockRef::from(&s).set_keepalive(true);
                }
                Ok(Stream::Tcp(s))
            }
            BackendAddr::Unix(p) => Ok(Stream::Unix(mio::net::UnixStream::connect(p)?)),
        }
    }

    /// After a writable event on a connecting socket: `Ok` once connected.
    pub fn connect_result(&self) -> io::Result<bool> {
        let err = match self {
            Stream::Tcp(s) => s.take_error()?,
            Stream::Unix(s) => s.take_error()?,
            Stream::Tls(s) => s.tcp.take_error()?,
        };
        if let Some(e) = err {
            return Err(e);
        }
        let peer = match self {
            Stream::Tcp(s) => s.peer_addr().map(|_| ()),
            Stream::Unix(s) => s.peer_addr().map(|_| ()),
            Stream::Tls(s) => s.tcp.peer_addr().map(|_| ()),
        };
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn register(&mut self, r: &Registry, t: Token) -> io::Result<()> {
        r.register(self.source(), t, Interest::READABLE | Interest::WRITABLE)
    }

    pub fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => &mut s.tcp,
        }
    }

    /// This TCP connection with TLS on top, as the server side; a unix socket stays plain.
    pub fn into_tls_server(self, config: &Arc<rustls::ServerConfig>) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => Ok(Stream::Tls(Box::new(TlsStream::server(s, config.clone())?))),
            other => Ok(other),
        }
    }

    /// This TCP connection with TLS on top, as the client of server `name`.
    pub fn into_tls_client(
        self,
        config: &Arc<rustls::ClientConfig>,
        name: &str,
    ) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => Ok(Stream::Tls(Box::new(TlsStream::client(
                s,
                config.clone(),
                name,
            )?))),
            other => Ok(other),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    /// Writes what TLS holds back (records the socket refused); a no-op on plain streams.
    #[inline]
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

/// strerror-style text for an I/O error (without Rust's " (os error N)" suffix), as
/// nutcracker puts it after `SERVER_ERROR `.
pub fn error_text(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}
