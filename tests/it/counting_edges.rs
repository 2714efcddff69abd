//! Counting at the edges, through the gRPC edge, on the backends where each once went wrong:
//! windows whose counters outlive 2038-01-19 count on memcached as in memory; a `hits_addend`
//! up to 2^64 - 1 saturates (never wraps, never fails) on memory, memcached and Redis; and a
//! token bucket Redis cannot count exactly is refused when the rules load, with words; so are
//! the token buckets and concurrency limits memcached's classic commands cannot count.

use std::time::Duration;

use turnstile::app::Store;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::config::{LoadOptions, StoreBounds, parse_files};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::storage::memory::MemoryStore;
use turnstile::storage::redis::{RedisTarget, TOKEN_BUCKET_MAX_SCALE};

use crate::process::{command, loopback_env, rules_root};
use crate::support::redis_server::{RedisProcess, redis_store};
use crate::support::{
    Memcached, Options, TestServer, desc, memcached_store, missing, req, start_with, unique,
};

const LONG: &str = "\
domain: long
descriptors:
  - key: sliding
    rate_limit: { unit: year, unit_multiplier: 7, requests_per_unit: 5, algorithm: sliding_window }
  - key: yearly_bucket
    rate_limit: { unit: year, requests_per_unit: 1, algorithm: token_bucket, burst: 20 }
  - key: monthly_bucket
    rate_limit: { unit: month, requests_per_unit: 1, algorithm: token_bucket, burst: 1000 }
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
";

/// The codes of `n` calls of `{key: value}`, each with `hits` hits (0: one).
async fn codes(s: &TestServer, key: &str, value: &str, hits: u64, n: usize) -> Vec<Code> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut d = desc(&[(key, value)]);
        d.hits_addend = (hits > 0).then_some(hits);
        let answer = s.call(req("long", vec![d])).await;
        out.push(answer.statuses[0].code());
    }
    out
}

fn admitted(codes: &[Code]) -> usize {
    codes.iter().filter(|c| **c == Code::Ok).count()
}

/// The reproductions of windows that outlive 2038, on one server.
async fn long_windows(s: &TestServer) -> [usize; 3] {
    let value = unique("v");
    [
        admitted(&codes(s, "sliding", &value, 0, 8).await),
        admitted(&codes(s, "yearly_bucket", &value, 0, 25).await),
        admitted(&codes(s, "monthly_bucket", &value, 1000, 4).await),
    ]
}

async fn server(store: impl Into<Store>, clock: ManualClock) -> TestServer {
    start_with(store, clock, &[("long.yaml", LONG)], Options::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_that_outlive_2038_count_on_memcached_as_in_memory() {
    let Some(mc) = Memcached::start() else {
        return missing("memcached");
    };
    // memcached reads absolute expiries with its own clock: the service's is the real one.
    let clock = ManualClock::new(SystemClock.now_secs());
    let memory = MemoryStore::new(10_000, std::sync::Arc::new(clock.clone()));
    let in_memory = long_windows(&server(memory, clock.clone()).await).await;
    assert_eq!(
        in_memory,
        [5, 21, 1],
        "sliding 5 of 8, bucket 21 of 25, 1 of 4 x 1000"
    );
    let store = memcached_store(&[&mc], &clock, Duration::from_millis(500));
    let on_memcached = long_windows(&server(store, clock).await).await;
    assert_eq!(on_memcached, in_memory);
}

/// 11 hits of a 10-an-hour limit, then one of 2^64 - 11 hits, then 10 more: every answer from
/// the 11th on is OVER_LIMIT, and a fresh key with 2^63 - 1 hits at once is OVER_LIMIT.
async fn huge_hits_saturate(s: &TestServer) {
    let user = unique("u");
    let first = codes(s, "user", &user, 0, 11).await;
    assert_eq!(admitted(&first), 10);
    let huge = codes(s, "user", &user, u64::MAX - 10, 1).await;
    assert_eq!(huge, [Code::OverLimit], "a huge hit is over, not wrapped");
    let after = codes(s, "user", &user, 0, 10).await;
    assert_eq!(after, [Code::OverLimit; 10], "the count did not wrap");
    let other = unique("u");
    assert_eq!(
        codes(s, "user", &other, (1 << 63) - 1, 1).await,
        [Code::OverLimit]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_hits_addend_saturates_on_memory() {
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = MemoryStore::new(10_000, std::sync::Arc::new(clock.clone()));
    huge_hits_saturate(&server(store, clock).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_hits_addend_saturates_on_memcached() {
    let Some(mc) = Memcached::start() else {
        return missing("memcached");
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = memcached_store(&[&mc], &clock, Duration::from_millis(500));
    huge_hits_saturate(&server(store, clock).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_hits_addend_saturates_on_redis() {
    let Some(redis) = RedisProcess::start() else {
        return missing("redis-server");
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    huge_hits_saturate(&server(store, clock).await).await;
}

const WIDE_BUCKET: &str = "\
domain: wide
descriptors:
  - key: k
    rate_limit:
      unit: day
      requests_per_unit: 4294967295
      algorithm: token_bucket
      burst: 4294967295
";

/// `turnstile check-config DIR` with `env`: its exit code and its error output.
fn check_config(env: &[(&str, String)], dir: &std::path::Path) -> (Option<i32>, String) {
    let out = command(env)
        .arg("check-config")
        .arg(dir)
        .output()
        .expect("check-config");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_token_bucket_redis_cannot_count_is_refused_at_load_for_redis_only() {
    let files = [("wide.yaml".to_owned(), WIDE_BUCKET.to_owned())];
    parse_files(&files, LoadOptions::default()).expect("memory and memcached count it");
    let redis = LoadOptions {
        store: StoreBounds {
            name: "BACKEND_TYPE=redis",
            bucket_capacity_period_ms: Some(TOKEN_BUCKET_MAX_SCALE),
            windows_only: false,
        },
        ..Default::default()
    };
    let errors = parse_files(&files, redis)
        .expect_err("Redis cannot")
        .to_string();
    assert!(
        errors.contains("wide.yaml:8:14: descriptors[0].rate_limit.burst:")
            && errors.contains("BACKEND_TYPE=redis")
            && errors.contains("8589934590"),
        "{errors}"
    );
    // check-config says so with the environment's BACKEND_TYPE, and the service will not
    // start on such rules (exit 78, the configuration's code).
    let root = rules_root(WIDE_BUCKET);
    let dir = root.join("ratelimit/config");
    let (code, stderr) = check_config(&[("BACKEND_TYPE", "redis".into())], &dir);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("BACKEND_TYPE=redis"), "{stderr}");
    let (code, stderr) = check_config(&[], &dir);
    assert_eq!(code, Some(0), "the memory backend counts it: {stderr}");
    let mut env = loopback_env(&root);
    env.extend([
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", "127.0.0.1:6379".to_owned()),
    ]);
    let out = command(&env).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("BACKEND_TYPE=redis"), "{stderr}");
}

const NEEDS_CAS: &str = "\
domain: classic
descriptors:
  - key: window
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: bucket
    rate_limit:
      unit: second
      requests_per_unit: 5
      algorithm: token_bucket
  - key: in_flight
    rate_limit: { unit: second, requests_per_unit: 2, algorithm: concurrency }
";

#[test]
fn rules_classic_memcached_cannot_count_are_refused_at_load_and_by_check_config() {
    let root = rules_root(NEEDS_CAS);
    let dir = root.join("ratelimit/config");
    let classic = [
        ("BACKEND_TYPE", "memcache".to_owned()),
        ("MEMCACHE_CLASSIC_PROTOCOL", "true".to_owned()),
    ];
    let (code, stderr) = check_config(&classic, &dir);
    assert_eq!(code, Some(1), "{stderr}");
    for named in [
        "descriptors[1].rate_limit.algorithm:",
        "descriptors[2].rate_limit.algorithm:",
        "MEMCACHE_CLASSIC_PROTOCOL=true",
    ] {
        assert!(stderr.contains(named), "{named} in {stderr}");
    }
    assert!(
        !stderr.contains("descriptors[0]"),
        "a fixed window is counted: {stderr}"
    );
    // Meta commands (the default) count all three.
    let meta = [("BACKEND_TYPE", "memcache".to_owned())];
    let (code, stderr) = check_config(&meta, &dir);
    assert_eq!(code, Some(0), "{stderr}");
    // The service refuses to start on them (exit 78), before it dials memcached.
    let mut env = loopback_env(&root);
    env.extend(classic);
    env.push(("MEMCACHE_HOST_PORT", "127.0.0.1:1".to_owned()));
    let out = command(&env).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("MEMCACHE_CLASSIC_PROTOCOL=true"),
        "{stderr}"
    );
}
