//! The HTTP endpoints: on `PORT`, `/healthcheck` (200 `OK` or 500 naming the failing
//! components) and `/json` (the reference's JSON API: 200 / 429 / 500, 400 for a bad request);
//! on `DEBUG_PORT`, the status page (`/`, `/debug/status`, `/debug/top`), `/rlconfig` (the loaded limits in the reference's dump format),
//! `/metrics` and `/counters` (read or reset a descriptor's counters); and the Prometheus endpoint (`PROMETHEUS_ADDR` + `PROMETHEUS_PATH`).
//!
//! Must not touch: memcached crates, YAML.

mod counters;
mod json;
mod status;

pub use counters::AdminToken;
pub use status::Source;

pub use json::{JsonError, request as json_request};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use tokio::net::TcpListener;

use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use crate::peers::{PeerId, Peers};
use crate::rls::{RateLimitHandler, ServiceState};
use crate::rules::{Algorithm, PerUnit, Rate};
use crate::storage::CounterStore;

/// `PORT`: `/healthcheck` and `/json`.
pub fn api_router<S: CounterStore>(state: Arc<ServiceState<S>>, peers: Arc<Peers>) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck::<S>))
        .route("/json", any(json_api::<S>))
        .layer(Extension(peers))
        .with_state(state)
}

/// `DEBUG_PORT`: the status page (`/`, its JSON `/debug/status` and `/debug/top`),
/// `/rlconfig`, `/metrics`, `/healthcheck`, `/counters`.
pub fn debug_router<S: CounterStore>(
    state: Arc<ServiceState<S>>,
    token: AdminToken,
    source: Source,
) -> Router {
    let counters = Router::new()
        .route(
            "/counters",
            get(counters::read::<S>).delete(counters::reset::<S>),
        )
        .with_state((Arc::clone(&state), token.clone()));
    Router::new()
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/healthcheck", get(healthcheck::<S>))
        .with_state(Arc::clone(&state))
        .merge(counters)
        .merge(status::router(state, token, source))
}

/// The Prometheus endpoint at `path`.
pub fn prometheus_router<S: CounterStore>(path: &str, state: Arc<ServiceState<S>>) -> Router {
    Router::new()
        .route(path, get(metrics::<S>))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The caller's address is known to handlers (`/counters` logs who reset what).
    let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, service)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn healthcheck<S: CounterStore>(State(state): State<Arc<ServiceState<S>>>) -> Response {
    let failing = state.health.failing();
    if failing.is_empty() {
        let mut notes: Vec<String> = state
            .health
            .degraded()
            .map(|how| format!("degraded: {how}"))
            .into_iter()
            .collect();
        let warnings = state.health.warnings();
        if !warnings.is_empty() {
            notes.push(format!("warning: {}", warnings.join("; ")));
        }
        match notes.is_empty() {
            true => (StatusCode::OK, "OK").into_response(),
            false => (StatusCode::OK, format!("OK ({})", notes.join("; "))).into_response(),
        }
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unhealthy: {}", failing.join(", ")),
        )
            .into_response()
    }
}

/// `/json`: one decision, fair between clients as gRPC's are: it waits while its client is at
/// its part of the requests open (counted with the client's gRPC calls, `peers::requests`),
/// and a client over its part of the decisions in flight while others are active is refused
/// with 503, saying why.
async fn json_api<S: CounterStore>(
    State(state): State<Arc<ServiceState<S>>>,
    Extension(peers): Extension<Arc<Peers>>,
    ConnectInfo(caller): ConnectInfo<SocketAddr>,
    body: Bytes,
) -> Response {
    let peer = peers.peer(PeerId::of_address(caller.ip()), Some(caller.ip()));
    let _open = peer.request_turn().await;
    let _decision = match peer.try_enter() {
        Ok(decision) => decision,
        Err(why) => return (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    };
    let request = match json::request(&body) {
        Ok(r) => r,
        Err(err) => {
            tracing::debug!(error = %err, "bad /json request");
            return (StatusCode::BAD_REQUEST, "Bad Request").into_response();
        }
    };
    let handler = RateLimitHandler::new(state);
    let resp = match handler.decide(request).await {
        Ok(resp) => resp,
        Err(status) => {
            tracing::debug!(error = %status.message(), "/json request failed");
            return (StatusCode::BAD_REQUEST, "Bad Request").into_response();
        }
    };
    let status = match resp.overall_code() {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
        Code::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
    };
    match json::response(&resp) {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "/json response could not be encoded");
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
    }
}

async fn rlconfig<S: CounterStore>(
    State(state): State<Arc<ServiceState<S>>>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(rules) = state.rules.load() else {
        return (StatusCode::OK, String::new()).into_response();
    };
    let rlqs = query.as_deref() == Some("rlqs");
    let mut lines: Vec<String> = rules
        .limits()
        .iter()
        .map(|l| {
            if rlqs {
                return crate::quota::describe(l);
            }
            let (unit, requests_per_unit, extensions) = match l.rate {
                Rate::Limited(p) => {
                    let mut more = extensions(&p);
                    if state.limiter.is_durable(&p) {
                        more.push_str(" store=postgres");
                    }
                    (p.unit().name(), p.requests_per_unit, more)
                }
                Rate::Unlimited { written } => ("UNKNOWN", written, String::new()),
            };
            format!(
                "{}: unit={unit} requests_per_unit={requests_per_unit}{extensions}, shadow_mode: {}, quota_mode: {}",
                l.full_key, l.shadow_mode, l.quota_mode
            )
        })
        .collect();
    lines.sort();
    let mut body = String::new();
    // Rules over xDS: which version is in force comes first (file rules print exactly as the
    // reference prints them).
    if let Some(version) = state.metrics.source.version().filter(|_| !rlqs) {
        body.push_str(&format!("# xDS version in force: {version}\n"));
    }
    body.push_str(&lines.join("\n"));
    body.push('\n');
    (StatusCode::OK, body).into_response()
}

/// Turnstile's additions to a `/rlconfig` line (nothing for the reference's own limits, so
/// those lines read exactly as the reference prints them).
fn extensions(rate: &PerUnit) -> String {
    let mut out = String::new();
    if rate.period.multiplier() != 1 {
        out.push_str(&format!(" unit_multiplier={}", rate.period.multiplier()));
    }
    match rate.algorithm {
        Algorithm::FixedWindow => {}
        Algorithm::TokenBucket { burst } => {
            out.push_str(&format!(" algorithm=token_bucket burst={burst}"));
        }
        other => out.push_str(&format!(" algorithm={}", other.name())),
    }
    out
}

async fn metrics<S: CounterStore>(State(state): State<Arc<ServiceState<S>>>) -> Response {
    let mut text = state.metrics.render(&state.limiter.gauges());
    text.push_str(
        &state
            .metrics
            .render_outage(&state.limiter.outage_readings()),
    );
    // Readiness as a series, for alerting (what /healthcheck and gRPC health answer).
    text.push_str(&format!(
        "# HELP turnstile_ready 1 while the process is ready (/healthcheck 200)\n# TYPE turnstile_ready gauge\nturnstile_ready {}\n",
        u8::from(state.health.is_healthy())
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::extensions;
    use crate::rules::{Algorithm, PerUnit, Period, Unit};

    #[test]
    fn rlconfig_lines_show_extensions_only_when_used() {
        assert_eq!(extensions(&PerUnit::fixed(5, Unit::Minute)), "");
        let bucket = PerUnit {
            requests_per_unit: 10,
            period: Period::new(Unit::Second, 2).expect("period"),
            algorithm: Algorithm::TokenBucket { burst: 5 },
        };
        assert_eq!(
            extensions(&bucket),
            " unit_multiplier=2 algorithm=token_bucket burst=5"
        );
        let sliding = PerUnit {
            algorithm: Algorithm::SlidingWindow,
            ..PerUnit::fixed(1, Unit::Hour)
        };
        assert_eq!(extensions(&sliding), " algorithm=sliding_window");
    }
}
