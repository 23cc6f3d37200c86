//! Reading TLS certificates and keys from PEM files, for serve, route and bench alike.
//! Errors carry no path: each caller words them as its users know them.

use std::fmt;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// Trust anchors when no CA file is named: Debian's bundle.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Why a PEM file gave no certificate or key.
#[derive(Debug)]
pub enum Error {
    /// Unreadable, or a damaged or missing PEM section.
    Pem(pem::Error),
    /// A file read as expected with no certificate in it.
    NoCertificate,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Pem(e) => e.fmt(f),
            Error::NoCertificate => f.write_str("no certificate in the file"),
        }
    }
}

impl std::error::Error for Error {}

/// Every certificate in the file, in order; none is not an error here.
pub fn all_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect())
        .map_err(Error::Pem)
}

/// The certificates in the file, at least one.
pub fn certs(path: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = all_certs(path)?;
    if certs.is_empty() {
        return Err(Error::NoCertificate);
    }
    Ok(certs)
}

/// The first private key in the file.
pub fn private_key(path: &str) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(Error::Pem)
}

/// A trust store of these certificates; the first one rustls refuses is the error.
pub fn roots(certs: Vec<CertificateDer<'static>>) -> Result<RootCertStore, rustls::Error> {
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert)?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("tlsload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    #[test]
    fn a_file_without_certificates_is_refused_by_certs_only() {
        let path = file("empty.pem", "not PEM at all\n");
        assert_eq!(all_certs(&path).unwrap().len(), 0);
        let e = certs(&path).unwrap_err();
        assert_eq!(e.to_string(), "no certificate in the file");
        assert!(matches!(private_key(&path), Err(Error::Pem(_))));
    }

    #[test]
    fn a_missing_file_is_a_pem_error() {
        let e = certs("/nonexistent/tlsload.pem").unwrap_err();
        assert!(matches!(e, Error::Pem(pem::Error::Io(_))), "{e:?}");
    }

    #[test]
    fn a_damaged_section_is_a_pem_error() {
        let path = file(
            "bad.pem",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        );
        assert!(matches!(certs(&path), Err(Error::Pem(_))));
    }
}
