//! Replaces, unlimited, shadow and quota modes (per rule and global), limit overrides,
//! hits_addend and refunds, share_threshold, response headers and dynamic metadata (reference
//! §2.5–§2.6), on every backend.

use crate::backends::Backend;
use crate::on_every_backend;
use crate::semantics::{BASIC, limit};
use crate::support::{Options, desc, req, req1};
use prost_types::value::Kind;
use turnstile::clock::Clock;
use turnstile::grpc::{HeaderNames, ResponseSettings};
use turnstile::limiter::LimiterSettings;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};

const EXAMPLE: &str = include_str!("../../config/example.yaml");

const SHARE: &str = r#"
domain: share
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: files_no_share
    value: files_no_share/*
    rate_limit: { unit: hour, requests_per_unit: 10 }
"#;

fn codes(resp: &turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> Vec<Code> {
    resp.statuses.iter().map(|s| s.code()).collect()
}

async fn replaces(backend: Backend) {
    let Some(s) = backend
        .start(&[("example.yaml", EXAMPLE)], Options::default())
        .await
    else {
        return;
    };
    // bar=banned is 0/min: limited until the override limit replaces banned_limit.
    let banned = || desc(&[("foo", "f"), ("bar", "banned")]);
    let resp = s.call(req("rl", vec![banned()])).await;
    assert_eq!(resp.overall_code(), Code::OverLimit);
    let override_dest = || {
        desc(&[
            ("source_cluster", "proxy"),
            ("destination_cluster", "override"),
        ])
    };
    for i in 0..3 {
        let resp = s.call(req("rl", vec![banned(), override_dest()])).await;
        assert_eq!(
            limit(&resp, 0),
            None,
            "replaced limit is reported without a limit"
        );
        let want = if i < 2 { Code::Ok } else { Code::OverLimit };
        assert_eq!(resp.overall_code(), want, "request {i}");
    }
    // A replaced limit is not counted: bkthomps (1/min) survives two requests that replace it.
    let bk = || desc(&[("foo", "my_foo"), ("bar", "bkthomps")]);
    let proxy_bk = || {
        desc(&[
            ("source_cluster", "proxy"),
            ("destination_cluster", "bkthomps"),
        ])
    };
    for i in 0..3 {
        let resp = s.call(req("rl", vec![bk(), proxy_bk()])).await;
        let want = if i < 2 { Code::Ok } else { Code::OverLimit };
        assert_eq!(resp.overall_code(), want, "request {i}");
    }
    let resp = s.call(req("rl", vec![bk()])).await;
    assert_eq!(
        resp.overall_code(),
        Code::Ok,
        "bkthomps was never counted while replaced"
    );
}

async fn shadow_mode_per_rule_and_global(backend: Backend) {
    let Some(s) = backend
        .start(&[("example.yaml", EXAMPLE)], Options::default())
        .await
    else {
        return;
    };
    for _ in 0..5 {
        let resp = s
            .call(req1("rl", &[("foo", "pelle"), ("baz", "shady")]))
            .await;
        assert_eq!(
            (resp.overall_code(), codes(&resp)),
            (Code::Ok, vec![Code::Ok])
        );
    }
    let resp = s
        .call(req1("rl", &[("foo", "pelle"), ("baz", "shady")]))
        .await;
    assert_eq!(
        resp.statuses[0].limit_remaining, 0,
        "shadowed over-limit keeps remaining 0"
    );

    let options = Options {
        limiter: LimiterSettings {
            shadow_mode: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let Some(g) = backend.start(&[("basic.yaml", BASIC)], options).await else {
        return;
    };
    let resp = g.call(req1("test-domain", &[("blocked", "x")])).await;
    assert_eq!(
        (resp.overall_code(), codes(&resp)),
        (Code::Ok, vec![Code::OverLimit]),
        "global shadow keeps statuses"
    );
}

async fn quota_mode(backend: Backend) {
    let Some(s) = backend
        .start(&[("example.yaml", EXAMPLE)], Options::default())
        .await
    else {
        return;
    };
    let quota = || {
        req(
            "rl",
            vec![
                desc(&[("service", "service_1")]),
                desc(&[("service", "service_2")]),
            ],
        )
    };
    let overall: Vec<Code> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(s.call(quota()).await.overall_code());
        }
        out
    };
    assert_eq!(
        overall,
        vec![Code::Ok, Code::Ok, Code::OverLimit],
        "refused only when all quota descriptors are over"
    );

    let options = Options {
        limiter: LimiterSettings {
            quota_mode: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let Some(g) = backend.start(&[("basic.yaml", BASIC)], options).await else {
        return;
    };
    let resp = g
        .call(req(
            "test-domain",
            vec![desc(&[("blocked", "x")]), desc(&[("key2", "y")])],
        ))
        .await;
    assert_eq!(
        (resp.overall_code(), codes(&resp)),
        (Code::Ok, vec![Code::OverLimit, Code::Ok]),
        "global quota mode"
    );
}

async fn limit_override(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    let with_override = |entries: &[(&str, &str)], n: u32, unit: Unit| {
        let mut d = desc(entries);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: n,
            unit: unit as i32,
        });
        d
    };
    // The override wins over the configured 20/min, even where nothing matches.
    let resp = s
        .call(req(
            "test-domain",
            vec![with_override(&[("key2", "o")], 3, Unit::Minute)],
        ))
        .await;
    assert_eq!(
        (limit(&resp, 0), resp.statuses[0].limit_remaining),
        (Some((3, Unit::Minute, String::new())), 2)
    );
    let resp = s
        .call(req(
            "test-domain",
            vec![with_override(&[("nothing", "here")], 1, Unit::Hour)],
        ))
        .await;
    assert_eq!(limit(&resp, 0), Some((1, Unit::Hour, String::new())));
    // Same entries and unit: the override shares the configured limit's counter.
    let resp = s.call(req1("test-domain", &[("key2", "o")])).await;
    assert_eq!(resp.statuses[0].limit_remaining, 18);
    // Unknown domain: still no limit.
    let resp = s
        .call(req(
            "nope",
            vec![with_override(&[("key2", "o")], 3, Unit::Minute)],
        ))
        .await;
    assert_eq!(limit(&resp, 0), None);
}

async fn hits_addend_and_refunds(backend: Backend) {
    let Some(s) = backend
        .start(&[("basic.yaml", BASIC)], Options::default())
        .await
    else {
        return;
    };
    let mut r = req1("test-domain", &[("key2", "h")]);
    r.hits_addend = 5;
    assert_eq!(s.call(r).await.statuses[0].limit_remaining, 15);
    let check_only = {
        let mut d = desc(&[("key2", "h")]);
        d.hits_addend = Some(0);
        req("test-domain", vec![d])
    };
    assert_eq!(
        s.call(check_only.clone()).await.statuses[0].limit_remaining,
        15,
        "0 = check only"
    );
    let refund = |n: u64| {
        let mut d = desc(&[("key2", "h")]);
        d.hits_addend = Some(n);
        d.is_negative_hits = true;
        req("test-domain", vec![d])
    };
    assert_eq!(s.call(refund(2)).await.statuses[0].limit_remaining, 17);
    assert_eq!(
        s.call(refund(100)).await.statuses[0].limit_remaining,
        20,
        "never below zero"
    );
    assert_eq!(s.call(check_only).await.statuses[0].limit_remaining, 20);
    let mut big = req1("test-domain", &[("key2", "h")]);
    big.descriptors[0].hits_addend = Some(21);
    let resp = s.call(big).await;
    assert_eq!(
        (resp.statuses[0].code(), resp.statuses[0].limit_remaining),
        (Code::OverLimit, 0)
    );
}

async fn share_threshold(backend: Backend) {
    let Some(s) = backend
        .start(&[("share.yaml", SHARE)], Options::default())
        .await
    else {
        return;
    };
    for i in 0..10u32 {
        let resp = s
            .call(req1("share", &[("files", &format!("files/{i}.pdf"))]))
            .await;
        assert_eq!(resp.statuses[0].limit_remaining, 9 - i);
    }
    let resp = s.call(req1("share", &[("files", "files/b.csv")])).await;
    assert_eq!(
        (resp.statuses[0].code(), limit(&resp, 0).map(|l| l.0)),
        (Code::OverLimit, Some(10))
    );
    for i in 0..10 {
        let resp = s
            .call(req1(
                "share",
                &[("files_no_share", &format!("files_no_share/{i}"))],
            ))
            .await;
        assert_eq!(
            (resp.statuses[0].code(), resp.statuses[0].limit_remaining),
            (Code::Ok, 9)
        );
    }
}

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
        .start(
            &[("basic.yaml", BASIC)],
            Options {
                response,
                ..Default::default()
            },
        )
        .await
    else {
        return;
    };
    let reset = (60 - s.clock.now() % 60).to_string();
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
    let hour_reset = (3600 - s.clock.now() % 3600).to_string();
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
        .start(
            &[("example.yaml", EXAMPLE)],
            Options {
                response,
                ..Default::default()
            },
        )
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
        .start(
            &[("basic.yaml", BASIC)],
            Options {
                limiter,
                ..Default::default()
            },
        )
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
    let text = s.metrics.render();
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

on_every_backend!(
    local_over_limit_cache,
    replaces,
    shadow_mode_per_rule_and_global,
    quota_mode,
    limit_override,
    hits_addend_and_refunds,
    share_threshold,
    response_headers,
    dynamic_metadata,
);
