//! TLS for `memfleet serve -Z`, as memcached 1.6 offers it: the certificates and the rustls
//! configuration built from them (re-read by `refresh_certs`), and the record I/O a worker
//! runs on a TLS connection (`io`). Plain connections never enter this module.

pub mod io;
pub mod options;

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use rustls::crypto::ring::default_provider;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{ServerConfig, ServerConnection};

use options::{TlsOptions, VerifyMode};

/// Sessions the server remembers for resumption with `ssl_session_cache`.
const SESSION_CACHE_SIZE: usize = 1024;

/// The server's TLS state, shared by the workers.
pub struct Tls {
    options: TlsOptions,
    /// Replaced whole by `refresh_certs`; connections keep the config they started with.
    config: RwLock<Arc<ServerConfig>>,
    /// Unix time of the last (re)load, for `time_since_server_cert_refresh`.
    loaded_at: AtomicU32,
}

impl Tls {
    pub fn new(options: &TlsOptions, now: u32) -> Result<Tls, String> {
        Ok(Tls {
            config: RwLock::new(Arc::new(load(options)?)),
            options: options.clone(),
            loaded_at: AtomicU32::new(now),
        })
    }

    /// Re-reads the certificate, key and CA files; on error the old ones stay in use.
    pub fn refresh(&self, now: u32) -> Result<(), String> {
        let config = Arc::new(load(&self.options)?);
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        self.loaded_at.store(now, Relaxed);
        Ok(())
    }

    /// A server-side session for a new connection, with the current certificates.
    pub fn accept(&self) -> Result<ServerConnection, rustls::Error> {
        let config = self
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ServerConnection::new(config)
    }

    pub fn seconds_since_refresh(&self, now: u32) -> u32 {
        now.saturating_sub(self.loaded_at.load(Relaxed))
    }
}

fn load(o: &TlsOptions) -> Result<ServerConfig, String> {
    let chain_path = o.chain_cert.as_deref().unwrap_or_default();
    let chain_err = |e: &dyn std::fmt::Display| {
        format!("Error loading the certificate chain: {chain_path} : {e}")
    };
    let chain = tlsload::certs(chain_path).map_err(|e| chain_err(&e))?;
    let key_path = o.key.as_deref().unwrap_or(chain_path);
    let key = tlsload::private_key(key_path)
        .map_err(|e| format!("Error loading the key: {key_path} : {e}"))?;

    let provider = Arc::new(default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if o.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?;
    let verifier = match (o.verify_mode, &o.ca_cert) {
        (VerifyMode::None, _) | (_, None) => WebPkiClientVerifier::no_client_auth(),
        (mode, Some(ca_path)) => {
            let ca_err = |e: &dyn std::fmt::Display| {
                format!("Error loading the CA certificates: {ca_path} : {e}")
            };
            let certs = tlsload::all_certs(ca_path).map_err(|e| ca_err(&e))?;
            let roots = tlsload::roots(certs).map_err(|e| ca_err(&e))?;
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let b = if mode == VerifyMode::Request {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(|e| ca_err(&e))?
        }
    };
    let mut config = builder
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("Error loading the key: {key_path} : {e}"))?;
    if o.session_cache {
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_SIZE);
    } else {
        // As memcached without ssl_session_cache: no resumption, so no tickets to send either.
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(config)
}
