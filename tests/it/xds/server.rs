//! An ADS server that behaves as go-control-plane's state-of-the-world cache does for Envoy
//! Gateway's rate-limit snapshots: one snapshot (version + every `RateLimitConfig`), sent whole
//! to a stream whose last version differs from it; a request that answers an older nonce is
//! stale and ignored; a NACK is recorded and nothing is re-sent until the snapshot changes; a
//! new snapshot is pushed to every open stream. Every request is recorded (node, version, nonce,
//! error detail, metadata) for the tests to read. It runs on a runtime of its own, so `kill`
//! drops every connection at once, as a control plane that dies does; TLS (with required client
//! certificates) when given a rustls configuration.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use turnstile::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use turnstile::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use turnstile::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use turnstile::xds::TYPE_URL;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub node_id: String,
    pub node_metadata: Vec<(String, String)>,
    pub version: String,
    pub nonce: String,
    pub error: Option<String>,
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct State {
    /// The snapshot: version, resources, and a serial that changes with every `set`/`resend`.
    snapshot: Option<(String, Vec<RateLimitConfig>, u64)>,
    seen: Vec<Seen>,
    /// Every nonce sent, with the version it carried.
    sent: Vec<(String, String)>,
    /// Snapshots to push back to back, without waiting for ACKs.
    burst: Vec<(String, Vec<RateLimitConfig>)>,
}

#[derive(Debug, Clone)]
pub struct Shared {
    state: Arc<Mutex<State>>,
    changed: watch::Sender<u64>,
    /// TLS handshakes refused (e.g. a client certificate of an untrusted CA).
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            changed: watch::Sender::new(0),
            refused: Arc::default(),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("ADS state")
    }

    /// Publishes a new snapshot to every stream.
    pub fn set(&self, version: &str, configs: Vec<RateLimitConfig>) {
        let serial = {
            let mut state = self.lock();
            let serial = state.snapshot.as_ref().map_or(1, |s| s.2 + 1);
            state.snapshot = Some((version.to_owned(), configs, serial));
            serial
        };
        self.changed.send_replace(serial);
    }

    /// Sends the current snapshot again to every stream (a control plane that re-sends a
    /// version its client already has).
    pub fn resend(&self) {
        let serial = {
            let mut state = self.lock();
            let snapshot = state.snapshot.as_mut().expect("a snapshot");
            snapshot.2 += 1;
            snapshot.2
        };
        self.changed.send_replace(serial | 1 << 63);
    }

    /// Pushes each of `snapshots` in turn to every stream without waiting for an ACK (a control
    /// plane that does not wait); the last becomes the snapshot.
    pub fn burst(&self, snapshots: Vec<(String, Vec<RateLimitConfig>)>) {
        let serial = {
            let mut state = self.lock();
            let serial = state.snapshot.as_ref().map_or(1, |s| s.2 + 1);
            if let Some((version, configs)) = snapshots.last() {
                state.snapshot = Some((version.clone(), configs.clone(), serial));
            }
            state.burst = snapshots;
            serial
        };
        self.changed.send_replace(serial | 1 << 62);
    }

    /// The responses of the burst set last, each with a nonce of its own.
    fn burst_responses(&self) -> Vec<DiscoveryResponse> {
        let burst = std::mem::take(&mut self.lock().burst);
        burst
            .into_iter()
            .map(|(version, configs)| self.response_of(version, &configs))
            .collect()
    }

    /// How many TLS handshakes were refused.
    pub fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    pub fn sent(&self) -> Vec<(String, String)> {
        self.lock().sent.clone()
    }

    fn record(&self, request: &DiscoveryRequest, headers: &[(String, String)]) {
        let node = request.node.clone().unwrap_or_default();
        let node_metadata = node
            .metadata
            .map(|m| {
                m.fields
                    .into_iter()
                    .map(|(k, v)| match v.kind {
                        Some(prost_types::value::Kind::StringValue(s)) => (k, s),
                        other => (k, format!("{other:?}")),
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.lock().seen.push(Seen {
            node_id: node.id,
            node_metadata,
            version: request.version_info.clone(),
            nonce: request.response_nonce.clone(),
            error: request.error_detail.as_ref().map(|e| e.message.clone()),
            headers: headers.to_vec(),
        });
    }

    /// The response for the snapshot, if the client (at `client_version`) lacks it or `force`.
    fn response_for(&self, client_version: &str, force: bool) -> Option<DiscoveryResponse> {
        let (version, configs, _) = self.lock().snapshot.clone()?;
        if version == client_version && !force {
            return None;
        }
        Some(self.response_of(version, &configs))
    }

    /// A response carrying `version` and `configs`, with a new nonce (recorded as sent).
    fn response_of(&self, version: String, configs: &[RateLimitConfig]) -> DiscoveryResponse {
        let mut state = self.lock();
        let nonce = format!("n{}", state.sent.len() + 1);
        state.sent.push((nonce.clone(), version.clone()));
        DiscoveryResponse {
            version_info: version,
            resources: configs
                .iter()
                .map(|c| prost_types::Any {
                    type_url: TYPE_URL.into(),
                    value: c.encode_to_vec(),
                })
                .collect(),
            canary: false,
            type_url: TYPE_URL.into(),
            nonce,
        }
    }
}

struct Ads(Shared);

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let headers: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().ok()?.to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let shared = self.0.clone();
        tokio::spawn(async move {
            let mut changed = shared.changed.subscribe();
            let (mut last_nonce, mut client_version) = (String::new(), None::<String>);
            loop {
                let response = tokio::select! {
                    request = incoming.message() => {
                        let Ok(Some(request)) = request else { return };
                        shared.record(&request, &headers);
                        if !request.response_nonce.is_empty() && request.response_nonce != last_nonce {
                            continue; // stale: answers an older response
                        }
                        client_version = Some(request.version_info.clone());
                        if request.error_detail.is_some() {
                            continue; // NACK: nothing new until the snapshot changes
                        }
                        shared.response_for(&request.version_info, false)
                    }
                    moved = changed.changed() => {
                        if moved.is_err() { return; }
                        let serial = *changed.borrow_and_update();
                        if serial >> 62 & 1 == 1 {
                            for response in shared.burst_responses() {
                                last_nonce = response.nonce.clone();
                                if tx.send(Ok(response)).await.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        let force = serial >> 63 == 1;
                        let Some(version) = &client_version else { continue };
                        shared.response_for(version, force)
                    }
                };
                if let Some(response) = response {
                    last_nonce = response.nonce.clone();
                    if tx.send(Ok(response)).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// A running ADS server on its own runtime; `kill` (or drop) ends it and all its connections.
pub struct AdsServer {
    pub addr: SocketAddr,
    pub shared: Shared,
    runtime: Option<tokio::runtime::Runtime>,
}

impl AdsServer {
    /// Serves `shared` on `addr` (port 0 for any), over TLS when `tls` is given.
    pub fn start(
        addr: SocketAddr,
        shared: Shared,
        tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    ) -> AdsServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("ADS runtime");
        let listener = std::net::TcpListener::bind(addr).expect("ADS bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("ADS address");
        let service = AggregatedDiscoveryServiceServer::new(Ads(shared.clone()));
        let refused = Arc::clone(&shared.refused);
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("ADS listener");
            let router = tonic::transport::Server::builder().add_service(service);
            match tls {
                None => {
                    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                    let _ = router.serve_with_incoming(incoming).await;
                }
                Some(config) => {
                    let _ = router
                        .serve_with_incoming(tls_incoming(listener, config, refused))
                        .await;
                }
            }
        });
        AdsServer {
            addr,
            shared,
            runtime: Some(runtime),
        }
    }

    /// Ends the server at once: every stream, connection and the listener are closed when
    /// this returns (the runtime is dropped on a thread of its own, which waits for them).
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            let _ = std::thread::spawn(move || drop(runtime)).join();
        }
    }
}

/// TLS connections accepted on `listener`; failed handshakes are dropped.
fn tls_incoming(
    listener: tokio::net::TcpListener,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
    refused: Arc<std::sync::atomic::AtomicUsize>,
) -> ReceiverStream<std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    let (tx, rx) = mpsc::channel(8);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, tx, refused) = (acceptor.clone(), tx.clone(), Arc::clone(&refused));
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(tls) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Err(_) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
