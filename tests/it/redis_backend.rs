//! The Redis backend as a service: a cut-over from envoyproxy/ratelimit on one Redis, starting
//! without Redis, and Redis dying and coming back under a running service.
//!
//! A cut-over: with the default key layout Turnstile
//! counts fixed-window hits in the reference's key (`domain_key_value_<window start>`, the value
//! an INCRBY'd decimal, a TTL on every key), so hits counted by the reference (replayed here
//! with the commands it sends: INCRBY then EXPIRE) and by Turnstile are one count.

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::limiter::{KeyLayout, LimiterSettings};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::storage::redis::RedisTarget;

use crate::redis_support::{RedisProcess, cli, redis_store};
use crate::support::{Options, req1, start_with, unique};

const RULES: &str = "domain: cut\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_and_turnstile_share_one_count() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let options = Options::from(LimiterSettings {
        key_prefix: "rl_".into(),
        key_layout: KeyLayout::Reference,
        ..Default::default()
    });
    let s = start_with(store, clock.clone(), &[("cut.yaml", RULES)], options).await;
    let user = unique("u");
    let request = req1("cut", &[("user", &user)]);
    assert_eq!(s.call(request.clone()).await.statuses[0].limit_remaining, 4);

    // The reference's key for this window, and the reference's own commands for 3 more hits.
    let now = clock.now();
    let key = format!("rl_cut_user_{user}_{}", now - now % 60);
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("1".into())
    );
    let ttl: i64 = cli(redis.port, &["TTL", &key])
        .and_then(|t| t.trim().parse().ok())
        .expect("ttl");
    assert!(
        ttl > 0 && ttl <= 61,
        "the counter has its window's TTL: {ttl}"
    );
    cli(redis.port, &["INCRBY", &key, "3"]).expect("incrby");
    cli(redis.port, &["EXPIRE", &key, "60"]).expect("expire");

    let response = s.call(request.clone()).await;
    assert_eq!(
        response.statuses[0].limit_remaining, 0,
        "1 + 3 by the reference + this one = 5"
    );
    assert_eq!(s.call(request).await.overall_code(), Code::OverLimit);
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("6".into())
    );
}

/// Redis absent at start: the service starts anyway (no crash loop), reports not ready and
/// answers UNAVAILABLE naming Redis; once Redis appears it connects, turns ready and counts,
/// without a restart.
#[test]
fn starts_without_redis_and_connects_when_it_appears() {
    use crate::process::{Process, http_get, rules_root};
    let port = crate::support::free_port();
    let url = format!("127.0.0.1:{port}");
    let root = rules_root(RULES);
    let env = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_TIMEOUT", "200ms"),
    ];
    let p = Process::spawn(&root, &env);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let call = || {
        runtime.block_on(async {
            crate::support::connect(p.grpc)
                .await
                .should_rate_limit(req1("cut", &[("user", "early")]))
                .await
        })
    };
    let refused = call().expect_err("no Redis yet");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("redis"), "{}", refused.message());
    let status = http_get(p.http, "/healthcheck").map(|r| r.0);
    assert_ne!(status, Some(200), "not ready without Redis");

    let _redis = RedisProcess::start_on(port).expect("redis-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while http_get(p.http, "/healthcheck").map(|r| r.0) != Some(200) {
        assert!(
            std::time::Instant::now() < deadline,
            "ready once Redis is up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let answered = call().expect("answered once Redis is up").into_inner();
    assert_eq!(answered.statuses[0].limit_remaining, 4);
    drop(runtime);
    p.stop().expect("stops cleanly");
}

/// Redis killed under a running service: calls fail with UNAVAILABLE naming Redis (never an OK
/// that was not counted), readiness drops, and when Redis is back on its address the same
/// service counts again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_redis_dying_and_coming_back() {
    let Some(mut redis) = RedisProcess::start() else {
        return;
    };
    let port = redis.port;
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let request = req1("cut", &[("user", &unique("fault"))]);
    assert_eq!(s.call(request.clone()).await.statuses[0].limit_remaining, 4);
    redis.kill();
    let refused = s
        .try_call(request.clone())
        .await
        .expect_err("Redis is down");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("redis"), "{}", refused.message());
    let _back = RedisProcess::start_on(port).expect("redis-server again");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let answered = loop {
        match s.try_call(request.clone()).await {
            Ok(response) => break response,
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                assert!(std::time::Instant::now() < deadline, "no recovery: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    // A fresh Redis (no persistence here): the count starts again, and goes on.
    assert_eq!(answered.statuses[0].limit_remaining, 4);
    assert_eq!(s.call(request).await.statuses[0].limit_remaining, 3);
}
