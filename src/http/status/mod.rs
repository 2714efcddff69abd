//! The status page on `DEBUG_PORT`: `/` (one page, readable without JavaScript), its script
//! style and icon (`/status.js`, `/status.css`, `/favicon.svg`, compiled into the binary: no external asset, no
//! build step), and the JSON it is drawn from: `/debug/status` (rules and their source, stores
//! and breakers, the local mode, peers, who is limited, each rule's recent hits and refusals)
//! and `/debug/top` (who is limited, alone).
//!
//! Safe with hostile descriptor values: the page escapes every text it writes, the script only
//! sets `textContent` and SVG attributes, and every answer carries a Content-Security-Policy
//! that allows nothing but this origin's script, style and JSON. Behind `ADMIN_TOKEN_FILE` when
//! it is set: a `Bearer` token, or the token as the password of HTTP Basic authentication (a
//! browser asks for it).
//!
//! Must not touch: the decision and the counters (read through the service state only).

mod page;
mod snapshot;

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::counters::AdminToken;
use crate::rls::ServiceState;
use crate::storage::CounterStore;

pub use snapshot::Source;

/// What the page allows the browser to load and run: this origin's script, style and JSON.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SCRIPT: &str = include_str!("status.js");
const STYLE: &str = include_str!("status.css");
/// The page's icon (a browser asks for one; without it, its console logs a 404).
const ICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
                    <rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#d1242f\"/>\
                    <rect x=\"7\" y=\"2\" width=\"2\" height=\"12\" fill=\"#fff\"/></svg>";

/// Values listed per rule and kind on the page and by default in `/debug/top`.
const LISTED: usize = 10;

/// The state of the status routes.
type Status<S> = (Arc<ServiceState<S>>, AdminToken, Arc<Source>);

/// The routes: `/`, `/status.js`, `/status.css`, `/debug/status`, `/debug/top`.
pub(super) fn router<S: CounterStore>(
    state: Arc<ServiceState<S>>,
    token: AdminToken,
    source: Source,
) -> Router {
    Router::new()
        .route("/", get(index::<S>))
        .route("/status.js", get(script))
        .route("/status.css", get(style))
        .route("/favicon.svg", get(icon))
        .route("/debug/status", get(status::<S>))
        .route("/debug/top", get(top::<S>))
        .with_state((state, token, Arc::new(source)))
}

/// An answer with the page's security headers.
fn secured(content_type: &'static str, body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The refusal when the caller may not see the page (`ADMIN_TOKEN_FILE`); `None` when it may.
fn refusal(token: &AdminToken, headers: &HeaderMap) -> Option<Response> {
    match super::counters::token_given(token, headers) {
        Ok(()) => None,
        Err(refusal) => {
            let mut response = refusal.into_response();
            if response.status() == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"turnstile\", charset=\"UTF-8\""),
                );
            }
            Some(response)
        }
    }
}

/// `answer` to the snapshot, for a caller who may see it; the refusal otherwise
/// (`ADMIN_TOKEN_FILE`).
fn seen<S: CounterStore>(
    (state, token, source): &Status<S>,
    headers: &HeaderMap,
    answer: impl FnOnce(&snapshot::Snapshot) -> Response,
) -> Response {
    match refusal(token, headers) {
        Some(refused) => refused,
        None => answer(&snapshot::take(state, source, LISTED)),
    }
}

async fn index<S: CounterStore>(State(status): State<Status<S>>, headers: HeaderMap) -> Response {
    seen(&status, &headers, |snapshot| {
        secured("text/html; charset=utf-8", page::render(snapshot))
    })
}

async fn script() -> Response {
    secured("text/javascript; charset=utf-8", SCRIPT.to_owned())
}

async fn style() -> Response {
    secured("text/css; charset=utf-8", STYLE.to_owned())
}

async fn icon() -> Response {
    secured("image/svg+xml", ICON.to_owned())
}

async fn status<S: CounterStore>(State(status): State<Status<S>>, headers: HeaderMap) -> Response {
    seen(&status, &headers, json)
}

/// `GET /debug/top[?limit=N]`: the first N values of each rule and kind (10 by default).
async fn top<S: CounterStore>(
    State((state, token, _)): State<Status<S>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Some(refused) = refusal(&token, &headers) {
        return refused;
    }
    let limit = match query.as_deref().map(|q| q.strip_prefix("limit=")) {
        None => LISTED,
        Some(Some(n)) => match n.parse::<usize>() {
            Ok(n) => n,
            Err(_) => return bad("limit must be a whole number of values, as in ?limit=10"),
        },
        Some(None) => return bad("the only parameter is limit, as in ?limit=10"),
    };
    json(&state.metrics.top.snapshot(limit))
}

fn bad(why: &str) -> Response {
    let body = serde_json::json!({ "error": why }).to_string();
    let mut response = secured("application/json", body);
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => secured("application/json", body),
        Err(err) => {
            tracing::error!(error = %err, "status could not be encoded");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
