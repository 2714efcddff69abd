//! `/counters` on the debug port: read (`GET`) or reset (`DELETE`) the counters of the limit a
//! descriptor matches, without counting a hit. Both go through the limiter, the one port to the
//! stores, as decisions do: a read is a check of 0 hits, a reset a refund of everything (both
//! windows of a sliding window, every token of a bucket, every request in flight), on whichever
//! store holds the limit and in whichever key layout. Every reset is logged at WARN with the
//! caller's address and counted. With `ADMIN_TOKEN_FILE`, both verbs need
//! `Authorization: Bearer <token>` (the file is read at every call, so a rotated secret
//! applies at once). The debug port must not be reachable from outside the cluster.
//!
//! Must not touch: storage, protobuf.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::limiter::{Code, Counting, Descriptor, Entry, Request, Status};
use crate::rls::ServiceState;
use crate::rules::Algorithm;
use crate::storage::CounterStore;

/// `ADMIN_TOKEN_FILE`, when set.
#[derive(Debug, Clone, Default)]
pub struct AdminToken(pub Option<PathBuf>);

/// The state of the counters routes.
pub(super) type Counters<S> = (Arc<ServiceState<S>>, AdminToken);

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A call refused: its status and why, answered as `{"error": why}`.
#[derive(Debug)]
pub(super) struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        answer(self.0, json!({ "error": self.1 }))
    }
}

fn refused(status: StatusCode, why: &str) -> Refusal {
    Refusal(status, why.to_owned())
}

/// One `name=value` pair of a query, percent-decoded (`+` is a space) to the text gRPC makes of
/// the same bytes ([`crate::rls::text`]): a value that is not UTF-8 names the counter a gRPC
/// call with those bytes counts, never a lossily decoded other one.
fn pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let decode = |part: &str| {
        let spaced = part.replace('+', " ");
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(&spaced).collect();
        crate::rls::text(&bytes).into_owned()
    };
    query.split('&').filter(|p| !p.is_empty()).map(move |pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(name), decode(value))
    })
}

/// The request a query names: `domain=D&entry=k=v&entry=k2=v2`.
fn parse(query: Option<&str>) -> Result<(String, Vec<Entry<'static>>), String> {
    let (mut domain, mut entries) = (None, Vec::new());
    for (name, value) in pairs(query.unwrap_or_default()) {
        match name.as_str() {
            "domain" => domain = Some(value),
            "entry" => {
                let Some((key, value)) = value.split_once('=') else {
                    return Err(format!("entry {value:?}: expected key=value"));
                };
                if key.is_empty() {
                    return Err("an entry has an empty key".into());
                }
                entries.push(Entry {
                    key: Cow::Owned(key.to_owned()),
                    value: Cow::Owned(value.to_owned()),
                });
            }
            other => {
                return Err(format!(
                    "unknown parameter {other:?}: expected domain and entry"
                ));
            }
        }
    }
    let domain = domain
        .filter(|d| !d.is_empty())
        .ok_or("domain is required: /counters?domain=D&entry=key=value")?;
    if entries.is_empty() {
        return Err("at least one entry=key=value is required".into());
    }
    Ok((domain, entries))
}

/// Whether the caller gave the admin token (`ADMIN_TOKEN_FILE`; anyone when it is unset): as
/// a `Bearer` token, or as the password of HTTP Basic authentication (what a browser sends).
pub(super) fn token_given(token: &AdminToken, headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(path) = &token.0 else {
        return Ok(());
    };
    let expected = std::fs::read_to_string(path).map_err(|e| {
        tracing::error!(error = %e, path = %path.display(), "ADMIN_TOKEN_FILE cannot be read; refusing the admin endpoints");
        refused(StatusCode::SERVICE_UNAVAILABLE, "the admin token cannot be read")
    })?;
    let expected = expected.trim();
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(given_token);
    match given {
        Some(given) if given.trim() == expected && !expected.is_empty() => Ok(()),
        _ => Err(refused(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required",
        )),
    }
}

/// The token in an `Authorization` value: `Bearer <token>`, or `Basic` with the token as the
/// password (any user name).
fn given_token(value: &str) -> Option<String> {
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(token.to_owned());
    }
    use base64::Engine as _;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':')
        .map(|(_, password)| password.to_owned())
}

/// The limit's state after `status` (a check or a reset), as JSON.
fn limit_json<S: CounterStore>(state: &ServiceState<S>, status: &Status<'_>) -> Value {
    let Some(limited) = status.limit else {
        return json!({ "limit": null });
    };
    let rate = limited.rate;
    let capacity = match rate.algorithm {
        Algorithm::TokenBucket { burst } => u64::from(rate.requests_per_unit) + u64::from(burst),
        _ => u64::from(rate.requests_per_unit),
    };
    let remaining = u64::from(status.remaining);
    let mut out = json!({
        "rule": limited.applied.rule().map(|l| l.full_key.as_str()),
        "algorithm": rate.algorithm.name(),
        "requests_per_unit": rate.requests_per_unit,
        "unit": rate.unit().name(),
        "unit_multiplier": rate.period.multiplier(),
        "remaining": remaining,
        "reset_seconds": status.reset_in.map(|d| d.as_secs_f64()),
        "over_limit": status.code == Code::OverLimit,
        "store": if state.limiter.is_durable(&rate) { "postgres" } else { "main" },
    });
    let used = capacity.saturating_sub(remaining);
    let (name, value) = match rate.algorithm {
        Algorithm::TokenBucket { .. } => ("tokens", remaining),
        Algorithm::Concurrency => ("in_flight", used),
        _ => match status.counting {
            Counting::Counted { after, .. } if rate.algorithm == Algorithm::FixedWindow => {
                ("count", after)
            }
            _ => ("count", used),
        },
    };
    out[name] = json!(value);
    if let Algorithm::TokenBucket { burst } = rate.algorithm {
        out["burst"] = json!(burst);
    }
    out
}

/// Runs `descriptor` through the limiter and answers the limit's state.
async fn run<S: CounterStore>(
    state: &ServiceState<S>,
    domain: String,
    descriptor: Descriptor<'static>,
) -> Result<Value, Refusal> {
    let Some(rules) = state.rules.load() else {
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "no rate limit configuration loaded",
        ));
    };
    let entries: Vec<Value> = descriptor
        .entries
        .iter()
        .map(|e| json!({ "key": e.key, "value": e.value }))
        .collect();
    let request = Request {
        domain: Cow::Borrowed(&domain),
        descriptors: vec![descriptor],
        hits_addend: 0,
    };
    let verdict = state.limiter.check(&rules, &request).await.map_err(|e| {
        refused(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("counter store: {e}"),
        )
    })?;
    let limits: Vec<Value> = verdict
        .statuses
        .iter()
        .filter(|s| s.limit.is_some())
        .map(|s| limit_json(state, s))
        .collect();
    Ok(json!({ "domain": domain, "entries": entries, "limits": limits }))
}

fn descriptor(entries: Vec<Entry<'static>>, reset: bool) -> Descriptor<'static> {
    Descriptor {
        entries,
        limit_override: None,
        // A read: 0 hits. A reset: a refund of everything there is.
        hits: if reset { u64::MAX } else { 0 },
        refund: reset,
        hits_addend: None,
    }
}

/// The caller's token checked and the query read: the domain and entries, or the answer that
/// refuses the call.
fn admitted(
    token: &AdminToken,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(String, Vec<Entry<'static>>), Refusal> {
    token_given(token, headers)?;
    parse(query).map_err(|why| refused(StatusCode::BAD_REQUEST, &why))
}

/// `GET /counters`.
pub(super) async fn read<S: CounterStore>(
    State((state, token)): State<Counters<S>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, Refusal> {
    let (domain, entries) = admitted(&token, &headers, query.as_deref())?;
    let body = run(&state, domain, descriptor(entries, false)).await?;
    Ok(answer(StatusCode::OK, body))
}

/// `DELETE /counters`: resets, then answers the state after.
pub(super) async fn reset<S: CounterStore>(
    State((state, token)): State<Counters<S>>,
    ConnectInfo(caller): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, Refusal> {
    let (domain, entries) = admitted(&token, &headers, query.as_deref())?;
    run(&state, domain.clone(), descriptor(entries.clone(), true)).await?;
    // The audit line names who reset which domain's counters and their keys; the values (request
    // data, up to the size of a query) only at debug, as everywhere in the logs.
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_ref()).collect();
    tracing::warn!(%caller, %domain, keys = ?keys, "counters reset through /counters");
    if tracing::enabled!(tracing::Level::DEBUG) {
        let shown: Vec<String> = entries
            .iter()
            .map(|e| format!("{}={}", e.key, e.value))
            .collect();
        tracing::debug!(%caller, %domain, entries = ?shown, "counters reset: the entries");
    }
    state.metrics.counters_reset();
    let mut body = run(&state, domain, descriptor(entries, false)).await?;
    body["reset"] = json!(true);
    Ok(answer(StatusCode::OK, body))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn queries_name_a_domain_and_entries() {
        let (domain, entries) =
            parse(Some("domain=plans&entry=api_key%3Dk%201&entry=user=a=b")).expect("parsed");
        assert_eq!(domain, "plans");
        assert_eq!(
            entries
                .iter()
                .map(|e| (&*e.key, &*e.value))
                .collect::<Vec<_>>(),
            [("api_key", "k 1"), ("user", "a=b")]
        );
        let (_, entries) = parse(Some("domain=d&entry=v=%FF%FE+x")).expect("parsed");
        assert_eq!(
            &*entries[0].value,
            crate::rls::text(b"\xff\xfe x"),
            "the text gRPC makes of the same bytes"
        );
        for (query, says) in [
            ("entry=a=b", "domain is required"),
            ("domain=d", "entry=key=value"),
            ("domain=d&entry=novalue", "key=value"),
            ("domain=d&entry=a=b&x=1", "\"x\""),
        ] {
            let error = parse(Some(query)).expect_err(query);
            assert!(error.contains(says), "{query}: {error}");
        }
    }
}
