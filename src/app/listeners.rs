//! Binding every listener the settings name (gRPC on TCP or a Unix socket, HTTP, debug,
//! Prometheus) and learning the addresses bound (port 0 becomes the port chosen).

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::AppError;
use crate::server::GrpcListener;
use crate::settings::Settings;

/// Where the app listens, as bound (port 0 in the settings becomes the port chosen).
#[derive(Debug, Clone)]
pub struct Addresses {
    /// gRPC over TCP (`None` when served on a Unix socket, `GRPC_UDS`).
    pub grpc: Option<SocketAddr>,
    /// `/healthcheck` and `/json`.
    pub http: SocketAddr,
    /// `/rlconfig` and `/metrics`.
    pub debug: SocketAddr,
    /// The Prometheus endpoint, when enabled.
    pub prometheus: Option<SocketAddr>,
}

pub(super) struct Listeners {
    pub(super) grpc: GrpcListener,
    pub(super) http: TcpListener,
    pub(super) debug: TcpListener,
    pub(super) prometheus: Option<(TcpListener, String)>,
}

async fn bind(addr: &str) -> Result<TcpListener, AppError> {
    let failed = |source| AppError::Bind {
        addr: addr.to_owned(),
        source,
    };
    let first = tokio::net::lookup_host(addr).await.map_err(failed)?.next();
    match first {
        Some(any @ SocketAddr::V6(v6)) if v6.ip().is_unspecified() => {
            dual_stack(any).map_err(failed)
        }
        _ => TcpListener::bind(addr).await.map_err(failed),
    }
}

/// A listener on `[::]` that takes IPv4 connections too, whatever the host's
/// `net.ipv6.bindv6only` says (as Go, and so the reference, listens on `::`).
fn dual_stack(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

fn local(listener: &TcpListener, addr: &str) -> Result<SocketAddr, AppError> {
    listener.local_addr().map_err(|source| AppError::Bind {
        addr: addr.to_owned(),
        source,
    })
}

pub(super) async fn bind_all(s: &Settings) -> Result<(Listeners, Addresses), AppError> {
    let (grpc, grpc_addr) = match &s.grpc_uds {
        None => {
            let addr = crate::settings::listen_address(&s.grpc_host, s.grpc_port);
            let listener = bind(&addr).await?;
            let bound = local(&listener, &addr)?;
            (GrpcListener::Tcp(listener), Some(bound))
        }
        Some(path) => {
            if s.tls.is_some() {
                return Err(AppError::Unsupported(
                    "GRPC_UDS cannot be combined with GRPC_SERVER_USE_TLS".into(),
                ));
            }
            // A socket file left by an earlier process would make the bind fail.
            let _ = std::fs::remove_file(path);
            let listener =
                tokio::net::UnixListener::bind(path).map_err(|source| AppError::Bind {
                    addr: format!("unix:{}", path.display()),
                    source,
                })?;
            (GrpcListener::Unix(listener), None)
        }
    };
    let http = bind(&s.http_addr).await?;
    let debug = bind(&s.debug_addr).await?;
    let prometheus = match &s.prometheus {
        Some(p) => Some((bind(&p.addr).await?, p.path.clone())),
        None => None,
    };
    let addresses = Addresses {
        grpc: grpc_addr,
        http: local(&http, &s.http_addr)?,
        debug: local(&debug, &s.debug_addr)?,
        prometheus: match (&prometheus, &s.prometheus) {
            (Some((listener, _)), Some(p)) => Some(local(listener, &p.addr)?),
            _ => None,
        },
    };
    let listeners = Listeners {
        grpc,
        http,
        debug,
        prometheus,
    };
    Ok((listeners, addresses))
}
