//! The gRPC edge: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`. Reads the
//! request message (`decode`, over `grpc::wire`, the protobuf wire format) and validates it (`convert`) into
//! the limiter's request, asks the limiter, converts the verdict back (`response`) and maps
//! failures to status codes.
//!
//! Must not touch: YAML, memcached crates.

mod convert;
mod decode;
mod response;
mod service;
mod trace_attributes;

pub use convert::{Draft, InvalidRequest, request_from_pb, text};
pub use decode::{WireError, decode_request};
pub use response::{HeaderNames, ResponseSettings, response_to_pb};
pub use service::RlsServer;

use std::sync::Arc;
use std::time::Instant;

use tonic::Status;

use crate::health::Health;
use crate::limiter::{self, Limiter};
use crate::metrics::Metrics;
use crate::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use crate::reload::RulesHandle;
use crate::storage::{CounterStore, ErrorKind};
use crate::traces::{Traced, Tracer};

/// Everything a request needs, shared by all connections.
#[derive(Debug)]
pub struct ServiceState<S> {
    /// The live rules.
    pub rules: Arc<RulesHandle>,
    /// The decision and its counter store.
    pub limiter: Limiter<S>,
    /// Where decided requests are recorded.
    pub metrics: Arc<Metrics>,
    /// Response shaping.
    pub response: ResponseSettings,
    /// Readiness components.
    pub health: Arc<Health>,
    /// OpenTelemetry spans (`TRACING_ENABLED`), if on.
    pub tracer: Option<Arc<Tracer>>,
}

/// The `RateLimitService` implementation.
#[derive(Debug)]
pub struct RateLimitHandler<S> {
    state: Arc<ServiceState<S>>,
}

impl<S> RateLimitHandler<S> {
    /// A handler over shared state.
    pub fn new(state: Arc<ServiceState<S>>) -> Self {
        Self { state }
    }
}

impl<S: CounterStore> RateLimitHandler<S> {
    /// The span of a call with this metadata, when tracing is on and the sampler keeps it.
    pub(crate) fn span(&self, metadata: &tonic::metadata::MetadataMap) -> Option<Traced> {
        let tracer = self.state.tracer.as_ref()?;
        tracer.server_span("ShouldRateLimit Execution", &tracer.parent(metadata))
    }

    /// Answers one `ShouldRateLimit` call as it came off the wire, and times it; `span` (if
    /// traced) is the current context while the decision runs, and ends with the answer.
    pub(crate) async fn should_rate_limit(
        &self,
        request: Draft<'_>,
        span: Option<Traced>,
    ) -> Result<RateLimitResponse, Status> {
        let started = Instant::now();
        let request = request.validate();
        let result = match &span {
            None => self.answer(request, None).await,
            Some(traced) => traced.run(self.answer(request, Some(traced))).await,
        };
        self.state.metrics.request_done(started.elapsed());
        if let Some(traced) = span {
            if let Err(status) = &result {
                traced.set("rpc.grpc.status_code", status.code() as i64);
                traced.fail(status.message().to_owned());
            }
            traced.end();
        }
        result
    }

    /// Validates, decides and answers one request in the official types (HTTP `/json`).
    pub(crate) async fn decide(
        &self,
        request: RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        self.answer(request_from_pb(&request), None).await
    }

    async fn answer(
        &self,
        request: Result<limiter::Request<'_>, InvalidRequest>,
        span: Option<&Traced>,
    ) -> Result<RateLimitResponse, Status> {
        let metrics = &self.state.metrics;
        let request = request.map_err(|e| Status::invalid_argument(e.to_string()))?;
        let Some(rules) = self.state.rules.load() else {
            metrics.service_error();
            return Err(Status::unavailable("no rate limit configuration loaded"));
        };
        // A store failure is UNAVAILABLE, not UNKNOWN: Envoy treats both as errors, and
        // UNAVAILABLE tells operators (and retry policies) the backend, not the request, failed;
        // `failure_mode_deny` on the proxy then decides whether the request passes.
        let verdict = self
            .state
            .limiter
            .check(&rules, &request)
            .await
            .map_err(|e| match e.kind() {
                // Turnstile's own overload: RESOURCE_EXHAUSTED, so nobody reads it as a dead
                // backend; the proxy's failure_mode_deny decides as for any error.
                ErrorKind::Overloaded => {
                    metrics.service_error();
                    Status::resource_exhausted(e.to_string())
                }
                _ => {
                    metrics.store_failed_request();
                    Status::unavailable(e.to_string())
                }
            })?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(domain = %request.domain, descriptors = ?request.descriptors, overall = ?verdict.overall, "decided");
        }
        if let Some(traced) = span {
            let values = self
                .state
                .tracer
                .as_ref()
                .is_some_and(|t| t.include_values());
            trace_attributes::decided(traced, &request, &verdict, values);
        }
        metrics.record(&request, &verdict);
        Ok(response_to_pb(&verdict, &request, &self.state.response))
    }
}
