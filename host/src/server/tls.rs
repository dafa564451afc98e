//! Optional TLS on the node's one port (rustls with the ring provider):
//! `--tls-cert` and `--tls-key`, PEM files. Handshakes run concurrently, each
//! with a deadline, so a slow or silent client cannot hold up the others,
//! and at most [`MAX_HANDSHAKES`] at once: a new connection past the bound
//! evicts the oldest handshake under way ([`super::handshakes`]).
//! A CA certificate given as the node's own is refused at start with what
//! to do: TLS clients (rustls's, the node's own clients') refuse it as a
//! server's certificate (`CaUsedAsEndEntity`), so the node would start and
//! no client could talk to it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most finished handshakes waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 128;
pub use super::handshakes::{MAX_HANDSHAKES, MAX_HANDSHAKES_PER_SOURCE};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file.
    #[error("cannot use the TLS certificate {path}: {reason}")]
    Certificate {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The key file.
    #[error("cannot use the TLS key {path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The node's certificate is a CA's.
    #[error(
        "the TLS certificate {path} is a CA certificate (basicConstraints CA:TRUE, as `openssl req -x509` \
         makes by default); TLS clients refuse a CA certificate as a server's own (CaUsedAsEndEntity). Give \
         the node a leaf certificate signed by a CA (basicConstraints CA:FALSE) and give the clients that \
         CA with --ca-cert; docs/operations.md, \"TLS\", has the openssl commands"
    )]
    CaAsServer {
        /// The file.
        path: String,
    },
    /// The pair does not make a configuration.
    #[error("the TLS certificate and key do not work together: {0}")]
    Config(String),
}

/// A TLS acceptor from PEM files: a certificate chain and its private key.
pub fn acceptor(certificate: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let certificate_error = |reason: String| TlsError::Certificate { path: certificate.display().to_string(), reason };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .map_err(|e| certificate_error(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| certificate_error(e.to_string()))?;
    if chain.is_empty() {
        return Err(certificate_error("no PEM certificate in the file".into()));
    }
    if is_ca(&chain[0]) {
        return Err(TlsError::CaAsServer { path: certificate.display().to_string() });
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::Key { path: key.display().to_string(), reason: e.to_string() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// True when the DER certificate `der` says it is a CA's: its
/// basicConstraints extension (OID 2.5.29.19) holds `cA TRUE`. DER encodes
/// `cA` only when true, right at the start of the extension's SEQUENCE.
fn is_ca(der: &[u8]) -> bool {
    const BASIC_CONSTRAINTS: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x13];
    const TRUE: [u8; 3] = [0x01, 0x01, 0xff];
    let found = der.windows(BASIC_CONSTRAINTS.len()).enumerate().filter(|(_, w)| *w == BASIC_CONSTRAINTS);
    found.into_iter().any(|(at, _)| {
        let mut rest = &der[at + BASIC_CONSTRAINTS.len()..];
        // The optional `critical` flag.
        if rest.starts_with(&[0x01, 0x01]) {
            rest = rest.get(3..).unwrap_or_default();
        }
        // extnValue: an OCTET STRING holding SEQUENCE { cA BOOLEAN, ... }.
        rest.len() >= 7 && rest[0] == 0x04 && rest[2] == 0x30 && rest[4..7] == TRUE
    })
}

/// A listener handing out TLS streams, for `axum::serve`.
pub struct TlsListener {
    local: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Accepts TCP connections on `tcp` and completes their handshakes in the background.
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        let handshakes = super::handshakes::Handshakes::default();
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(connection) => connection,
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                // Small frames go out at once (see `conn::no_delay`).
                let _ = stream.set_nodelay(true);
                let (admitted, evicted) = handshakes.admit(peer.ip());
                if evicted > 0 {
                    tracing::debug!(%peer, evicted, "TLS handshakes at their bound: the oldest made room");
                }
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                let place = admitted.place();
                let task = tokio::spawn(async move {
                    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    // Done: no longer a handshake an eviction may stop.
                    drop(admitted);
                    match handshake {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
                // The task owns its place; an eviction stops the task.
                handshakes.started(place, task.abort_handle());
            }
        });
        Ok(TlsListener { local, accepted })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(connection) => connection,
            // The accept loop never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
