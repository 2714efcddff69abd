//! `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: a push larger than the limit is not taken (the stream
//! fails and is made again, subscribing with the version in force), and the rules in force
//! keep counting; Envoy AI Gateway's kind of push (quota mode, shadow mode, metadata) is taken
//! as a rule file with the same keys would be.

use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::ratelimit::config::ratelimit::v3::{RateLimitDescriptor, RateLimitUnit};

use super::server::{AdsServer, Shared};
use super::{codes, limit, loopback, ok_then_over, start, version_in_force};
use crate::process::http_get;
use crate::support::until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_over_the_message_size_limit_is_not_taken() {
    let shared = Shared::default();
    shared.set(
        "1",
        vec![limit("small", "big", "user", RateLimitUnit::Hour, 2)],
    );
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let p = start(ads.addr, &[("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "2048")]);
    assert_eq!(codes(&p, "big", "ann", 3).await, ok_then_over(2));

    let mut large = limit("large", "big", "user", RateLimitUnit::Hour, 100);
    for i in 0..100 {
        large.descriptors.push(RateLimitDescriptor {
            key: format!("padding-key-{i:03}"),
            ..limit("x", "x", "x", RateLimitUnit::Hour, 1).descriptors[0].clone()
        });
    }
    let subscriptions = |s: &Shared| {
        s.seen()
            .iter()
            .filter(|r| r.nonce.is_empty() && r.version == "1")
            .count()
    };
    shared.set("2", vec![large]);
    until(
        Duration::from_secs(5),
        "the client subscribes again after the refused push",
        || subscriptions(&shared) >= 1 && shared.sent().iter().any(|(_, v)| v == "2"),
    )
    .await;
    assert_eq!(version_in_force(&p).as_deref(), Some("1"));
    assert_eq!(
        codes(&p, "big", "ann", 1).await,
        vec![Code::OverLimit],
        "version 1 counts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ai_gateway_push_keeps_quota_and_shadow_modes() {
    let shared = Shared::default();
    let mut quota = limit(
        "ai-gateway-quota",
        "ai-gateway-quota",
        "model",
        RateLimitUnit::Minute,
        1,
    );
    quota.descriptors[0].quota_mode = true;
    let mut shadow = limit("x", "x", "tenant", RateLimitUnit::Minute, 1).descriptors[0].clone();
    shadow.shadow_mode = true;
    quota.descriptors.push(shadow);
    shared.set("1", vec![quota]);
    let ads = AdsServer::start(loopback(), shared, None);
    let p = start(
        ads.addr,
        &[("CONFIG_GRPC_XDS_NODE_ID", "envoy-ai-gateway-ratelimit")],
    );
    let (_, body) = http_get(p.debug, "/rlconfig").expect("rlconfig");
    assert!(
        body.contains("ai-gateway-quota.model: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true"),
        "{body}"
    );
    assert!(
        body.contains("ai-gateway-quota.tenant: unit=MINUTE requests_per_unit=1, shadow_mode: true, quota_mode: false"),
        "{body}"
    );
    // Shadow mode: over the limit, yet answered OK.
    let mut client = p.client().await;
    for _ in 0..2 {
        let response = client
            .should_rate_limit(crate::support::req1(
                "ai-gateway-quota",
                &[("tenant", "t1")],
            ))
            .await
            .expect("answered")
            .into_inner();
        assert_eq!(response.overall_code(), Code::Ok);
    }
}
