//! The PEM files TLS reads: certificate chains, private keys, and trust roots (a CA file, or
//! the system's roots). Every error names the file. A [`PemFile`] is read once and can be
//! handed to another TLS stack as it is (redis-rs takes bytes), so both see the same file.
//!
//! Must not touch: configurations, connections.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::RootCertStore;

use super::TlsError;

/// A PEM file's bytes, read once, with its path for errors.
#[derive(Clone)]
pub struct PemFile {
    path: PathBuf,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemFile").field("path", &self.path).finish()
    }
}

impl PemFile {
    /// Reads `path`; the error names it.
    pub fn read(path: &Path) -> Result<PemFile, TlsError> {
        let bytes = std::fs::read(path)
            .map_err(|e| TlsError(format!("cannot read {}: {e}", path.display())))?;
        Ok(PemFile {
            path: path.to_owned(),
            bytes,
        })
    }

    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file as it was read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its certificates: at least one, or an error naming the file.
    pub fn certificates(&self) -> Result<Vec<CertificateDer<'static>>, TlsError> {
        let certs = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("reading {}: {e}", self.path.display())))?;
        if certs.is_empty() {
            return Err(TlsError(format!(
                "{} holds no certificate",
                self.path.display()
            )));
        }
        Ok(certs)
    }

    /// Its private key, or an error naming the file.
    pub fn private_key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_slice(&self.bytes)
            .map_err(|e| TlsError(format!("reading {}: {e}", self.path.display())))
    }

    /// Trust roots of its certificates.
    pub fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in self.certificates()? {
            roots
                .add(cert)
                .map_err(|e| TlsError(format!("{}: {e}", self.path.display())))?;
        }
        Ok(roots)
    }
}

/// The certificates of a PEM file: at least one, or an error naming the file.
pub fn pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    PemFile::read(path)?.certificates()
}

/// The private key of a PEM file, or an error naming the file.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PemFile::read(path)?.private_key()
}

/// Trust roots: the certificates of the CA file `ca`, or the system's roots when there is none
/// (which may be empty: the caller decides whether that is an error).
pub fn roots(ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let ca = ca.map(PemFile::read).transpose()?;
    roots_of(ca.as_ref())
}

/// [`roots`] of a CA file already read.
pub fn roots_of(ca: Option<&PemFile>) -> Result<RootCertStore, TlsError> {
    match ca {
        Some(ca) => ca.roots(),
        None => Ok(system_roots()),
    }
}

/// The system's trust roots (possibly none).
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_names_the_file() {
        let dir = std::env::temp_dir().join(format!("turnstile-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no PEM here\n").expect("write");
        let file = PemFile::read(&empty).expect("read");
        assert_eq!(file.bytes(), b"no PEM here\n");
        let no_cert = file.certificates().expect_err("no certificate");
        assert_eq!(
            no_cert.into_message(),
            format!("{} holds no certificate", empty.display())
        );
        assert!(file.private_key().is_err());
        let missing = dir.join("missing.pem");
        let gone = PemFile::read(&missing).expect_err("missing").into_message();
        assert!(
            gone.starts_with(&format!("cannot read {}", missing.display())),
            "{gone}"
        );
        let roots = roots(Some(&empty)).expect_err("no roots").into_message();
        assert!(roots.contains("empty.pem"), "{roots}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
