//! TLS for the clients: one rustls configuration (the ring provider, as the
//! node uses) trusting the system's roots plus, optionally, the PEM
//! certificates of a `--ca-cert` file. The admin client ([`crate::admin`])
//! and the region client ([`crate::region`]) both use it for `https://` and
//! `wss://` node URLs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// Why a TLS client configuration could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// The CA certificate file cannot be read or holds no certificate.
    #[error("cannot use the CA certificate file {path}: {reason}")]
    CaCert {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Neither the system nor the CA file gave a root certificate.
    #[error("no trusted root certificate: the system has none and no --ca-cert was given")]
    NoRoots,
    /// rustls refused the configuration.
    #[error("cannot configure TLS: {0}")]
    Config(String),
}

/// The certificates of a PEM file.
fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |reason: String| TlsError::CaCert { path: path.to_owned(), reason };
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| error(e.to_string()))?;
    if certificates.is_empty() {
        return Err(error("the file holds no PEM certificate".into()));
    }
    Ok(certificates)
}

/// A client configuration trusting the system's root certificates and those
/// in `ca_cert` (PEM), with the ring provider and HTTP/1.1.
pub fn client_config(ca_cert: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    // Unreadable system certificates are skipped: a private CA given with
    // --ca-cert is enough on its own.
    let system = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(system.certs);
    if let Some(path) = ca_cert {
        for certificate in read_pem(path)? {
            roots.add(certificate).map_err(|e| TlsError::CaCert { path: path.to_owned(), reason: e.to_string() })?;
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let dir = std::env::temp_dir().join(format!("shardalloc-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let error = client_config(Some(&missing)).unwrap_err().to_string();
        assert!(error.contains("missing.pem"), "{error}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = client_config(Some(&empty)).unwrap_err().to_string();
        assert!(error.contains("empty.pem") && error.contains("no PEM certificate"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
