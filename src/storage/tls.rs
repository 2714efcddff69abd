//! TLS from Turnstile to its stores (PostgreSQL's `sslmode`, `MEMCACHE_TLS*`, `REDIS_TLS*`):
//! one client configuration from the trust roots and an optional client certificate, checking
//! the server as much as asked: nothing (encryption only), its chain and dates but not its
//! name, or both; and the handshake towards one server of our own pipelined connections
//! (`ServerTls`: memcached's and Redis's).
//! rustls with ring, as the rest of the process. No session resumption: a store's connections
//! are long-lived, and memcached requiring client certificates fails every resumed handshake
//! (OpenSSL without a session id context answers with an internal-error alert).
//!
//! Must not touch: connections, what a store sends.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::{Resumption, WebPkiServerVerifier};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring::default_provider};
use tokio_rustls::rustls::{
    ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore, SignatureScheme,
};

/// TLS towards one server: the configuration and the name its certificate must carry (the
/// host of its `host:port`).
#[derive(Clone)]
pub(crate) struct ServerTls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl ServerTls {
    /// TLS to `server` (`host:port`, `[v6]:port`) of `store` (for the error: `memcached`,
    /// `redis`); an error when its host is no valid name.
    pub(crate) fn new(
        config: &Arc<ClientConfig>,
        store: &str,
        server: &str,
    ) -> std::io::Result<Self> {
        let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{store} {server}: {host:?} cannot name a TLS server: {e}"),
            )
        })?;
        Ok(Self {
            connector: TlsConnector::from(Arc::clone(config)),
            name,
        })
    }

    /// The TLS handshake on a connected stream; what TLS said when it fails.
    pub(crate) async fn handshake(&self, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.connector.connect(self.name.clone(), tcp).await
    }
}

/// What is checked of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing (encryption only): `sslmode=require`.
    Nothing,
    /// The chain and dates, not the name: `sslmode=verify-ca`,
    /// `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION=true`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true`.
    Chain,
    /// The chain and the name: `sslmode=verify-full`, `MEMCACHE_TLS`.
    Full,
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The client configuration: trust `root` (a PEM file; the system's roots when `None`),
/// present `client` (certificate and key files) when given, check the server as `verify` says.
/// Errors name the file.
pub fn client_config(
    verify: Verify,
    root: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<ClientConfig, String> {
    let provider = Arc::new(default_provider());
    let mut roots = RootCertStore::empty();
    match root {
        Some(root) => {
            for cert in certificates(root)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", root.display()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if verify == Verify::Full {
        builder.with_root_certificates(roots)
    } else {
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| format!("the CA certificates: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Partial {
                verify,
                webpki,
                provider,
            }))
    };
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("reading {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certificates(cert)?, key_der)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
    };
    config.resumption = Resumption::disabled();
    Ok(config)
}

/// [`Verify::Nothing`] and [`Verify::Chain`]: rustls' WebPKI verifier, with a certificate for
/// another name accepted (or every certificate, for `Nothing`).
#[derive(Debug)]
struct Partial {
    verify: Verify,
    webpki: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Partial {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        if self.verify == Verify::Nothing {
            return Ok(ServerCertVerified::assertion());
        }
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(TlsError::InvalidCertificate(
                tokio_rustls::rustls::CertificateError::NotValidForName
                | tokio_rustls::rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
