//! A pool's TLS directives: `tls`, `tls_ca_file`, `tls_cert_file`, `tls_key_file`,
//! `tls_server_name` (to the servers) and `listen_tls_*` (the listener). Loading the
//! files is the router's job (its `tls` module); here they are only read and checked for consistency.

use super::scalar::{once, parse_bool};

/// A pool's TLS directives (memfleet extension; twemproxy has none, see its issue #647).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolTls {
    /// `tls: true`: connections to the servers speak TLS.
    pub enabled: Option<bool>,
    /// `tls_ca_file`: PEM CAs the servers' certificates must chain to (default: the system's).
    pub ca_file: Option<String>,
    /// `tls_cert_file` / `tls_key_file`: the router's client certificate (mutual TLS).
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    /// `tls_server_name`: name sent as SNI and verified (default: each server's host).
    pub server_name: Option<String>,
    /// `listen_tls_cert_file` / `listen_tls_key_file`: the listener speaks TLS.
    pub listen_cert_file: Option<String>,
    pub listen_key_file: Option<String>,
    /// `listen_tls_ca_file`: clients must present a certificate from these CAs.
    pub listen_ca_file: Option<String>,
}

impl PoolTls {
    pub fn to_servers(&self) -> bool {
        self.enabled == Some(true)
    }

    /// Reads `key: value` when `key` is a TLS directive; `None` when it is not one.
    pub(super) fn directive(&mut self, key: &str, value: &str) -> Option<Result<(), &'static str>> {
        let text = |slot: &mut Option<String>| once(slot, value.to_owned());
        Some(match key {
            "tls" => parse_bool(value).and_then(|b| once(&mut self.enabled, b)),
            "tls_ca_file" => text(&mut self.ca_file),
            "tls_cert_file" => text(&mut self.cert_file),
            "tls_key_file" => text(&mut self.key_file),
            "tls_server_name" => text(&mut self.server_name),
            "listen_tls_cert_file" => text(&mut self.listen_cert_file),
            "listen_tls_key_file" => text(&mut self.listen_key_file),
            "listen_tls_ca_file" => text(&mut self.listen_ca_file),
            _ => return None,
        })
    }

    /// Directives that only make sense together.
    pub(super) fn check(&self) -> Result<(), &'static str> {
        let server_side = self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name.is_some();
        if server_side && !self.to_servers() {
            return Err("has tls_* directives without \"tls: true\"");
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("needs both \"tls_cert_file:\" and \"tls_key_file:\"");
        }
        if self.listen_cert_file.is_some() != self.listen_key_file.is_some() {
            return Err("needs both \"listen_tls_cert_file:\" and \"listen_tls_key_file:\"");
        }
        if self.listen_ca_file.is_some() && self.listen_cert_file.is_none() {
            return Err("has \"listen_tls_ca_file:\" without \"listen_tls_cert_file:\"");
        }
        Ok(())
    }
}
