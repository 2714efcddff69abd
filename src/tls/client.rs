//! Turnstile's TLS client configurations, for every client it has (memcached, Redis,
//! PostgreSQL, the xDS control plane, the OTLP collector): trust roots, an optional client
//! certificate, and how much of the server is checked: nothing (encryption only), its chain and
//! dates but not its name, or both. rustls with ring, as the rest of the process. Callers set
//! what is theirs alone afterwards (ALPN, session resumption).
//!
//! Must not touch: connections, server names, what a client sends.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring::default_provider};
use tokio_rustls::rustls::{
    ClientConfig, DigitallySignedStruct, Error as RustlsError, RootCertStore, SignatureScheme,
};

use super::TlsError;
use super::pem::PemFile;

/// What is checked of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing (encryption only): `sslmode=require`.
    Nothing,
    /// The chain and dates, not the name: `sslmode=verify-ca`,
    /// `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION=true`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true`.
    Chain,
    /// The chain and the name: `sslmode=verify-full`, `MEMCACHE_TLS`, `REDIS_TLS`, xDS, OTLP.
    Full,
}

/// A client configuration: trust `roots`, present `identity` (certificate and key files) when
/// given, check the server as `verify` says. Errors name the file.
pub fn client_config(
    verify: Verify,
    roots: RootCertStore,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, TlsError> {
    let identity = match identity {
        Some((cert, key)) => Some((PemFile::read(cert)?, PemFile::read(key)?)),
        None => None,
    };
    client_config_of(verify, roots, identity.as_ref().map(|(c, k)| (c, k)))
}

/// [`client_config`] of files already read.
pub fn client_config_of(
    verify: Verify,
    roots: RootCertStore,
    identity: Option<(&PemFile, &PemFile)>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = if verify == Verify::Full {
        builder.with_root_certificates(roots)
    } else {
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| TlsError(format!("the CA certificates: {e}")))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Partial {
                verify,
                webpki,
                provider,
            }))
    };
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(cert.certificates()?, key.private_key()?)
            .map_err(|e| TlsError(format!("{}: {e}", cert.path().display()))),
    }
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
    ) -> Result<ServerCertVerified, RustlsError> {
        if self.verify == Verify::Nothing {
            return Ok(ServerCertVerified::assertion());
        }
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(RustlsError::InvalidCertificate(
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
    ) -> Result<HandshakeSignatureValid, RustlsError> {
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
    ) -> Result<HandshakeSignatureValid, RustlsError> {
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
