//! TLS to PostgreSQL as libpq's `sslmode` says (tokio-postgres itself knows only `disable`,
//! `prefer` and `require`, and verifies nothing): `require` encrypts without checking the
//! server, `verify-ca` checks that its certificate chains to `sslrootcert`, `verify-full` also
//! that it names the host. `sslcert` / `sslkey` give a client certificate. The configuration is
//! the stores' one (`storage::tls`).
//!
//! Must not touch: connections, pooling.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls::ClientConfig;

pub use crate::storage::tls::Verify;

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

impl PgTls {
    /// Reads the files and builds the client configuration.
    pub fn new(verify: Verify, files: &PgTlsFiles) -> Result<PgTls, String> {
        let client = files
            .client
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        let config = crate::storage::tls::client_config(verify, files.root.as_deref(), client)
            .map_err(crate::tls::TlsError::into_message)?;
        Ok(PgTls {
            config: Arc::new(config),
        })
    }

    /// The connector tokio-postgres uses.
    pub(super) fn connector(&self) -> MakeRustlsConnect {
        MakeRustlsConnect::new((*self.config).clone())
    }
}
