//! TLS with an mcrouter config, as mcrouter spells it: a server's security field
//! (`host:port:ascii:ssl`) and the `--pem-*` flags for connections to servers; `--ssl-port`
//! with the `--server-pem-*` flags for clients. Both become the [`PoolTls`] of the
//! nutcracker path, so the same rustls code carries them.

use tlsload::SYSTEM_CA_BUNDLE;

use nutconf::PoolTls;

/// mcrouter's TLS flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct McTlsArgs {
    /// mcrouter: PEM CAs the certificates of `:ssl` servers must chain to (default: the
    /// system's bundle).
    #[arg(long = "pem-ca-path", value_name = "PATH")]
    pub pem_ca_path: Option<String>,
    /// mcrouter: the client certificate shown to `:ssl` servers (mutual TLS).
    #[arg(long = "pem-cert-path", value_name = "PATH")]
    pub pem_cert_path: Option<String>,
    /// mcrouter: the key of `--pem-cert-path`.
    #[arg(long = "pem-key-path", value_name = "PATH")]
    pub pem_key_path: Option<String>,
    /// mcrouter: verify the certificates of `:ssl` servers (memfleet always does).
    #[arg(long = "ssl-verify-peers")]
    pub ssl_verify_peers: bool,
    /// mcrouter: port(s) on which clients connect with TLS (comma-separated, repeatable).
    #[arg(long = "ssl-port", value_name = "PORT", value_delimiter = ',')]
    pub ssl_port: Vec<u16>,
    /// mcrouter: the certificate of the `--ssl-port` listeners.
    #[arg(long = "server-pem-cert-path", value_name = "PATH")]
    pub server_pem_cert_path: Option<String>,
    /// mcrouter: the key of `--server-pem-cert-path`.
    #[arg(long = "server-pem-key-path", value_name = "PATH")]
    pub server_pem_key_path: Option<String>,
    /// mcrouter: PEM CAs client certificates must chain to (with `--ssl-require-peer-certs`;
    /// default: the system's bundle).
    #[arg(long = "server-pem-ca-path", value_name = "PATH")]
    pub server_pem_ca_path: Option<String>,
    /// mcrouter: clients of `--ssl-port` must present a certificate.
    #[arg(long = "ssl-require-peer-certs")]
    pub ssl_require_peer_certs: bool,
}

/// Whether a server speaks TLS by its security field: `Some(true)` for `ssl` (and `fizz`,
/// `ktls12`: TLS 1.3 / 1.2, which rustls negotiates by itself), `Some(false)` for `plain`,
/// `None` when absent.
pub fn server_security(security: Option<&str>) -> Result<Option<bool>, String> {
    match security {
        None => Ok(None),
        Some("plain") => Ok(Some(false)),
        Some("ssl" | "fizz" | "ktls12") => Ok(Some(true)),
        Some("tls_to_plain") => Err("security 'tls_to_plain' (a TLS handshake, then \
                                     plaintext) is not supported; use ssl or plain"
            .into()),
        Some(other) => Err(format!(
            "unknown security '{other}' (expected plain, ssl, fizz or ktls12)"
        )),
    }
}

/// Every server's security field checked, as `--validate-config` and loading do.
pub fn check_servers(config: &routetree::Config) -> Result<(), String> {
    for pool in &config.pools {
        for s in &pool.servers {
            server_security(s.security.as_deref()).map_err(|e| {
                format!("pool '{}': server '{}:{}': {e}", pool.name, s.host, s.port)
            })?;
        }
    }
    Ok(())
}

impl McTlsArgs {
    /// The TLS of a pool's connections to its servers: on when one of them says `ssl`.
    pub fn to_servers(&self, any_ssl: bool) -> Result<PoolTls, String> {
        if self.pem_cert_path.is_some() != self.pem_key_path.is_some() {
            return Err("--pem-cert-path and --pem-key-path go together".into());
        }
        if !any_ssl {
            return Ok(PoolTls::default());
        }
        Ok(PoolTls {
            enabled: Some(true),
            ca_file: Some(
                self.pem_ca_path
                    .clone()
                    .unwrap_or_else(|| SYSTEM_CA_BUNDLE.to_owned()),
            ),
            cert_file: self.pem_cert_path.clone(),
            key_file: self.pem_key_path.clone(),
            ..PoolTls::default()
        })
    }

    /// The TLS of the `--ssl-port` listeners.
    pub fn listener(&self) -> Result<PoolTls, String> {
        let (Some(cert), Some(key)) = (&self.server_pem_cert_path, &self.server_pem_key_path)
        else {
            return Err("--ssl-port needs --server-pem-cert-path and --server-pem-key-path".into());
        };
        let ca = self.ssl_require_peer_certs.then(|| {
            self.server_pem_ca_path
                .clone()
                .unwrap_or_else(|| SYSTEM_CA_BUNDLE.to_owned())
        });
        Ok(PoolTls {
            listen_cert_file: Some(cert.clone()),
            listen_key_file: Some(key.clone()),
            listen_ca_file: ca,
            ..PoolTls::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_fields_as_mcrouter_names_them() {
        assert_eq!(server_security(None), Ok(None));
        assert_eq!(server_security(Some("plain")), Ok(Some(false)));
        for tls in ["ssl", "fizz", "ktls12"] {
            assert_eq!(server_security(Some(tls)), Ok(Some(true)));
        }
        assert!(server_security(Some("tls_to_plain"))
            .unwrap_err()
            .contains("not supported"));
        assert!(server_security(Some("tls"))
            .unwrap_err()
            .contains("unknown security 'tls'"));
    }

    #[test]
    fn flags_become_pool_tls() {
        let args = McTlsArgs {
            pem_ca_path: Some("ca.pem".into()),
            pem_cert_path: Some("c.pem".into()),
            ..Default::default()
        };
        assert!(args.to_servers(true).unwrap_err().contains("go together"));
        let args = McTlsArgs {
            pem_key_path: Some("c.key".into()),
            ..args
        };
        assert_eq!(args.to_servers(false), Ok(PoolTls::default()));
        let t = args.to_servers(true).unwrap();
        assert!(t.to_servers());
        assert_eq!(t.ca_file.as_deref(), Some("ca.pem"));
        assert_eq!(t.key_file.as_deref(), Some("c.key"));
        assert!(args
            .listener()
            .unwrap_err()
            .contains("--server-pem-cert-path"));
        let args = McTlsArgs {
            server_pem_cert_path: Some("s.pem".into()),
            server_pem_key_path: Some("s.key".into()),
            ..args
        };
        assert_eq!(args.listener().unwrap().listen_ca_file, None);
        let args = McTlsArgs {
            ssl_require_peer_certs: true,
            ..args
        };
        assert_eq!(
            args.listener().unwrap().listen_ca_file.as_deref(),
            Some(SYSTEM_CA_BUNDLE)
        );
    }
}
