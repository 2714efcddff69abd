//! The PEM files TLS reads: certificate chains, private keys, and trust roots (a CA file, or
//! the system's roots). Every error names the file.
//!
//! Must not touch: configurations, connections.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::RootCertStore;

use super::TlsError;

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

/// The private key of a PEM file, or an error naming the file.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| TlsError(format!("reading {}: {e}", path.display())))
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
