//! Response shaping and the local over-limit cache, on every backend: `RateLimit-*` response
//! headers (custom names), dynamic metadata (first passing descriptor's metadata wins), and the
//! local cache answering without a store round trip.

use crate::backends::Backend;
use crate::on_every_backend;
use crate::semantics::BASIC;
use crate::support::{desc, req, req1};
use prost_types::value::Kind;
use turnstile::clock::Clock;
use turnstile::limiter::LimiterSettings;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::rls::{HeaderNames, ResponseSettings};

const EXAMPLE: &str = include_str!("../../config/example.yaml");

async fn response_headers(backend: Backend) {
    let names = HeaderNames {
        limit: "A-Ratelimit-Limit".into(),
        remaining: "A-Ratelimit-Remaining".into(),
        reset: "A-Ratelimit-Reset".into(),
    };
    let response = ResponseSettings {
        headers: Some(names),
        dynamic_metadata: false,
    };
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], response.into())
        .await
    else {
        return;
    };
    let reset = (60 - s.clock.now_secs() % 60).to_string();
    let resp = s
        .call(req(
            "test-domain",
            vec![desc(&[("key2", "a")]), desc(&[("key3", "b")])],
        ))
        .await;
    let headers: Vec<(String, String)> = resp
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let hour_reset = (3600 - s.clock.now_secs() % 3600).to_string();
    assert_eq!(
        headers,
        vec![
            ("A-Ratelimit-Limit".into(), "1".into()),
            ("A-Ratelimit-Remaining".into(), "0".into()),
            ("A-Ratelimit-Reset".into(), hour_reset)
        ],
        "the descriptor closest to its limit"
    );
    let resp = s.call(req1("test-domain", &[("key2", "a")])).await;
    let values: Vec<&str> = resp
        .response_headers_to_add
        .iter()
        .map(|h| h.value.as_str())
        .collect();
    assert_eq!(values, vec!["20", "18", reset.as_str()]);
    let resp = s.call(req1("test-domain", &[("nothing", "a")])).await;
    assert!(
        resp.response_headers_to_add.is_empty(),
        "no headers when no limit applied"
    );
}

async fn dynamic_metadata(backend: Backend) {
    let response = ResponseSettings {
        headers: None,
        dynamic_metadata: true,
    };
    let Some(s) = backend
        .start(&[("example.yaml", EXAMPLE)], response.into())
        .await
    else {
        return;
    };
    let mut r = req(
        "rl",
        vec![
            desc(&[("service", "service_1")]),
            desc(&[("service", "service_2")]),
        ],
    );
    r.hits_addend = 1;
    let first = s.call(r.clone()).await;
    let second = s.call(r).await;
    let quota_name =
        |resp: &turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse| -> Option<String> {
            let md = resp.dynamic_metadata.as_ref()?;
            let Some(Kind::StructValue(meta)) = md.fields.get("metadata")?.kind.as_ref() else {
                return None;
            };
            let Some(Kind::StructValue(swq)) = meta.fields.get("service_with_quota")?.kind.as_ref()
            else {
                return None;
            };
            match swq.fields.get("name")?.kind.as_ref() {
                Some(Kind::StringValue(name)) => Some(name.clone()),
                _ => None,
            }
        };
    assert_eq!(
        quota_name(&first).as_deref(),
        Some("service_1"),
        "first passing descriptor's metadata wins"
    );
    assert_eq!(
        quota_name(&second).as_deref(),
        Some("service_2"),
        "service_1 is over, so service_2 is chosen"
    );
    let md = first.dynamic_metadata.expect("metadata");
    assert_eq!(
        md.fields.get("domain").and_then(|v| v.kind.clone()),
        Some(Kind::StringValue("rl".into()))
    );
    assert_eq!(
        md.fields.get("hitsAddend").and_then(|v| v.kind.clone()),
        Some(Kind::NumberValue(1.0))
    );
}

async fn local_over_limit_cache(backend: Backend) {
    let limiter = LimiterSettings {
        local_cache_bytes: 1 << 20,
        ..Default::default()
    };
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], limiter.into())
        .await
    else {
        return;
    };
    let codes: Vec<Code> = {
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(
                s.call(req1("test-domain", &[("key3", "cached")]))
                    .await
                    .overall_code(),
            );
        }
        out
    };
    assert_eq!(
        codes,
        vec![Code::Ok, Code::OverLimit, Code::OverLimit, Code::OverLimit]
    );
    let text = s.metrics.render(&[]);
    let value = |series: &str| {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(
        value("turnstile_backend_call_seconds_count").as_deref(),
        Some("2"),
        "the cached calls never reach the store"
    );
    let labels = r#"{domain="test-domain",key1="key3"}"#;
    assert_eq!(
        value(&format!(
            "ratelimit_service_rate_limit_over_limit_with_local_cache{labels}"
        ))
        .as_deref(),
        Some("2")
    );
    assert_eq!(
        value(&format!("ratelimit_service_rate_limit_over_limit{labels}")).as_deref(),
        Some("3")
    );
    assert_eq!(
        value(&format!("ratelimit_service_rate_limit_total_hits{labels}")).as_deref(),
        Some("4")
    );
    // The next window is not in the cache.
    s.clock.advance(3600);
    assert_eq!(
        s.call(req1("test-domain", &[("key3", "cached")]))
            .await
            .overall_code(),
        Code::Ok
    );
}

on_every_backend!(local_over_limit_cache, response_headers, dynamic_metadata);
