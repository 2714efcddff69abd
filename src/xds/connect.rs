//! The gRPC channel to the ADS server: plain HTTP/2, or TLS (rustls, ring; ALPN `h2`) with an
//! optional client certificate. Every TLS file is read again for every connection, so
//! certificates that Kubernetes rotates on disk are presented from the next connection on
//! without a restart.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tonic::transport::{Channel, Endpoint};

use crate::tls::{TlsError, Verify};

use crate::settings::{XdsSettings, XdsTls};

/// How long one connection attempt (TCP, TLS and HTTP/2) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings on an idle stream, so a control plane that vanished without closing the
/// connection is noticed and the client reconnects.
const KEEPALIVE: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Why no channel could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A TLS file could not be read or used.
    #[error("TLS towards the xDS server: {0}")]
    Tls(String),
    /// The server did not answer, or the handshake failed (with what TLS said: unknown issuer,
    /// expired, the names the certificate is valid for).
    #[error(
        "connecting to the xDS server {server}: {}",
        crate::tls::with_causes(source)
    )]
    Transport {
        /// `CONFIG_GRPC_XDS_SERVER_URL`.
        server: String,
        /// What failed.
        #[source]
        source: tonic::transport::Error,
    },
}

/// Connects to the ADS server of `settings`.
pub async fn channel(settings: &XdsSettings) -> Result<Channel, ConnectError> {
    let transport = |source| ConnectError::Transport {
        server: settings.server.clone(),
        source,
    };
    let endpoint = Endpoint::from_shared(format!("http://{}", settings.server))
        .map_err(transport)?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let Some(tls) = &settings.tls else {
        return endpoint.connect().await.map_err(transport);
    };
    let config = Arc::new(client_config(tls)?);
    let (host, port) = host_and_port(&settings.server)?;
    let name = tls.san.clone().unwrap_or_else(|| host.clone());
    let name = ServerName::try_from(name.clone())
        .map_err(|e| ConnectError::Tls(format!("server name {name:?}: {e}")))?;
    let connector = tower::service_fn(move |_uri| {
        let (config, name, host) = (Arc::clone(&config), name.clone(), host.clone());
        async move {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let tls = TlsConnector::from(config).connect(name, tcp).await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(transport)
}

/// `host` and `port` of `host:port` or `[v6]:port`.
fn host_and_port(server: &str) -> Result<(String, u16), ConnectError> {
    let bad = || ConnectError::Tls(format!("{server:?} is not host:port"));
    let (host, port) = server.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_owned(), port.parse().map_err(|_| bad())?))
}

/// The TLS client configuration, from the files as they are now: the server's chain and name
/// checked, ALPN `h2`.
fn client_config(tls: &XdsTls) -> Result<ClientConfig, ConnectError> {
    let failed = |e: TlsError| ConnectError::Tls(e.into_message());
    let roots = crate::tls::roots(tls.ca.as_deref()).map_err(failed)?;
    if roots.is_empty() {
        return Err(ConnectError::Tls(
            "no CA: set CONFIG_GRPC_XDS_SERVER_TLS_CACERT (the system has no CA roots)".into(),
        ));
    }
    let identity = tls
        .client_cert
        .as_ref()
        .map(|(c, k)| (c.as_path(), k.as_path()));
    let mut config = crate::tls::client_config(Verify::Full, roots, identity).map_err(failed)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
