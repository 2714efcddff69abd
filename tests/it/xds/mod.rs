//! Rules over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`) against an ADS server that behaves as
//! go-control-plane's state-of-the-world cache (`server.rs`): rules arrive and count, a change
//! is in force within a second, a bad push is NACKed with the reason while the old limits keep
//! counting, a re-sent version is a no-op, the control plane dying for 10 s never stops the
//! answers and the client resubscribes, mTLS with a client certificate rotated on disk, and
//! `FORCE_START_WITHOUT_INITIAL_CONFIG` both ways.

mod bursts;
mod force_start;
mod limits;
mod rotation;
pub mod server;
mod tls_errors;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

use crate::process::{Process, RULES, http_get, metric, rules_root};
use crate::support::{req1, until};
use server::{AdsServer, Shared};

/// One domain with one limit on `key`.
pub fn limit(name: &str, domain: &str, key: &str, unit: RateLimitUnit, n: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: n,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// The xDS settings every test uses (quick reconnection), plus `more`.
pub fn xds_env(ads: SocketAddr, more: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        ("CONFIG_GRPC_XDS_SERVER_URL", ads.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "turnstile-test".to_owned()),
        (
            "CONFIG_GRPC_XDS_NODE_METADATA",
            "zone=a,role=ratelimit".to_owned(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-tenant:blue".to_owned(),
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms".to_owned()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "300ms".to_owned()),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "50ms".to_owned(),
        ),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}

pub fn start(ads: SocketAddr, more: &[(&'static str, &str)]) -> Process {
    let env = xds_env(ads, more);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // File rules for domain `ops` sit in the rule directory: under xDS they are not read.
    Process::spawn(&rules_root(RULES), &pairs)
}

pub async fn codes(p: &Process, domain: &str, user: &str, n: usize) -> Vec<Code> {
    let mut client = p.client().await;
    let mut out = Vec::new();
    for _ in 0..n {
        let response = client
            .should_rate_limit(req1(domain, &[("user", user)]))
            .await
            .expect("answered")
            .into_inner();
        out.push(response.overall_code());
    }
    out
}

pub fn version_in_force(p: &Process) -> Option<String> {
    let body = http_get(p.debug, "/rlconfig")?.1;
    let line = body.lines().next()?;
    line.strip_prefix("# xDS version in force: ")
        .map(str::to_owned)
}

pub fn ok_then_over(ok: usize) -> Vec<Code> {
    let mut out = vec![Code::Ok; ok];
    out.push(Code::OverLimit);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_arrive_change_and_a_bad_push_is_nacked_while_the_old_rules_count() {
    let ads = AdsServer::start(loopback(), Shared::default(), None);
    let shared = ads.shared.clone();
    shared.set(
        "1",
        vec![limit("xds-1", "xds", "user", RateLimitUnit::Hour, 2)],
    );
    let p = start(ads.addr, &[]);
    first_rules_with_the_node_and_an_ack(&p, &shared).await;
    a_changed_limit_is_in_force_within_a_second(&p, &shared).await;
    a_bad_push_is_nacked_and_the_old_rules_count(&p, &shared).await;
    a_resent_version_is_acked_without_a_reload(&p, &shared).await;
}

/// Version 1's rules count, the file rules are not read, the first request names the node,
/// its metadata and headers, and version 1 is ACKed and in force.
async fn first_rules_with_the_node_and_an_ack(p: &Process, shared: &Shared) {
    assert_eq!(codes(p, "xds", "ann", 3).await, ok_then_over(2));
    assert_eq!(
        codes(p, "ops", "ann", 3).await,
        vec![Code::Ok; 3],
        "file rules are not read"
    );
    let seen = shared.seen();
    let first = &seen[0];
    assert_eq!(first.node_id, "turnstile-test");
    assert_eq!(
        first.node_metadata,
        vec![
            ("role".into(), "ratelimit".into()),
            ("zone".into(), "a".into())
        ]
    );
    assert!(
        first.headers.contains(&("x-tenant".into(), "blue".into())),
        "{:?}",
        first.headers
    );
    assert_eq!((first.version.as_str(), first.nonce.as_str()), ("", ""));
    let ack = &seen[1];
    assert_eq!(
        (ack.version.as_str(), ack.nonce.as_str(), &ack.error),
        ("1", "n1", &None)
    );
    assert_eq!(version_in_force(p).as_deref(), Some("1"));
    let m = p.metrics();
    assert_eq!(
        metric(&m, "turnstile_config_source_connected"),
        Some(1),
        "{m}"
    );
    assert_eq!(
        metric(&m, "turnstile_config_source_version_info{version=\"1\"}"),
        Some(1)
    );
}

async fn a_changed_limit_is_in_force_within_a_second(p: &Process, shared: &Shared) {
    // A changed limit is in force within a second of the push.
    let pushed = Instant::now();
    shared.set(
        "2",
        vec![limit("xds-2", "xds", "user", RateLimitUnit::Hour, 5)],
    );
    until(
        Duration::from_secs(1),
        "version 2 in force within 1 s of the push",
        || version_in_force(p).as_deref() == Some("2"),
    )
    .await;
    eprintln!("xDS push to rules in force: {:?}", pushed.elapsed());
    assert_eq!(codes(p, "xds", "bob", 6).await, ok_then_over(5));
}

async fn a_bad_push_is_nacked_and_the_old_rules_count(p: &Process, shared: &Shared) {
    // A push that does not compile: NACKed with the reason, version 2 keeps counting.
    let broken = limit("xds-3", "xds", "user", RateLimitUnit::Unknown, 9);
    shared.set("3", vec![broken]);
    until(Duration::from_secs(5), "the bad push is NACKed", || {
        shared
            .seen()
            .iter()
            .any(|s| s.nonce == "n3" && s.error.is_some())
    })
    .await;
    let nack = shared
        .seen()
        .into_iter()
        .find(|s| s.nonce == "n3")
        .expect("NACK");
    assert_eq!(nack.version, "2", "a NACK carries the version in force");
    let why = nack.error.expect("error detail");
    assert!(
        why.contains("xDS resource \"xds-3\": descriptors[0].rate_limit") && why.contains("unit"),
        "{why}"
    );
    assert_eq!(codes(p, "xds", "bob", 1).await, vec![Code::OverLimit]);
    assert_eq!(codes(p, "xds", "cat", 6).await, ok_then_over(5));
    assert_eq!(version_in_force(p).as_deref(), Some("2"));
    let m = p.metrics();
    assert_eq!(
        metric(&m, "turnstile_config_source_nacks_total"),
        Some(1),
        "{m}"
    );
    assert_eq!(
        metric(&m, "ratelimit_service_config_load_error"),
        Some(1),
        "{m}"
    );
}

async fn a_resent_version_is_acked_without_a_reload(p: &Process, shared: &Shared) {
    // The control plane reverts to version 2 and sends it again: ACKed, nothing reloaded.
    let loads = metric(&p.metrics(), "ratelimit_service_config_load_success");
    shared.set(
        "2",
        vec![limit("xds-2", "xds", "user", RateLimitUnit::Hour, 5)],
    );
    shared.resend();
    until(
        Duration::from_secs(5),
        "the re-sent version is ACKed",
        || {
            shared
                .seen()
                .iter()
                .any(|s| s.nonce == "n4" && s.error.is_none() && s.version == "2")
        },
    )
    .await;
    let m = p.metrics();
    assert_eq!(
        metric(&m, "ratelimit_service_config_load_success"),
        loads,
        "no reload"
    );
    assert_eq!(
        metric(&m, "turnstile_config_source_updates_total"),
        Some(2),
        "{m}"
    );
    assert_eq!(
        codes(p, "xds", "bob", 1).await,
        vec![Code::OverLimit],
        "counts kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_dying_for_ten_seconds_never_stops_the_answers() {
    let shared = Shared::default();
    shared.set(
        "1",
        vec![limit("xds-1", "live", "user", RateLimitUnit::Hour, 3)],
    );
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let addr = ads.addr;
    let p = start(addr, &[]);
    assert_eq!(codes(&p, "live", "ann", 4).await, ok_then_over(3));

    ads.kill();
    until(Duration::from_secs(5), "the stream is seen down", || {
        metric(&p.metrics(), "turnstile_config_source_connected") == Some(0)
    })
    .await;
    let down = Instant::now();
    let mut answered = 0;
    while down.elapsed() < Duration::from_secs(10) {
        let user = format!("u{answered}");
        assert_eq!(
            codes(&p, "live", &user, 1).await,
            vec![Code::Ok],
            "answered while down"
        );
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await; // pacing of the calls
    }
    eprintln!("{answered} calls answered while the control plane was down for 10 s");

    // The control plane comes back with the same state: the client resubscribes with the
    // version in force, and nothing is sent again.
    let again = Shared::default();
    again.set(
        "1",
        vec![limit("xds-1", "live", "user", RateLimitUnit::Hour, 3)],
    );
    let ads = AdsServer::start(addr, again.clone(), None);
    until(
        Duration::from_secs(5),
        "resubscribed with version 1",
        || {
            again
                .seen()
                .iter()
                .any(|s| s.version == "1" && s.nonce.is_empty())
        },
    )
    .await;
    assert!(
        again.sent().is_empty(),
        "the version in force is not sent again"
    );
    again.set(
        "2",
        vec![limit("xds-2", "live", "user", RateLimitUnit::Hour, 1)],
    );
    until(
        Duration::from_secs(2),
        "version 2 after the restart",
        || version_in_force(&p).as_deref() == Some("2"),
    )
    .await;
    assert_eq!(codes(&p, "live", "new", 2).await, ok_then_over(1));
    drop(ads);
}
