//! Accepting gRPC connections with limits. Every connection is let in: at the cap in all
//! (`GRPC_MAX_CONNECTIONS`) or its peer's (`GRPC_MAX_CONNECTIONS_PER_PEER`), the registry in
//! `peers` tells another connection to close instead (the longest idle of the peer holding the
//! most), so no newcomer waits in the listen backlog behind connections that only PING. Accept
//! errors (such as running out of file descriptors) are answered with a growing pause instead
//! of a busy loop. A connection is closed when it stalls (no complete HTTP/2 preface within the
//! handshake timeout: slowloris), when it has had no call for the idle timeout (PINGs,
//! SETTINGS and WINDOW_UPDATEs do not count), when it PINGs faster than the policy allows
//! (`frames::PingPolicy`), or when the registry tells it to; each of the last three with a
//! GOAWAY first, written between two of hyper's frames. At `GRPC_MAX_CONNECTION_AGE` hyper
//! shuts the connection down gracefully (its GOAWAY, then the calls in flight finish); at the
//! age plus `GRPC_MAX_CONNECTION_AGE_GRACE` the connection ends here, whatever is left. Open
//! connections are counted for `/metrics`.
//!
//! Must not touch: protocol handling (hyper and tonic do that on top of these streams; only
//! frame headers are followed here).

mod conn;
#[cfg(any(test, fuzzing))]
mod follow_check;
mod frames;
#[cfg(test)]
mod goaway_tests;
mod intake;

#[cfg(fuzzing)]
pub use follow_check::check as fuzz_frames;

pub(super) use conn::Conn;

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use crate::metrics::OpenConnections;
use crate::peers::{PeerId, Peers};
use crate::settings::GrpcLimits;

/// The longest pause after repeated accept errors.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A served stream's peer: its address, or under mTLS its client certificate.
pub(super) trait PeerOf {
    /// Who the client is, and the address it came from.
    fn peer_of(&self) -> (PeerId, Option<IpAddr>);
}

impl PeerOf for TcpStream {
    fn peer_of(&self) -> (PeerId, Option<IpAddr>) {
        match self.peer_addr() {
            Ok(addr) => (PeerId::of_address(addr.ip()), Some(addr.ip())),
            Err(_) => (PeerId::Local, None),
        }
    }
}

impl PeerOf for tokio_rustls::server::TlsStream<TcpStream> {
    fn peer_of(&self) -> (PeerId, Option<IpAddr>) {
        let (tcp, session) = self.get_ref();
        let (by_address, ip) = tcp.peer_of();
        match session.peer_certificates().and_then(|certs| certs.first()) {
            Some(cert) => (PeerId::of_certificate(cert.as_ref()), ip),
            None => (by_address, ip),
        }
    }
}

/// Accepts on `listener` within `limits` (each connection ended at the latest `ends` after it
/// was accepted: `GRPC_MAX_CONNECTION_AGE` plus its grace); `wrap` turns an accepted TCP stream into the served
/// stream (plain, or a finished TLS handshake), or `None` to drop it; `peers` registers each
/// connection under its peer. At most `GRPC_MAX_CONNECTIONS` handshakes run at once (a stream
/// beyond is closed at once). The accept loop ends when the returned stream is dropped.
pub(super) fn accept<S, W, F>(
    listener: TcpListener,
    limits: GrpcLimits,
    ends: Option<Duration>,
    open: Arc<OpenConnections>,
    peers: Arc<Peers>,
    wrap: W,
) -> ReceiverStream<io::Result<Conn<S>>>
where
    S: PeerOf + Send + 'static,
    W: Fn(TcpStream) -> F + Send + 'static,
    F: Future<Output = Option<S>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        let mut pause = Duration::ZERO;
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let stream = match stream {
                Ok((stream, _)) => {
                    pause = Duration::ZERO;
                    stream
                }
                Err(e) => {
                    // Out of descriptors or memory: wait before trying again instead of
                    // spinning; the pause doubles up to a second while errors repeat.
                    pause = (pause * 2).clamp(Duration::from_millis(5), ACCEPT_BACKOFF_MAX);
                    tracing::warn!(error = %e, ?pause, "accepting a gRPC connection failed");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let Ok(handshake) = Arc::clone(&handshakes).try_acquire_owned() else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (sender, open, wrapped) = (tx.clone(), Arc::clone(&open), wrap(stream));
            let peers = Arc::clone(&peers);
            tokio::spawn(async move {
                let served = wrapped.await;
                drop(handshake);
                if let Some(served) = served {
                    let (id, ip) = served.peer_of();
                    let handle = peers.connections().open(peers.peer(id, ip));
                    let conn = Conn::new(served, handle, open, limits, ends);
                    let _ = sender.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
