//! The client certificate check beyond rustls' default, as the reference makes it: the
//! certificate must also carry a DNS name (`GRPC_CLIENT_TLS_SAN`; rustls' client verifier
//! already requires the chain and client-auth usage). Every other decision (signatures,
//! schemes, hints) is rustls' own WebPKI verifier's. (A server checked by its chain and not its
//! name, for the stores, is `client`'s.)
//!
//! Must not touch: files, listeners, connections.

use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::client::verify_server_name;
use tokio_rustls::rustls::server::ParsedCertificate;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

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
