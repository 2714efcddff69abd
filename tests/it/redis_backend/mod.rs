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

use crate::support::redis_server::{RedisProcess, cli, count_keys, redis_store};
use crate::support::{Options, req1, start_with, unique};

mod cluster;
mod pipe;
mod sentinel;

pub(crate) const RULES: &str = "domain: cut\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_and_turnstile_share_one_count() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
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
    let now = clock.now_secs();
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
    crate::support::wait::blocking(
        std::time::Duration::from_secs(20),
        "ready once Redis is up",
        || http_get(p.http, "/healthcheck").map(|r| r.0) == Some(200),
    );
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
    let clock = ManualClock::new(SystemClock.now_secs());
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
    let answered = crate::support::wait::until_some(
        std::time::Duration::from_secs(20),
        "recovery once Redis is back",
        || async {
            match s.try_call(request.clone()).await {
                Ok(response) => Some(response),
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                    None
                }
            }
        },
    )
    .await;
    // A fresh Redis (no persistence here): the count starts again, and goes on.
    assert_eq!(answered.statuses[0].limit_remaining, 4);
    assert_eq!(s.call(request).await.statuses[0].limit_remaining, 3);
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` on Redis, the reference's scenario: once
/// `key3` (10 an hour) would go over, only `key3` is incremented, so `key2` (20 a minute) in the
/// same request stays at 10 remaining. `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_when_over_limit_spares_the_other_descriptors() {
    use crate::process::{Process, rules_root};
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let root = rules_root(
        // key2 per hour (the reference's scenario has a minute, which a minute boundary during
        // the test would reset).
        "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n  - key: key3\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    );
    let url = redis.addr();
    let p = Process::start(
        &root,
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", url.as_str()),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ],
    );
    let mut client = p.client().await;
    let value = unique("r2");
    for i in 0..15u32 {
        let call = crate::support::another_pair(&value);
        let r = client
            .should_rate_limit(call)
            .await
            .expect("answer")
            .into_inner();
        let (key2, key3) = (&r.statuses[0], &r.statuses[1]);
        assert_eq!(key2.code, Code::Ok as i32, "call {i}");
        assert_eq!(
            key2.limit_remaining,
            if i < 10 { 19 - i } else { 10 },
            "call {i}"
        );
        if i < 10 {
            assert_eq!((key3.code, key3.limit_remaining), (Code::Ok as i32, 9 - i));
        } else {
            assert_eq!(
                (key3.code, key3.limit_remaining),
                (Code::OverLimit as i32, 0)
            );
            assert_eq!(r.overall_code, Code::OverLimit as i32);
        }
    }
    // The frozen counter holds 10 hits in Redis: key2 was not incremented past the stop.
    let keys = cli(redis.port, &["KEYS", &format!("another_key2_{value}_*")]).expect("keys");
    let key = keys
        .lines()
        .next()
        .expect("the key2 counter")
        .trim()
        .to_owned();
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("10".into())
    );
}

/// With the local over-limit cache as well: once `key3` is over and cached, a request that the
/// cache refuses increments nothing at all, so `key2` stays where the stop left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_with_the_local_cache_increments_nothing() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(crate::support::T0);
    let rules = "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: { unit: minute, requests_per_unit: 20 }\n  - key: key3\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    let options = Options {
        limiter: LimiterSettings {
            key_layout: KeyLayout::Reference,
            local_cache_bytes: 1_000_000,
            stop_increment_when_over_limit: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let s = start_with(store, clock, &[("another.yaml", rules)], options).await;
    let value = unique("r3");
    let call = || crate::support::another_pair(&value);
    let remaining: Vec<(u32, u32)> = {
        let mut out = Vec::new();
        for _ in 0..5 {
            let r = s.call(call()).await;
            out.push((r.statuses[0].limit_remaining, r.statuses[1].limit_remaining));
        }
        out
    };
    // Two fit; the third takes key3 over (and into the local cache) while key2 is only read;
    // afterwards the cache refuses key3 and key2 is read, never incremented.
    assert_eq!(remaining, vec![(19, 1), (18, 0), (18, 0), (18, 0), (18, 0)]);
    let keys = cli(redis.port, &["KEYS", &format!("another_key3_{value}_*")]).expect("keys");
    let key = keys
        .lines()
        .next()
        .expect("the key3 counter")
        .trim()
        .to_owned();
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("3".into()),
        "key3 counted up to the hit that took it over, then the cache answered"
    );
}

/// `REDIS_PERSECOND=true`: SECOND limits count in the second Redis, the others in the main one,
/// from one request; readiness needs both.
#[test]
fn per_second_limits_count_in_the_second_redis() {
    use crate::process::{Process, http_get, rules_root};
    let (Some(main), Some(mut second)) = (RedisProcess::start(), RedisProcess::start()) else {
        return;
    };
    let root = rules_root(
        "domain: split\ndescriptors:\n  - key: burst\n    rate_limit: { unit: second, requests_per_unit: 100 }\n  - key: daily\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n",
    );
    let (main_url, second_url) = (main.addr(), second.addr());
    let mut env = crate::support::redis_server::per_second_env(&main_url, &second_url);
    env.extend([
        ("REDIS_TIMEOUT", "300ms"),
        ("REDIS_PERSECOND_TIMEOUT", "300ms"),
    ]);
    let p = Process::start(&root, &env);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let value = unique("v");
    let answer = runtime.block_on(async {
        let call = crate::support::req(
            "split",
            vec![
                crate::support::desc(&[("burst", &value)]),
                crate::support::desc(&[("daily", &value)]),
            ],
        );
        p.client().await.should_rate_limit(call).await
    });
    let answer = answer.expect("answer").into_inner();
    assert_eq!(
        (
            answer.statuses[0].limit_remaining,
            answer.statuses[1].limit_remaining
        ),
        (99, 99)
    );
    let keys = |port: u16, key: &str| count_keys(port, &format!("split_{key}_{value}_*"));
    assert_eq!(
        keys(second.port, "burst"),
        Some(1),
        "the SECOND counter is in the second Redis"
    );
    assert_eq!(keys(main.port, "burst"), Some(0));
    assert_eq!(
        keys(main.port, "daily"),
        Some(1),
        "the MINUTE counter is in the main Redis"
    );
    assert_eq!(keys(second.port, "daily"), Some(0));
    // Readiness needs both: without the per-second Redis the service is not ready.
    second.kill();
    crate::support::envoy::wait_for("not ready without the per-second Redis", || {
        http_get(p.http, "/healthcheck").map(|r| r.0) != Some(200)
    });
}
