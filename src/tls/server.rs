//! The gRPC server's TLS and mTLS: the server certificate is re-read when its files change
//! (checked every second), so a renewed certificate is served without a restart; with a client
//! CA every client must present a certificate that chains to it (and, with a SAN, carry that
//! DNS name). ALPN offers `h2`, as gRPC clients require.
//!
//! Must not touch: listeners, what is served.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring::{default_provider, sign::any_supported_type};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::server::TlsStream;

use super::TlsError;
use super::pem::{pem_certificates, private_key, roots};
use super::verify;

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = pem_certificates(cert)?;
    let key_der = private_key(key)?;
    let signing =
        any_supported_type(&key_der).map_err(|e| TlsError(format!("{}: {e}", key.display())))?;
    Ok(CertifiedKey::new(chain, signing))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The server certificate, swapped when its files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
}

impl ReloadingCert {
    fn new(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let current = ArcSwap::from_pointee(certified_key(cert, key)?);
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current,
        })
    }

    /// Re-reads the files; a failed read keeps the current certificate.
    fn reload(&self) {
        match certified_key(&self.cert, &self.key) {
            Ok(key) => {
                self.current.store(Arc::new(key));
                tracing::warn!(cert = %self.cert.display(), "server certificate reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "server certificate not reloaded; keeping the current one")
            }
        }
    }

    /// Checks the files every second and reloads on a change, until the task is dropped.
    pub async fn watch(self: Arc<Self>) {
        let mut seen = (modified(&self.cert), modified(&self.key));
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = (modified(&self.cert), modified(&self.key));
            if now != seen {
                seen = now;
                self.reload();
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The files and names of the gRPC server's TLS (`GRPC_SERVER_TLS_*`, `GRPC_CLIENT_TLS_*`).
#[derive(Debug, Clone, Copy)]
pub struct ServerFiles<'a> {
    /// PEM certificate chain.
    pub cert: &'a Path,
    /// PEM private key.
    pub key: &'a Path,
    /// PEM CA bundle that client certificates must chain to (mTLS), if any.
    pub client_ca: Option<&'a Path>,
    /// A DNS name every client certificate must carry (with `client_ca` only).
    pub client_san: Option<&'a str>,
}

/// The rustls server configuration and its reloading certificate.
pub fn server_config(
    settings: ServerFiles<'_>,
) -> Result<(Arc<ServerConfig>, Arc<ReloadingCert>), TlsError> {
    let resolver = Arc::new(ReloadingCert::new(settings.cert, settings.key)?);
    let builder = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = roots(Some(ca))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(default_provider()),
            )
            .build()
            .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
            match settings.client_san {
                None => builder.with_client_cert_verifier(verifier),
                Some(san) => {
                    let san = ServerName::try_from(san.to_owned()).map_err(|e| {
                        TlsError(format!(
                            "GRPC_CLIENT_TLS_SAN {san:?} is not a DNS name: {e}"
                        ))
                    })?;
                    let inner = verify::RequireSan {
                        inner: verifier,
                        san,
                    };
                    builder.with_client_cert_verifier(Arc::new(inner))
                }
            }
        }
    };
    let mut config =
        builder.with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(config), resolver))
}

/// The TLS side of accepting: completes the handshake of an accepted TCP stream within
/// `timeout`; a failed or stalled handshake is dropped and logged at debug level.
pub fn handshake(
    config: Arc<ServerConfig>,
    timeout: Duration,
) -> impl Fn(TcpStream) -> std::pin::Pin<Box<dyn Future<Output = Option<TlsStream<TcpStream>>> + Send>>
+ Send
+ 'static {
    let acceptor = TlsAcceptor::from(config);
    move |stream| {
        let acceptor = acceptor.clone();
        Box::pin(async move {
            let peer = stream.peer_addr().ok();
            match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Some(tls),
                Ok(Err(e)) => {
                    tracing::debug!(?peer, error = %e, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(?peer, "TLS handshake timed out");
                    None
                }
            }
        })
    }
}
