//! Replaces, unlimited, shadow and quota modes (per rule and global), limit overrides,
//! hits_addend and refunds, share_threshold, response headers and dynamic metadata (reference
//! §2.5–§2.6), on every backend.

use crate::backends::Backend;
use crate::on_every_backend;
use crate::semantics::{BASIC, limit};
use crate::support::{Options, desc, req, req1};
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

/// `replaces` names a limit of another file merged into the same domain
/// (`MERGE_DOMAIN_CONFIG`): names are resolved across the domain's files, and a name of
/// another domain is not replaced.
#[tokio::test]
async fn replaces_across_merged_files() {
    const STRICT: &str = "domain: m\ndescriptors:\n  - key: user\n    rate_limit: { name: strict, unit: minute, requests_per_unit: 0 }\n";
    const VIP: &str = "domain: m\ndescriptors:\n  - key: vip\n    rate_limit: { unit: minute, requests_per_unit: 5, replaces: [{ name: strict }] }\n";
    const OTHER: &str = "domain: o\ndescriptors:\n  - key: user\n    rate_limit: { name: strict, unit: minute, requests_per_unit: 0 }\n  - key: vip\n    rate_limit: { unit: minute, requests_per_unit: 5, replaces: [{ name: lenient }] }\n";
    let options = Options {
        merge: true,
        ..Options::default()
    };
    let files = [
        ("strict.yaml", STRICT),
        ("vip.yaml", VIP),
        ("other.yaml", OTHER),
    ];
    let s = crate::support::start_memory(&files, options).await;
    let user = || desc(&[("user", "u")]);
    let vip = || desc(&[("vip", "v")]);
    let alone = s.call(req("m", vec![user()])).await;
    assert_eq!(alone.overall_code(), Code::OverLimit, "strict alone blocks");
    let both = s.call(req("m", vec![user(), vip()])).await;
    assert_eq!(
        both.overall_code(),
        Code::Ok,
        "vip (another file) replaces strict"
    );
    assert_eq!(
        limit(&both, 0),
        None,
        "the replaced limit is reported without a limit"
    );
    let other = s.call(req("o", vec![user(), vip()])).await;
    assert_eq!(
        other.overall_code(),
        Code::OverLimit,
        "in domain o, vip replaces a name nothing has"
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

/// The over-limit cache remembers the limit a key went over: a later override that raises the
/// limit is counted in the store (envoyproxy/ratelimit's issue #1077, issue 51), one at the same
/// or a lower limit is still refused.
async fn over_limit_cache_counts_a_raised_override(backend: Backend) {
    let options = Options::from(LimiterSettings {
        local_cache_bytes: 1 << 20,
        ..Default::default()
    });
    let Some(s) = backend.start(&[("basic.yaml", BASIC)], options).await else {
        return;
    };
    let call = |n: u32| {
        let mut d = desc(&[("key2", "cached-override")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: n,
            unit: Unit::Minute as i32,
        });
        req("test-domain", vec![d])
    };
    let code_left = |r: &turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        (r.overall_code(), r.statuses[0].limit_remaining)
    };
    assert_eq!(code_left(&s.call(call(1)).await), (Code::Ok, 0));
    assert_eq!(code_left(&s.call(call(1)).await), (Code::OverLimit, 0));
    // Cached over 1/minute; a call at 100/minute is counted: its third hit.
    assert_eq!(code_left(&s.call(call(100)).await), (Code::Ok, 97));
    assert_eq!(code_left(&s.call(call(1)).await), (Code::OverLimit, 0));
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

on_every_backend!(
    replaces,
    shadow_mode_per_rule_and_global,
    quota_mode,
    limit_override,
    over_limit_cache_counts_a_raised_override,
    hits_addend_and_refunds,
    share_threshold,
);
