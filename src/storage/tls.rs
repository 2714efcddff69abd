//! TLS from Turnstile to its stores (PostgreSQL's `sslmode`, `MEMCACHE_TLS*`, `REDIS_TLS*`):
//! the stores' client configuration (`crate::tls::client_config`, without session resumption)
//! and the handshake towards one server of our own pipelined connections (`ServerTls`:
//! memcached's and Redis's). No session resumption: a store's connections are long-lived, and
//! memcached requiring client certificates fails every resumed handshake (OpenSSL without a
//! session id context answers with an internal-error alert).
//!
//! Must not touch: connections, what a store sends.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::client::Resumption;

pub use crate::tls::Verify;

/// A store's client configuration: trust `ca` (a PEM file; the system's roots when `None`),
/// present `identity` (certificate and key files) when given, check the server as `verify`
/// says; no session resumption. Errors name the file.
pub fn client_config(
    verify: Verify,
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, crate::tls::TlsError> {
    let config = crate::tls::client_config(verify, crate::tls::roots(ca)?, identity)?;
    Ok(without_resumption(config))
}

/// [`client_config`] of files already read (`roots` from the CA file or the system's).
pub fn client_config_of(
    verify: Verify,
    roots: tokio_rustls::rustls::RootCertStore,
    identity: Option<(&crate::tls::PemFile, &crate::tls::PemFile)>,
) -> Result<ClientConfig, crate::tls::TlsError> {
    let config = crate::tls::client_config_of(verify, roots, identity)?;
    Ok(without_resumption(config))
}

/// A store's connections are long-lived and memcached requiring client certificates fails
/// every resumed handshake (the module doc): no session resumption.
fn without_resumption(mut config: ClientConfig) -> ClientConfig {
    config.resumption = Resumption::disabled();
    config
}

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
