//! `/counters` on the debug port, on every store (memory, memcached with Turnstile's key
//! layout, Redis with the reference's, PostgreSQL): a read shows each algorithm's state and
//! counts nothing; a reset empties fixed and sliding windows (both windows), refills a token
//! bucket and releases everything in flight, is counted, and the next call starts afresh; with
//! `ADMIN_TOKEN_FILE`, a bearer token is required.

use std::io::{Read, Write};

use serde_json::Value;

use crate::backends::Backend;
use crate::process::{Process, metric, rules_root};
use crate::support::postgres_server::Postgres;
use crate::support::{req1, unique};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 4, algorithm: sliding_window }
  - key: tenant
    rate_limit: { unit: second, unit_multiplier: 3600, requests_per_unit: 10, algorithm: token_bucket, burst: 2 }
  - key: job
    rate_limit: { unit: hour, requests_per_unit: 3, algorithm: concurrency }
";

/// One HTTP/1.1 request with optional headers: (status, body).
pub(crate) fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("debug port");
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("Content-Length: 0\r\n\r\n");
    stream.write_all(text.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The first limit of `/counters` for `key=value`.
fn limit(p: &Process, method: &str, key: &str, value: &str) -> Value {
    let (status, body) = call(
        p.debug,
        method,
        &format!("/counters?domain=plans&entry={key}={value}"),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).expect("JSON");
    json["limits"][0].clone()
}

async fn spend(p: &Process, key: &str, value: &str, n: usize) {
    let mut client = p.client().await;
    for _ in 0..n {
        client
            .should_rate_limit(req1("plans", &[(key, value)]))
            .await
            .expect("answered");
    }
}

async fn scenario(env: &[(&str, &str)]) {
    let p = Process::start(&rules_root(RULES), env);
    let v = unique("c");
    for key in ["api_key", "user", "tenant", "job"] {
        spend(&p, key, &v, 3).await;
    }
    let fixed = limit(&p, "GET", "api_key", &v);
    assert_eq!(
        (
            fixed["algorithm"].as_str(),
            fixed["count"].as_u64(),
            fixed["remaining"].as_u64()
        ),
        (Some("fixed_window"), Some(3), Some(2)),
        "{fixed}"
    );
    assert_eq!(fixed["rule"].as_str(), Some("plans.api_key"));
    assert_eq!(
        limit(&p, "GET", "api_key", &v)["count"].as_u64(),
        Some(3),
        "a read counts nothing"
    );
    let sliding = limit(&p, "GET", "user", &v);
    assert_eq!(
        (sliding["count"].as_u64(), sliding["remaining"].as_u64()),
        (Some(3), Some(1)),
        "{sliding}"
    );
    let bucket = limit(&p, "GET", "tenant", &v);
    assert_eq!(
        (bucket["tokens"].as_u64(), bucket["burst"].as_u64()),
        (Some(9), Some(2)),
        "{bucket}"
    );
    let inflight = limit(&p, "GET", "job", &v);
    assert_eq!(
        (
            inflight["in_flight"].as_u64(),
            inflight["remaining"].as_u64()
        ),
        (Some(3), Some(0)),
        "{inflight}"
    );

    for (key, field, after) in [
        ("api_key", "count", 0),
        ("user", "count", 0),
        ("tenant", "tokens", 12),
        ("job", "in_flight", 0),
    ] {
        let (status, body) = call(
            p.debug,
            "DELETE",
            &format!("/counters?domain=plans&entry={key}={v}"),
            &[],
        );
        assert_eq!(status, 200, "{body}");
        let json: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(json["reset"], Value::Bool(true), "{json}");
        assert_eq!(
            json["limits"][0][field].as_u64(),
            Some(after),
            "{key}: {json}"
        );
    }
    assert_eq!(
        metric(&p.metrics(), "turnstile_counters_reset_total"),
        Some(4)
    );
    let mut client = p.client().await;
    let fresh = client
        .should_rate_limit(req1("plans", &[("api_key", &v)]))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        fresh.statuses[0].limit_remaining, 4,
        "counting starts afresh"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_on_memory() {
    on(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_on_memcached() {
    on(Backend::Memcached).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_on_redis_with_the_reference_key_layout() {
    on(Backend::Redis).await;
}

/// The scenario on `backend`'s store.
async fn on(backend: Backend) {
    if let Some(store) = backend.env() {
        scenario(&store.pairs()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_on_postgres() {
    let Some(pg) = Postgres::start() else { return };
    let (url, schema) = (pg.url(), unique("cnt").replace('-', "_"));
    scenario(&[
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", &url),
        ("POSTGRES_SCHEMA", &schema),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_is_required_when_set_and_bad_queries_say_why() {
    let dir = crate::process::temp_dir("token");
    let file = dir.join("token");
    std::fs::write(&file, "s3cret\n").expect("token");
    let path = file.display().to_string();
    let p = Process::start(&rules_root(RULES), &[("ADMIN_TOKEN_FILE", &path)]);
    let query = "/counters?domain=plans&entry=api_key=k";
    assert_eq!(call(p.debug, "GET", query, &[]).0, 401);
    assert_eq!(
        call(
            p.debug,
            "DELETE",
            query,
            &[("Authorization", "Bearer nope")]
        )
        .0,
        401
    );
    assert_eq!(
        call(p.debug, "GET", query, &[("Authorization", "Bearer s3cret")]).0,
        200
    );
    // A rotated token applies at once.
    std::fs::write(&file, "n3w").expect("rotate");
    assert_eq!(
        call(p.debug, "GET", query, &[("Authorization", "Bearer s3cret")]).0,
        401
    );
    let (status, body) = call(
        p.debug,
        "GET",
        "/counters?entry=a=b",
        &[("Authorization", "Bearer n3w")],
    );
    assert_eq!(status, 400);
    assert!(body.contains("domain is required"), "{body}");
    let (status, body) = call(
        p.debug,
        "GET",
        "/counters?domain=plans&entry=nokey",
        &[("Authorization", "Bearer n3w")],
    );
    assert_eq!(status, 400);
    assert!(body.contains("expected key=value"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_utf8_names_the_counter_grpc_counts() {
    let p = Process::start(&rules_root(RULES), &[]);
    for _ in 0..3 {
        crate::abuse::call_with_bytes(p.grpc, b"plans", b"fw\xff\xfe")
            .await
            .expect("answered");
    }
    // The same bytes, percent-encoded: the counter gRPC counted, not a lossily decoded other.
    assert_eq!(limit(&p, "GET", "user", "fw%FF%FE")["count"], 3);
    assert_eq!(limit(&p, "GET", "user", "fw%FF%FD")["count"], 0);
    assert_eq!(limit(&p, "DELETE", "user", "fw%FF%FE")["count"], 0);
    let after = crate::abuse::call_with_bytes(p.grpc, b"plans", b"fw\xff\xfe")
        .await
        .expect("answered");
    assert_eq!(after.statuses[0].limit_remaining, 3, "the reset emptied it");
}
