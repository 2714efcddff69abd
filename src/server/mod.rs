//! Wiring of the gRPC server: the rate-limit service (RLS), the rate-limit quota service (RLQS), `grpc.health.v1` and server reflection
//! v1 and v1alpha, served on a listener the caller bound until the caller's shutdown future
//! resolves (then in-flight calls finish). Health: `""` is liveness (always SERVING while the
//! process serves); `ratelimit` and the full service name are readiness, following
//! [`Health`](crate::health::Health), which a background task keeps in step with the counter
//! store.
//!
//! Limits against overload and abuse: connections are accepted through the `incoming` module (a cap on
//! open connections, accept errors paced, stalled and idle connections closed), each connection
//! advertises `SETTINGS_MAX_CONCURRENT_STREAMS`, header lists are bounded, every request has a
//! deadline (a body that never arrives is cut off), and requests in flight across all
//! connections are capped, the excess refused at once with `RESOURCE_EXHAUSTED` rather than
//! queued in memory. Below that cap, `ShouldRateLimit` calls in flight are held to an adaptive
//! limit (the `admission` module) that follows the latency admitted calls see, so overload is
//! refused at once instead of answered after the caller gave up.
//!
//! Requests find their service by the service name in the path (`routes`), not through tonic's
//! axum router: ten allocations fewer a call, +7-10 % calls per core (BENCHMARKS.md).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

mod admission;
mod content_type;
mod degraded;
mod incoming;

#[cfg(fuzzing)]
pub use incoming::fuzz_frames;

use crate::grpc::routes::Routes;
use crate::metrics::PeerReadings;
use crate::pb::FILE_DESCRIPTOR_SET;
use crate::peers::{ConnectionLimits, Peers};
use crate::rlqs::{RlqsHandler, RlqsServer};
use crate::rls::{RateLimitHandler, RlsServer, ServiceState};
use crate::settings::{ConnectionAge, GrpcLimits, RlqsSettings};
use crate::storage::CounterStore;

/// The health-check service names Envoy and Kubernetes probes use for readiness.
pub const HEALTH_SERVICE_NAMES: [&str; 3] = [
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
    "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
];

/// How often the counter store's readiness is re-checked.
const READINESS_INTERVAL: Duration = Duration::from_millis(500);

/// Where gRPC is served: TCP, or a Unix domain socket (`GRPC_UDS`).
#[derive(Debug)]
pub enum GrpcListener {
    /// A TCP listener (TLS applies when configured).
    Tcp(TcpListener),
    /// A Unix domain socket listener (plain text; the socket's file permissions guard it).
    Unix(tokio::net::UnixListener),
}

impl From<TcpListener> for GrpcListener {
    fn from(listener: TcpListener) -> Self {
        GrpcListener::Tcp(listener)
    }
}

/// Transport options.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The `GRPC_*` limits (connections, streams, requests in flight, deadlines, header size,
    /// the adaptive limit), as the settings read them.
    pub limits: GrpcLimits,
    /// Send GOAWAY after a connection is this old (`GRPC_MAX_CONNECTION_AGE`), then give it
    /// the grace period (`GRPC_MAX_CONNECTION_AGE_GRACE`) to finish, so clients rebalance.
    pub max_connection_age: Option<ConnectionAge>,
    /// Serve TLS (and mTLS) with this configuration (see [`crate::tls`]).
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Where the adaptive limit reports its value, the calls in flight and the calls shed.
    pub admission: Arc<crate::metrics::AdmissionReadings>,
    /// Counts open connections (for `/metrics`).
    pub open_connections: Arc<crate::metrics::OpenConnections>,
    /// How the Rate Limit Quota Service shares quotas out.
    pub rlqs: RlqsSettings,
    /// The clients as peers: connections, decisions in flight and RLQS streams per peer
    /// (shared with the HTTP API's `/json`).
    pub peers: Arc<Peers>,
}

impl Default for ServerOptions {
    /// The `GRPC_*` settings' defaults (written once, in `settings`), no TLS, no ageing, fresh
    /// gauges, the default RLQS sharing.
    fn default() -> Self {
        Self {
            limits: GrpcLimits::default(),
            max_connection_age: None,
            tls: None,
            admission: Arc::default(),
            open_connections: Arc::default(),
            rlqs: RlqsSettings::default(),
            peers: peers_within(&GrpcLimits::default(), Arc::default()),
        }
    }
}

/// The peers of a server with these limits, reporting to `readings`.
pub fn peers_within(limits: &GrpcLimits, readings: Arc<PeerReadings>) -> Arc<Peers> {
    let connections = ConnectionLimits {
        max: limits.max_connections,
        per_peer: limits.max_connections_per_peer,
    };
    let peers = Peers::new(connections, limits.rlqs_streams_per_peer, readings);
    // A peer may have twice its part of the budget open.
    peers.set_budget(limits.fair_requests_open / 2);
    peers
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptor set.
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves gRPC on `listener` until `shutdown` resolves, then finishes in-flight calls.
pub async fn serve<S: CounterStore>(
    listener: impl Into<GrpcListener>,
    state: Arc<ServiceState<S>>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    // Set before anything is served; `publish_health` keeps it in step afterwards.
    for name in HEALTH_SERVICE_NAMES {
        reporter
            .set_service_status(name, serving(state.health.is_healthy()))
            .await;
    }
    let open = Arc::clone(&options.open_connections);
    let peers = Arc::clone(&options.peers);
    let limits = options.limits;
    let door = Arc::clone(&peers).keep_door_in_time(limits.fair_queue_target);
    let watchers = watchers(&state, reporter, door);
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let (reflection_v1, reflection_v1alpha) =
        (reflection().build_v1()?, reflection().build_v1alpha()?);
    let mut builder = Server::builder()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .http2_max_header_list_size(limits.max_header_list_size)
        .timeout(limits.request_timeout);
    // At its age hyper shuts a connection down gracefully (GOAWAY, then its calls finish);
    // the grace is the connection's own hard end (`incoming::Conn`): tonic, given a grace,
    // sleeps through the age and closes at age + grace with no GOAWAY at all.
    if let Some(ConnectionAge { age, .. }) = options.max_connection_age {
        builder = builder.max_connection_age(age);
    }
    let ends = options.max_connection_age.map(|a| a.age + a.grace);
    let builder = builder
        .layer(content_type::GrpcOnlyLayer)
        .layer(admission::AdmissionLayer::new(
            limits.adaptive,
            u32::try_from(limits.max_requests_in_flight).unwrap_or(u32::MAX),
            limits.default_call_timeout,
            Arc::clone(&options.peers),
            Arc::clone(&options.admission),
        ))
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            limits.max_requests_in_flight,
        ));
    let routes = Routes::new(RlsServer::new(RateLimitHandler::new(Arc::clone(&state))))
        .with(RlqsServer::new(RlqsHandler::new(state, options.rlqs)))
        .with(health)
        .with(reflection_v1)
        .with(reflection_v1alpha);
    let served = match (listener.into(), options.tls) {
        (GrpcListener::Tcp(listener), None) => {
            let plain = |stream| std::future::ready(Some(stream));
            let incoming = incoming::accept(listener, limits, ends, open, peers, plain);
            builder
                .serve_with_incoming_shutdown(routes, incoming, shutdown)
                .await
        }
        (GrpcListener::Tcp(listener), Some(config)) => {
            let tls = crate::tls::handshake(config, limits.handshake_timeout);
            let incoming = incoming::accept(listener, limits, ends, open, peers, tls);
            builder
                .serve_with_incoming_shutdown(routes, incoming, shutdown)
                .await
        }
        (GrpcListener::Unix(listener), _) => {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            builder
                .serve_with_incoming_shutdown(routes, incoming, shutdown)
                .await
        }
    };
    watchers.iter().for_each(tokio::task::JoinHandle::abort);
    served?;
    Ok(())
}

/// The tasks that keep health and the replicas' marks in step while the server serves (aborted
/// when it stops): the counter store's readiness, the marks, the local mode's hand-back, the
/// gRPC health service, and `door` (the door's budget in time).
fn watchers<S: CounterStore>(
    state: &Arc<ServiceState<S>>,
    reporter: tonic_health::server::HealthReporter,
    door: impl Future<Output = ()> + Send + 'static,
) -> [tokio::task::JoinHandle<()>; 5] {
    let (marks, owed) = (Arc::clone(state), Arc::clone(state));
    [
        tokio::spawn(track_backend(Arc::clone(state))),
        tokio::spawn(async move { marks.limiter.keep_marks().await }),
        tokio::spawn(async move { owed.limiter.keep_handing_back().await }),
        tokio::spawn(publish_health(reporter, Arc::clone(state))),
        tokio::spawn(door),
    ]
}

/// Keeps the backend component of health in step with the counter store. In the `local`
/// failure mode a store that fails leaves the process ready, degraded (said since when).
async fn track_backend<S: CounterStore>(state: Arc<ServiceState<S>>) {
    let mut last: Result<(), String> = Ok(());
    let mut down_since = None;
    loop {
        let now = state.limiter.ready().await.map_err(|e| e.to_string());
        match (&last, &now) {
            (Ok(()), Err(why)) => {
                tracing::warn!(ready = false, reason = %why, "counter store readiness changed");
            }
            (Err(_), Ok(())) => tracing::warn!(ready = true, "counter store readiness changed"),
            _ => {}
        }
        down_since = match &now {
            Ok(()) => None,
            Err(_) => down_since.or_else(|| Some(std::time::SystemTime::now())),
        };
        let local = state.limiter.decides_locally();
        state
            .health
            .set_degraded(degraded::degraded(&state, &now, down_since));
        state.health.set_backend_ready(now.is_ok() || local);
        last = now;
        tokio::time::sleep(READINESS_INTERVAL).await;
    }
}

/// The readiness services' status for a health state.
fn serving(healthy: bool) -> ServingStatus {
    if healthy {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

/// Mirrors overall health into the gRPC readiness service names.
async fn publish_health<S>(reporter: HealthReporter, state: Arc<ServiceState<S>>) {
    let mut changes = state.health.subscribe();
    loop {
        let status = serving(*changes.borrow_and_update());
        for name in HEALTH_SERVICE_NAMES {
            reporter.set_service_status(name, status).await;
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}
