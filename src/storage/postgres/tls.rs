//! TLS to PostgreSQL as libpq's `sslmode` says (tokio-postgres itself knows only `disable`,
//! `prefer` and `require`, and verifies nothing): `require` encrypts without checking the
//! server, `verify-ca` checks that its certificate chains to `sslrootcert`, `verify-full` also
//! that it names the host. `sslcert` / `sslkey` give a client certificate. rustls with ring, as
//! the rest of the process.
//!
//! Must not touch: connections, pooling.

use std::path::PathBuf;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring::default_provider};
use tokio_rustls::rustls::{
    ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore, SignatureScheme,
};

/// What is checked of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// `sslmode=require`: nothing (encryption only).
    Nothing,
    /// `sslmode=verify-ca`: the chain, not the name.
    Chain,
    /// `sslmode=verify-full`: the chain and the host name.
    Full,
}

/// TLS material, read at start.
#[derive(Clone)]
pub struct PgTls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgTls")
    }
}

/// The TLS files a connection string names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgTlsFiles {
    /// `sslrootcert`.
    pub root: Option<PathBuf>,
    /// `sslcert` and `sslkey`.
    pub client: Option<(PathBuf, PathBuf)>,
}

fn certificates(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

impl PgTls {
    /// Reads the files and builds the client configuration.
    pub fn new(verify: Verify, files: &PgTlsFiles) -> Result<PgTls, String> {
        let provider = Arc::new(default_provider());
        let mut roots = RootCertStore::empty();
        match &files.root {
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
                    .map_err(|e| format!("sslrootcert: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Partial {
                    verify,
                    webpki,
                    provider,
                }))
        };
        let config = match &files.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let key_der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("reading {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(certificates(cert)?, key_der)
                    .map_err(|e| format!("{}: {e}", cert.display()))?
            }
        };
        Ok(PgTls {
            config: Arc::new(config),
        })
    }

    /// The connector tokio-postgres uses.
    pub(super) fn connector(&self) -> MakeRustlsConnect {
        MakeRustlsConnect::new((*self.config).clone())
    }
}

/// `require` (check nothing) and `verify-ca` (check the chain, not the name).
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
