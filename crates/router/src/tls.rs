//! TLS for `memfleet route`: the rustls configs a pool's YAML asks for (on its listener,
//! to its servers) and the nonblocking stream that carries records over a mio socket.

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig};
use tlsload::SYSTEM_CA_BUNDLE;

use nutconf::PoolTls;

/// A pool's TLS configs, read from its files when the configuration is loaded.
#[derive(Default)]
pub struct TlsConfigs {
    /// Clients connecting to the pool's listener (`listen_tls_cert_file`).
    pub listen: Option<Arc<ServerConfig>>,
    /// Connections to the pool's servers (`tls: true`).
    pub servers: Option<Arc<ClientConfig>>,
}

impl TlsConfigs {
    pub fn load(t: &PoolTls) -> Result<TlsConfigs, String> {
        let provider = Arc::new(default_provider());
        let listen = match (&t.listen_cert_file, &t.listen_key_file) {
            (Some(cert), Some(key)) => {
                let builder = ServerConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?;
                let builder = match &t.listen_ca_file {
                    Some(ca) => builder.with_client_cert_verifier(
                        WebPkiClientVerifier::builder_with_provider(
                            Arc::new(roots(ca)?),
                            provider.clone(),
                        )
                        .build()
                        .map_err(|e| format!("{ca}: {e}"))?,
                    ),
                    None => builder.with_no_client_auth(),
                };
                let config = builder
                    .with_single_cert(certs(cert)?, private_key(key)?)
                    .map_err(|e| format!("{cert}: {e}"))?;
                Some(Arc::new(config))
            }
            _ => None,
        };
        let servers = if t.to_servers() {
            let ca = t.ca_file.as_deref().unwrap_or(SYSTEM_CA_BUNDLE);
            let builder = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots(ca)?);
            let config = match (&t.cert_file, &t.key_file) {
                (Some(cert), Some(key)) => builder
                    .with_client_auth_cert(certs(cert)?, private_key(key)?)
                    .map_err(|e| format!("{cert}: {e}"))?,
                _ => builder.with_no_client_auth(),
            };
            Some(Arc::new(config))
        } else {
            None
        };
        Ok(TlsConfigs { listen, servers })
    }
}

fn certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    tlsload::certs(path).map_err(|e| format!("{path}: {e}"))
}

fn private_key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    tlsload::private_key(path).map_err(|e| format!("{path}: {e}"))
}

fn roots(path: &str) -> Result<RootCertStore, String> {
    tlsload::roots(certs(path)?).map_err(|e| format!("{path}: {e}"))
}

fn client_connection(config: Arc<ClientConfig>, name: &str) -> io::Result<ClientConnection> {
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    ClientConnection::new(config, name).map_err(io::Error::other)
}

/// A blocking TLS client connection (probes of TKO or ejected servers).
pub fn blocking_client(
    tcp: std::net::TcpStream,
    config: &Arc<ClientConfig>,
    name: &str,
) -> io::Result<rustls::StreamOwned<ClientConnection, std::net::TcpStream>> {
    Ok(rustls::StreamOwned::new(
        client_connection(config.clone(), name)?,
        tcp,
    ))
}

/// A TCP connection carrying TLS, client or server side. Reads fill the buffer as far as
/// records and socket allow, so a short read still means the socket is drained; writes
/// take all plaintext (no buffer limit: the router bounds what it queues) and encrypted
/// records the socket refused wait for `flush`, which the worker calls on writable events.
pub struct TlsStream {
    pub tcp: mio::net::TcpStream,
    conn: Connection,
}

impl TlsStream {
    pub fn server(tcp: mio::net::TcpStream, config: Arc<ServerConfig>) -> io::Result<TlsStream> {
        let conn = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream::new(tcp, conn.into()))
    }

    pub fn client(
        tcp: mio::net::TcpStream,
        config: Arc<ClientConfig>,
        name: &str,
    ) -> io::Result<TlsStream> {
        Ok(TlsStream::new(tcp, client_connection(config, name)?.into()))
    }

    fn new(tcp: mio::net::TcpStream, mut conn: Connection) -> TlsStream {
        conn.set_buffer_limit(None);
        TlsStream { tcp, conn }
    }

    /// Writes queued records; `WouldBlock` if the socket refused some.
    fn flush_records(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// `WouldBlock` is no error where records are only queued for later.
fn queued(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        r => r,
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        loop {
            let state = match self.conn.process_new_packets() {
                Ok(state) => state,
                Err(e) => {
                    // The alert rustls queued tells the peer why; the connection closes anyway.
                    let _ = self.flush_records();
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            // Handshake messages, and requests written before the handshake ended.
            queued(self.flush_records())?;
            if state.plaintext_bytes_to_read() > 0 {
                got += self.conn.reader().read(&mut buf[got..])?;
                if got == buf.len() {
                    return Ok(got);
                }
                continue;
            }
            if state.peer_has_closed() {
                return Ok(got);
            }
            match self.conn.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(got),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => return Ok(got),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Older records first: while the socket refuses them, no new plaintext is taken.
        self.flush_records()?;
        let n = self.conn.writer().write(buf)?;
        queued(self.flush_records())?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_records()
    }
}
