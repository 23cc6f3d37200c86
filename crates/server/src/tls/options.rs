//! memcached's TLS settings: `-Z` and the `-o ssl_*` options, as `stats settings` shows them.

use std::fmt::Display;

/// `ssl_verify_mode`, memcached's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// 0: no client certificate is asked for.
    None,
    /// 1: a client certificate is asked for and checked if sent; clients without one are let in.
    Request,
    /// 2: a client certificate signed by `ssl_ca_cert` is required.
    Require,
    /// 3: required on the first handshake only. TLS renegotiation does not exist in rustls,
    /// so this is the same as `Require`.
    Once,
}

impl VerifyMode {
    fn number(self) -> u8 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 2,
            VerifyMode::Once => 3,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// `-Z`.
    pub enabled: bool,
    pub chain_cert: Option<String>,
    /// None: the key is in the `chain_cert` file.
    pub key: Option<String>,
    pub ca_cert: Option<String>,
    pub verify_mode: VerifyMode,
    /// memcached's numbering: 2 = TLS 1.2, 3 = TLS 1.3 (0 and 1 mean 1.2 here, see `apply`).
    pub min_version: u8,
    /// Accepted and shown; rustls' own suites are used (see `apply`).
    pub ciphers: Option<String>,
    pub session_cache: bool,
    /// Shown only: rustls sizes its output by records.
    pub wbuf_size_kb: u32,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            ca_cert: None,
            verify_mode: VerifyMode::None,
            min_version: 2,
            ciphers: None,
            session_cache: false,
            wbuf_size_kb: 16,
        }
    }
}

impl TlsOptions {
    /// Applies `-o name=value` if it is a TLS option: None if it is not one.
    pub fn apply(
        &mut self,
        name: &str,
        value: &str,
        warnings: &mut Vec<String>,
    ) -> Option<Result<(), String>> {
        let path = || {
            if value.is_empty() {
                Err(format!("{name} needs a file name"))
            } else {
                Ok(Some(value.to_string()))
            }
        };
        let result = match name {
            "ssl_chain_cert" => path().map(|p| self.chain_cert = p),
            "ssl_key" => path().map(|p| self.key = p),
            "ssl_ca_cert" => path().map(|p| self.ca_cert = p),
            "ssl_verify_mode" => match value {
                "0" => Ok(VerifyMode::None),
                "1" => Ok(VerifyMode::Request),
                "2" => Ok(VerifyMode::Require),
                "3" => Ok(VerifyMode::Once),
                _ => Err(format!(
                    "Invalid ssl_verify_mode '{value}': use 0, 1, 2 or 3"
                )),
            }
            .map(|m| self.verify_mode = m),
            "ssl_keyformat" => match value {
                "1" | "PEM" | "pem" => Ok(()),
                _ => Err(format!(
                    "ssl_keyformat '{value}': only PEM (1) keys are supported"
                )),
            },
            "ssl_min_version" => match value.parse::<u8>() {
                Ok(v @ 0..=1) => {
                    warnings.push(format!(
                        "ssl_min_version {v}: TLS 1.0 and 1.1 are not offered, TLS 1.2 is the minimum"
                    ));
                    self.min_version = 2;
                    Ok(())
                }
                Ok(v @ 2..=3) => {
                    self.min_version = v;
                    Ok(())
                }
                _ => Err(format!(
                    "Invalid ssl_min_version '{value}': use 0, 1, 2 or 3"
                )),
            },
            "ssl_ciphers" => {
                warnings.push(
                    "ssl_ciphers is ignored: rustls offers its own modern cipher suites".into(),
                );
                self.ciphers = Some(value.to_string());
                Ok(())
            }
            "ssl_wbuf_size" => value
                .parse()
                .map(|kb| self.wbuf_size_kb = kb)
                .map_err(|_| format!("Invalid ssl_wbuf_size '{value}'")),
            "ssl_session_cache" => {
                self.session_cache = true;
                Ok(())
            }
            "ssl_kernel_tls" => {
                warnings
                    .push("ssl_kernel_tls is ignored: records are encrypted in the worker".into());
                Ok(())
            }
            _ => return None,
        };
        Some(result)
    }

    /// memcached's checks once all flags are read.
    pub fn validate(&self, has_tcp: bool) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !has_tcp {
            return Err("ERROR: You cannot enable SSL without a TCP port.".into());
        }
        if self.chain_cert.is_none() {
            return Err("-Z needs a certificate: -o ssl_chain_cert=FILE[,ssl_key=FILE]".into());
        }
        if self.verify_mode != VerifyMode::None && self.ca_cert.is_none() {
            return Err("ssl_verify_mode 1-3 needs the client CAs: -o ssl_ca_cert=FILE".into());
        }
        Ok(())
    }

    /// The `ssl_*` lines of `stats settings`, with memcached's spellings of unset values.
    pub fn write_settings(&self, out: &mut Vec<u8>) {
        fn line(out: &mut Vec<u8>, name: &str, value: impl Display) {
            use std::io::Write;
            let _ = write!(out, "STAT {name} {value}\r\n");
        }
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        line(out, "ssl_enabled", yes_no(self.enabled));
        line(
            out,
            "ssl_chain_cert",
            self.chain_cert.as_deref().unwrap_or("(null)"),
        );
        line(out, "ssl_key", self.key.as_deref().unwrap_or("(null)"));
        line(out, "ssl_verify_mode", self.verify_mode.number());
        line(out, "ssl_keyformat", 1);
        line(
            out,
            "ssl_ciphers",
            self.ciphers.as_deref().unwrap_or("NULL"),
        );
        line(
            out,
            "ssl_ca_cert",
            self.ca_cert.as_deref().unwrap_or("NULL"),
        );
        line(out, "ssl_wbuf_size", self.wbuf_size_kb as u64 * 1024);
        line(out, "ssl_session_cache", yes_no(self.session_cache));
        line(out, "ssl_kernel_tls", "no");
        line(
            out,
            "ssl_min_version",
            format!("tlsv1.{}", self.min_version),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(o: &mut TlsOptions, opt: &str) -> Option<Result<(), String>> {
        let (n, v) = opt.split_once('=').unwrap_or((opt, ""));
        o.apply(n, v, &mut Vec::new())
    }

    #[test]
    fn memcached_option_names() {
        let mut o = TlsOptions::default();
        assert!(apply(&mut o, "ssl_chain_cert=/c.pem").unwrap().is_ok());
        assert!(apply(&mut o, "ssl_key=/k.pem").unwrap().is_ok());
        assert!(apply(&mut o, "ssl_ca_cert=/ca.pem").unwrap().is_ok());
        assert!(apply(&mut o, "ssl_verify_mode=2").unwrap().is_ok());
        assert!(apply(&mut o, "ssl_min_version=3").unwrap().is_ok());
        assert!(apply(&mut o, "ssl_session_cache").unwrap().is_ok());
        assert!(apply(&mut o, "idle_timeout=3").is_none());
        assert_eq!(o.chain_cert.as_deref(), Some("/c.pem"));
        assert_eq!(o.verify_mode, VerifyMode::Require);
        assert_eq!(o.min_version, 3);
        assert!(o.session_cache);
    }

    #[test]
    fn bad_values_are_refused() {
        let mut o = TlsOptions::default();
        assert!(apply(&mut o, "ssl_verify_mode=4").unwrap().is_err());
        assert!(apply(&mut o, "ssl_min_version=9").unwrap().is_err());
        assert!(apply(&mut o, "ssl_chain_cert").unwrap().is_err());
        assert!(apply(&mut o, "ssl_keyformat=3").unwrap().is_err());
    }

    #[test]
    fn enabled_needs_a_port_a_cert_and_cas_for_verification() {
        let mut o = TlsOptions {
            enabled: true,
            ..TlsOptions::default()
        };
        assert!(o.validate(true).is_err());
        o.chain_cert = Some("c".into());
        assert!(o.validate(false).is_err());
        assert!(o.validate(true).is_ok());
        o.verify_mode = VerifyMode::Request;
        assert!(o.validate(true).is_err());
        o.ca_cert = Some("ca".into());
        assert!(o.validate(true).is_ok());
    }
}
