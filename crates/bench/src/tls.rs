//! `--tls` and memtier's TLS options: the rustls client config every connection of a run
//! shares, and the handshake that turns a TCP connection into a TLS one.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring::default_provider, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tlsload::SYSTEM_CA_BUNDLE;
use tokio_rustls::TlsConnector;

use crate::error::{ConnError, TlsError};

/// memtier_benchmark's TLS options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect with TLS.
    #[arg(long)]
    pub tls: bool,
    /// Client certificate (PEM) for servers that verify clients (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<String>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<String>,
    /// CA certificates (PEM) to verify the server with [default: the system's].
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<String>,
    /// Do not verify the server's certificate.
    #[arg(long)]
    pub tls_skip_verify: bool,
    /// Server name to send (SNI) and to verify the certificate against [default: --server].
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
}

/// A run's TLS client side: the config and the name connections present and verify.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsClient({:?})", self.name)
    }
}

impl TlsArgs {
    /// None without `--tls`; reads the certificate files now so a bad one is reported before
    /// any connection is made.
    pub fn client(&self, server: &str) -> Result<Option<TlsClient>, TlsError> {
        if !self.tls {
            let given = self.cert.is_some()
                || self.cacert.is_some()
                || self.tls_skip_verify
                || self.sni.is_some();
            return match given {
                true => Err(TlsError::NeedsTls),
                false => Ok(None),
            };
        }
        let provider = Arc::new(default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Setup)?;
        let builder = if self.tls_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = tlsload::certs(cert).map_err(|error| TlsError::Certs {
                    path: cert.clone(),
                    error,
                })?;
                let key = tlsload::private_key(key).map_err(|error| TlsError::Key {
                    path: key.clone(),
                    error,
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(TlsError::ClientAuth)?
            }
            _ => builder.with_no_client_auth(),
        };
        // One connection per client for the whole run: nothing to resume.
        config.resumption = rustls::client::Resumption::disabled();
        let host = self.sni.as_deref().unwrap_or(server);
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| TlsError::ServerName(host.to_owned()))?;
        Ok(Some(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        }))
    }

    /// Without `--cacert`: $SSL_CERT_FILE, else the system's bundle.
    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let path = match &self.cacert {
            Some(p) => p.clone(),
            None => std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| SYSTEM_CA_BUNDLE.into()),
        };
        let certs = tlsload::certs(&path).map_err(|error| TlsError::Certs {
            path: path.clone(),
            error,
        })?;
        tlsload::roots(certs).map_err(|error| TlsError::Roots { path, error })
    }
}

impl TlsClient {
    pub async fn handshake(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, ConnError> {
        self.connector
            .connect(self.name.clone(), tcp)
            .await
            .map_err(ConnError::Handshake)
    }
}

/// `--tls-skip-verify`: any certificate is accepted, but handshake signatures are still
/// checked (so the run measures the same cryptography as a verified one).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
