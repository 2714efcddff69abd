//! TLS to memcached (`MEMCACHE_TLS`; memcached 1.6 with `-Z`): the client configuration the
//! application built from the settings' files, and the name each server's certificate is
//! checked against (the host of its `host:port`). Only the pipelined transport speaks it.
//!
//! Must not touch: files (the application reads them), commands.

use std::io;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::ClientConfig;

/// TLS towards one server: the configuration and the name its certificate must carry.
#[derive(Clone)]
pub(super) struct ServerTls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl ServerTls {
    /// TLS to `server` (`host:port`, `[v6]:port`); an error when its host is no valid name.
    pub(super) fn new(config: &Arc<ClientConfig>, server: &str) -> io::Result<Self> {
        let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memcached {server}: {host:?} cannot name a TLS server: {e}"),
            )
        })?;
        Ok(Self {
            connector: TlsConnector::from(Arc::clone(config)),
            name,
        })
    }

    /// The TLS handshake on a connected stream; what TLS said when it fails.
    pub(super) async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        self.connector.connect(self.name.clone(), tcp).await
    }
}
