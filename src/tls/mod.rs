//! gRPC server TLS and mTLS (rustls, ring): the server certificate is re-read when its files
//! change (checked every second), so a renewed certificate is served without a restart; with a
//! client CA (`GRPC_CLIENT_TLS_CACERT`) every client must present a certificate that chains to
//! it (and, with `GRPC_CLIENT_TLS_SAN`, carry that DNS name). ALPN offers `h2`, as gRPC clients
//! require. Also the PEM certificates and trust roots that Turnstile's own TLS clients (xDS,
//! OTLP export) build on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::future::Future;

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring::{default_provider, sign::any_supported_type};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;

use crate::settings::TlsSettings;

mod verify;

/// A TLS file or configuration problem.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

impl TlsError {
    /// What went wrong, without the `TLS:` prefix (for callers with their own error type).
    pub fn into_message(self) -> String {
        self.0
    }
}

/// `e` followed by each of its causes (`a: b: c`), a cause left out when the text before it
/// already says it: how a client's connection error says what TLS said (unknown issuer, expired,
/// the names a certificate is valid for) rather than only "transport error".
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !out.contains(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        cause = c.source();
    }
    out
}

/// The certificates of a PEM file: at least one, or an error naming the file.
pub fn pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError(format!("reading {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{} holds no certificate", path.display())));
    }
    Ok(certs)
}

/// Trust roots: the certificates of the CA file `ca`, or the system's roots when there is none
/// (which may be empty: the caller decides whether that is an error).
pub fn roots(ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(ca) => {
            for cert in pem_certificates(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    Ok(roots)
}

fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError(format!("reading {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(TlsError(format!("{} holds no certificate", cert.display())));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError(format!("reading {}: {e}", key.display())))?;
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

/// The rustls server configuration and its reloading certificate.
pub fn server_config(
    settings: &TlsSettings,
) -> Result<(Arc<ServerConfig>, Arc<ReloadingCert>), TlsError> {
    let resolver = Arc::new(ReloadingCert::new(&settings.cert, &settings.key)?);
    let builder = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = roots(Some(ca))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(default_provider()),
            )
            .build()
            .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
            match &settings.client_san {
                None => builder.with_client_cert_verifier(verifier),
                Some(san) => {
                    let san = ServerName::try_from(san.clone()).map_err(|e| {
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
