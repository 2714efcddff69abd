//! Wiring and lifecycle: the gRPC server with the rate-limit service, `grpc.health.v1` (for
//! `""`, `ratelimit` and the full service name) and server reflection v1 and v1alpha, served on
//! a listener the caller bound, until the caller's shutdown future resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::grpc::{RateLimitHandler, ServiceState};
use crate::pb::FILE_DESCRIPTOR_SET;
use crate::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use crate::storage::CounterStore;

/// The health-check service names Envoy and Kubernetes probes use.
pub const HEALTH_SERVICE_NAMES: [&str; 2] =
    ["ratelimit", "envoy.service.ratelimit.v3.RateLimitService"];

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
    listener: TcpListener,
    state: Arc<ServiceState<S>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    // Report something definite before the first call can arrive.
    for name in HEALTH_SERVICE_NAMES {
        reporter
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let readiness = tokio::spawn(track_readiness(reporter.clone(), Arc::clone(&state)));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let served = Server::builder()
        .add_service(RateLimitServiceServer::new(RateLimitHandler::new(state)))
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    readiness.abort();
    served?;
    Ok(())
}

/// How often readiness is re-evaluated.
const READINESS_INTERVAL: Duration = Duration::from_millis(500);

/// Keeps the health status of the rate-limit service names in step with the counter store:
/// SERVING while it can count, NOT_SERVING while it cannot (e.g. no memcached server is
/// reachable). The empty service name `""` stays SERVING: it is liveness, and must not flap.
async fn track_readiness<S: CounterStore>(reporter: HealthReporter, state: Arc<ServiceState<S>>) {
    let mut last = None;
    loop {
        let status = if state.limiter.store().ready().await {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if last != Some(status) {
            if last.is_some() {
                tracing::warn!(?status, "readiness changed");
            }
            for name in HEALTH_SERVICE_NAMES {
                reporter.set_service_status(name, status).await;
            }
            last = Some(status);
        }
        tokio::time::sleep(READINESS_INTERVAL).await;
    }
}
