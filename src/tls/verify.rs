//! Certificate checks beyond rustls' defaults, each the reference's: a client certificate that
//! must also carry a DNS name (`GRPC_CLIENT_TLS_SAN`; rustls' client verifier already requires
//! the chain and client-auth usage), and a server certificate whose chain is verified but not
//! its name (`MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`). Both delegate every other decision
//! (signatures, schemes, hints) to rustls' own WebPKI verifiers.
//!
//! Must not touch: files, listeners, connections.

use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::verify_server_cert_signed_by_trust_anchor;
use tokio_rustls::rustls::client::verify_server_name;
use tokio_rustls::rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature};
use tokio_rustls::rustls::crypto::{ring::default_provider, verify_tls13_signature};
use tokio_rustls::rustls::server::ParsedCertificate;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme,
};

/// A client verifier that also requires the DNS name `san` in the client's certificate.
#[derive(Debug)]
pub(super) struct RequireSan {
    pub(super) inner: Arc<dyn ClientCertVerifier>,
    pub(super) san: ServerName<'static>,
}

impl ClientCertVerifier for RequireSan {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        verify_server_name(&ParsedCertificate::try_from(end_entity)?, &self.san)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A server verifier that checks the chain to `roots` and the validity dates, not the name.
#[derive(Debug)]
pub(super) struct ChainOnly {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ChainOnly {
    pub(super) fn new(roots: RootCertStore) -> Self {
        Self {
            roots: Arc::new(roots),
            algorithms: default_provider().signature_verification_algorithms,
        }
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
