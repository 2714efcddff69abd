//! memcached in anger: exact admission under a concurrent burst over two Turnstile servers
//! sharing two memcached servers; killing memcached gives UNAVAILABLE naming the server,
//! readiness follows, restarting it restores service without restarting Turnstile; and the
//! fail-open policy (global and per rule).

use std::time::{Duration, Instant};

use tonic::Code as GrpcCode;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::limiter::LimiterSettings;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::storage::{CounterStore, Gauge};

use crate::support::{Memcached, Options, TestServer, memcached_store, req1, start_with};

const BURST: &str = "domain: burst\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 50 }\n";

#[tokio::test]
async fn concurrent_burst_over_two_replicas_admits_exactly_the_limit() {
    let (Some(mc1), Some(mc2)) = (Memcached::start(), Memcached::start()) else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    // The replicas list the servers in different orders: the ring maps keys the same way.
    let store_a = memcached_store(&[&mc1, &mc2], &clock, Duration::from_secs(2));
    let store_b = memcached_store(&[&mc2, &mc1], &clock, Duration::from_secs(2));
    let a = start_with(
        store_a,
        clock.clone(),
        &[("b.yaml", BURST)],
        Options::default(),
    )
    .await;
    let b = start_with(
        store_b,
        clock.clone(),
        &[("b.yaml", BURST)],
        Options::default(),
    )
    .await;
    let users: Vec<String> = (0..8)
        .map(|i| crate::support::unique(&format!("user{i}")))
        .collect();
    let mut tasks = Vec::new();
    for caller in 0..64usize {
        let mut client = if caller % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        let users = users.clone();
        tasks.push(tokio::spawn(async move {
            let mut admitted = vec![0u32; users.len()];
            for round in 0..10usize {
                let u = (caller + round) % users.len();
                let resp = client
                    .should_rate_limit(req1("burst", &[("user", &users[u])]))
                    .await
                    .expect("call")
                    .into_inner();
                if resp.overall_code() == Code::Ok {
                    admitted[u] += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = vec![0u32; users.len()];
    for task in tasks {
        for (total, n) in admitted.iter_mut().zip(task.await.expect("caller")) {
            *total += n;
        }
    }
    eprintln!(
        "admitted per key under 64 concurrent callers (80 attempts each, limit 50): {admitted:?}"
    );
    assert!(admitted.iter().all(|&n| n == 50), "{admitted:?}");
}

async fn health(server: &TestServer) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut client = HealthClient::new(channel);
    let check = |service: &str| HealthCheckRequest {
        service: service.to_owned(),
    };
    let liveness = client
        .check(check(""))
        .await
        .expect("liveness")
        .into_inner()
        .status();
    assert_eq!(liveness, ServingStatus::Serving, "liveness never flaps");
    client
        .check(check("ratelimit"))
        .await
        .expect("readiness")
        .into_inner()
        .status()
}

async fn eventually<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::wait::until_some(Duration::from_secs(10), what, || {
        let probe = probe();
        async move { probe.await.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn killing_memcached_is_unavailable_and_a_restart_restores_service() {
    let Some(mut mc) = Memcached::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let timeout = Duration::from_millis(100);
    let store = memcached_store(&[&mc], &clock, timeout);
    let s = start_with(store, clock, &[("b.yaml", BURST)], Options::default()).await;
    let call = || s.try_call(req1("burst", &[("user", "u")]));
    assert_eq!(call().await.expect("up").statuses[0].limit_remaining, 49);
    assert_eq!(health(&s).await, ServingStatus::Serving);

    mc.kill();
    let started = Instant::now();
    let status = call().await.expect_err("memcached is down");
    let first = started.elapsed();
    assert_eq!(status.code(), GrpcCode::Unavailable, "{status:?}");
    assert!(
        status.message().contains(&mc.addr()),
        "names the server: {}",
        status.message()
    );
    let started = Instant::now();
    let again = call().await.expect_err("still down");
    let second = started.elapsed();
    assert_eq!(again.code(), GrpcCode::Unavailable);
    eprintln!(
        "answer while memcached is down: first {first:?}, then {second:?} (deadline {timeout:?})"
    );
    eventually("readiness NOT_SERVING", || async {
        health(&s).await == ServingStatus::NotServing
    })
    .await;

    mc.restart();
    eventually("counting resumes", || async { call().await.is_ok() }).await;
    eventually("readiness SERVING", || async {
        health(&s).await == ServingStatus::Serving
    })
    .await;
    // The restarted memcached is empty: counting starts again from this window's first hit.
    assert!(call().await.expect("up").statuses[0].limit_remaining < 50);
}

#[tokio::test]
async fn fail_open_globally_or_per_rule() {
    let Some(mut mc) = Memcached::start() else {
        return;
    };
    let rules = "domain: d\ndescriptors:\n  - key: open\n    rate_limit: { unit: minute, requests_per_unit: 5, fail_open: true }\n  - key: closed\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let clock = ManualClock::new(SystemClock.now_secs());
    let per_rule = start_with(
        memcached_store(&[&mc], &clock, Duration::from_millis(100)),
        clock.clone(),
        &[("d.yaml", rules)],
        Options::default(),
    )
    .await;
    let global = Options {
        limiter: LimiterSettings {
            on_store_failure: turnstile::limiter::StoreFailure::Open,
            ..Default::default()
        },
        ..Default::default()
    };
    let everywhere = start_with(
        memcached_store(&[&mc], &clock, Duration::from_millis(100)),
        clock.clone(),
        &[("d.yaml", rules)],
        global,
    )
    .await;
    mc.kill();
    let resp = per_rule.call(req1("d", &[("open", "x")])).await;
    assert_eq!(
        (resp.overall_code(), resp.statuses[0].limit_remaining),
        (Code::Ok, 5)
    );
    let status = per_rule
        .try_call(req1("d", &[("closed", "x")]))
        .await
        .expect_err("fails closed");
    assert_eq!(status.code(), GrpcCode::Unavailable);
    let resp = everywhere.call(req1("d", &[("closed", "x")])).await;
    assert_eq!(resp.overall_code(), Code::Ok);
    let metrics = everywhere.metrics.render(&[]);
    assert!(
        metrics.contains("turnstile_backend_failed_open_total{} 1"),
        "{metrics}"
    );
    assert!(
        per_rule
            .metrics
            .render(&[])
            .contains("ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1")
    );
}

#[tokio::test]
async fn a_memcached_restart_between_calls_fails_no_call() {
    let Some(mut mc) = Memcached::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = memcached_store(&[&mc], &clock, Duration::from_millis(200));
    let watched = store.clone();
    let s = start_with(store, clock, &[("b.yaml", BURST)], Options::default()).await;
    // Open every pipelined connection of the server.
    for _ in 0..4 {
        assert!(s.try_call(req1("burst", &[("user", "idle")])).await.is_ok());
    }
    let open = || match watched.gauges().first() {
        Some(Gauge::MemcachedServer { connections, .. }) => *connections,
        other => panic!("a memcached server gauge expected: {other:?}"),
    };
    assert_eq!(open(), 2, "both pipelined connections are open");
    // Each idle connection sees the server go away, so the next use reconnects.
    mc.restart();
    eventually("the idle connections notice the restart", || async {
        open() == 0
    })
    .await;
    for i in 0..4u32 {
        let resp = s
            .try_call(req1("burst", &[("user", "idle")]))
            .await
            .unwrap_or_else(|e| panic!("call {i} after the restart: {e:?}"));
        assert_eq!(
            resp.statuses[0].limit_remaining,
            49 - i,
            "the restarted memcached counts from zero"
        );
    }
}
