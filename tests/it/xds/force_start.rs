//! `FORCE_START_WITHOUT_INITIAL_CONFIG` both ways, as the reference behaves: with it, the service
//! serves at once (UNAVAILABLE without rules, `/healthcheck` healthy but saying so, or failing
//! with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`); without it, nothing is served until the
//! first rules are in force.

use std::net::SocketAddr;
use std::time::Duration;

use turnstile::pb::ratelimit::config::ratelimit::v3::RateLimitUnit;

use super::server::{AdsServer, Shared};
use super::{codes, limit, loopback, ok_then_over, start, version_in_force};
use crate::process::http_get;
use crate::support::{req1, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_start_serves_at_once_and_says_no_rules_have_arrived() {
    // Nothing listens at the ADS address yet.
    let port = crate::support::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let p = start(addr, &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")]);
    let (status, body) = http_get(p.http, "/healthcheck").expect("healthcheck");
    assert_eq!(
        status, 200,
        "healthy, as the reference is, without HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"
    );
    assert!(
        body.contains("no rate limit configuration has arrived from the xDS server yet"),
        "{body}"
    );
    let mut client = p.client().await;
    let refused = client
        .should_rate_limit(req1("xds", &[("user", "ann")]))
        .await
        .expect_err("no rules yet");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(
        refused.message().contains("no rate limit configuration"),
        "{refused:?}"
    );

    let shared = Shared::default();
    shared.set(
        "7",
        vec![limit("late", "xds", "user", RateLimitUnit::Hour, 1)],
    );
    let _ads = AdsServer::start(addr, shared, None);
    until(Duration::from_secs(5), "rules arrive", || {
        version_in_force(&p).as_deref() == Some("7")
    })
    .await;
    assert_eq!(http_get(p.http, "/healthcheck"), Some((200, "OK".into())));
    assert_eq!(codes(&p, "xds", "ann", 2).await, ok_then_over(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_force_start_and_config_required_health_fails_until_rules_arrive() {
    let shared = Shared::default();
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let p = start(
        ads.addr,
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
    );
    until(Duration::from_secs(5), "subscribed", || {
        !shared.seen().is_empty()
    })
    .await;
    let (status, body) = http_get(p.http, "/healthcheck").expect("healthcheck");
    assert_eq!((status, body.as_str()), (500, "unhealthy: config"));
    shared.set(
        "1",
        vec![limit("one", "xds", "user", RateLimitUnit::Hour, 1)],
    );
    until(Duration::from_secs(5), "healthy once rules arrive", || {
        http_get(p.http, "/healthcheck").map(|r| r.0) == Some(200)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_force_start_nothing_is_served_before_the_first_rules() {
    let shared = Shared::default();
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let grpc = crate::support::free_port();
    let addr = ads.addr;
    let starting = std::thread::spawn(move || {
        let grpc = grpc.to_string();
        start(addr, &[("GRPC_PORT", grpc.as_str())])
    });
    until(Duration::from_secs(5), "subscribed", || {
        !shared.seen().is_empty()
    })
    .await;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", grpc)).is_err(),
        "the gRPC port is not open before the first rules"
    );
    assert!(!starting.is_finished());
    shared.set(
        "1",
        vec![limit("one", "xds", "user", RateLimitUnit::Hour, 1)],
    );
    let p = tokio::task::spawn_blocking(move || starting.join().expect("started"))
        .await
        .expect("join");
    assert_eq!(p.grpc, grpc);
    assert_eq!(codes(&p, "xds", "ann", 2).await, ok_then_over(1));
}

/// A first push that does not compile, with `FORCE_START_WITHOUT_INITIAL_CONFIG`: `/healthcheck`
/// says it was refused and why (not that nothing arrived), until a good push is in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_first_push_is_said_by_the_healthcheck() {
    let shared = Shared::default();
    shared.set(
        "1",
        vec![limit("bad", "xds", "user", RateLimitUnit::Unknown, 9)],
    );
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let p = start(ads.addr, &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")]);
    let said = |p: &crate::support::process::Process| {
        http_get(p.http, "/healthcheck")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    until(
        Duration::from_secs(5),
        "the healthcheck says the push was refused",
        || said(&p).contains("configuration was refused, no rules are in force"),
    )
    .await;
    assert!(said(&p).contains("version \"1\" refused"), "{}", said(&p));
    shared.set(
        "2",
        vec![limit("good", "xds", "user", RateLimitUnit::Hour, 1)],
    );
    until(Duration::from_secs(5), "the good push in force", || {
        version_in_force(&p).as_deref() == Some("2")
    })
    .await;
    assert_eq!(said(&p), "OK");
}
