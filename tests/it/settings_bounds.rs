//! Every duration and size setting, fed random text and extreme values: the reader either
//! accepts a value the service then works with, or refuses it naming the variable (exit 64 from
//! the binary). No value panics, none starts a service that cannot answer.

use std::collections::HashMap;

use proptest::prelude::*;
use turnstile::settings::{Settings, SettingsError};

use crate::process::{Process, command, loopback_env, rules_root};
use crate::support::{Memcached, missing, req1};

/// Duration settings, each with the backend it is read under.
const DURATIONS: &[(&str, &str)] = &[
    ("GRPC_REQUEST_TIMEOUT", "memory"),
    ("GRPC_IDLE_TIMEOUT", "memory"),
    ("GRPC_HANDSHAKE_TIMEOUT", "memory"),
    ("GRPC_MAX_CONNECTION_AGE", "memory"),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", "memory"),
    ("GRPC_FAIR_QUEUE_TARGET", "memory"),
    ("STATS_FLUSH_INTERVAL", "memory"),
    ("RLQS_ASSIGNMENT_TTL", "memory"),
    ("MEMCACHE_TIMEOUT", "memcache"),
    ("REDIS_TIMEOUT", "redis"),
    ("REDIS_PIPELINE_WINDOW", "redis"),
    ("REDIS_STARTUP_INITIAL_INTERVAL", "redis"),
    ("REDIS_STARTUP_MAX_INTERVAL", "redis"),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", "redis"),
    ("REDIS_PERSECOND_TIMEOUT", "redis-persecond"),
    ("MEMCACHE_SRV_REFRESH", "memcache-srv"),
];

/// Size and count settings, each with the backend it is read under.
const SIZES: &[(&str, &str)] = &[
    ("GRPC_MAX_CONNECTIONS", "memory"),
    ("GRPC_MAX_CONCURRENT_STREAMS", "memory"),
    ("GRPC_MAX_REQUESTS_IN_FLIGHT", "memory"),
    ("GRPC_MAX_HEADER_LIST_SIZE", "memory"),
    ("STATS_MAX_KEYS", "memory"),
    ("TOP_LIMITED_SERIES", "memory"),
    ("LOCAL_CACHE_SIZE_IN_BYTES", "memory"),
    ("SHUTDOWN_DRAIN_SECONDS", "memory"),
    ("MEMORY_MAX_KEYS", "memory"),
    ("RLQS_MAX_BUCKETS_PER_STREAM", "memory"),
    ("RLQS_MAX_BUCKET_ID_BYTES", "memory"),
    ("RLQS_MAX_BUCKET_BYTES", "memory"),
    ("EXPIRATION_JITTER_MAX_SECONDS", "memcache"),
    ("MEMCACHE_MAX_IDLE_CONNS", "memcache"),
    ("MEMCACHE_PIPELINED_CONNECTIONS", "memcache"),
    ("REDIS_POOL_SIZE", "redis"),
    ("REDIS_PERSECOND_POOL_SIZE", "redis-persecond"),
    ("GRPC_PORT", "ports"),
    ("PORT", "ports"),
    ("DEBUG_PORT", "ports"),
    ("STATSD_PORT", "statsd"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "tracing"),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "tracing"),
    ("OTEL_BSP_SCHEDULE_DELAY", "tracing"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "tracing"),
];

/// Values that have broken services before, or sit on a boundary.
const EXTREMES: &[&str] = &[
    "0",
    "1",
    "1ns",
    "1ms",
    "-1s",
    "1.5",
    "NaN",
    "1e400",
    "1h",
    "87600h",
    "87601h",
    "100000000000h",
    "4000000000000000h",
    "4000000000000000h4000000000000000h",
    "18446744073709551615",
    "18446744073709551616",
    "4294967295",
    "9223372036854775807",
    "400000000",
    "4096",
    "65536",
    "1000000",
];

/// The settings read with `name` set to `value`, under `backend` (or the variant of it that
/// reads `name`: a per-second Redis, memcached from DNS SRV, the statsd sink).
fn read(name: &str, backend: &str, value: &str) -> Result<Settings, SettingsError> {
    let mut env: HashMap<String, String> = HashMap::from([
        ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
        ("REDIS_URL".into(), "127.0.0.1:6379".into()),
        ("REDIS_PERSECOND_SOCKET_TYPE".into(), "tcp".into()),
        ("REDIS_PERSECOND_URL".into(), "127.0.0.1:6380".into()),
    ]);
    let (kind, extra) = match backend {
        "redis-persecond" => ("redis", ("REDIS_PERSECOND", "true")),
        "memcache-srv" => ("memcache", ("MEMCACHE_SRV", "_memcache._tcp.example")),
        "statsd" => ("memory", ("USE_STATSD", "true")),
        "tracing" => ("memory", ("TRACING_ENABLED", "true")),
        "memcache" => ("memcache", ("MEMCACHE_HOST_PORT", "127.0.0.1:11211")),
        "ports" => ("memory", ("", "")),
        other => (other, ("", "")),
    };
    env.insert("BACKEND_TYPE".into(), kind.into());
    env.insert(extra.0.into(), extra.1.into());
    env.insert(name.into(), value.into());
    Settings::from_env(&move |k| env.get(k).cloned(), None).map_err(|all| {
        all.single()
            .cloned()
            .unwrap_or_else(|| panic!("one problem expected: {all}"))
    })
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(EXTREMES).prop_map(str::to_owned),
        any::<u64>().prop_map(|n| n.to_string()),
        (
            any::<u64>(),
            proptest::sample::select(&["ns", "us", "ms", "s", "m", "h"][..])
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        "[0-9a-z.:µ -]{0,24}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_value_is_accepted_or_refused_by_name(
        index in 0..DURATIONS.len() + SIZES.len(),
        value in value_strategy(),
    ) {
        let (name, backend) = DURATIONS.iter().chain(SIZES).nth(index).copied().unwrap_or(("GRPC_PORT", "memory"));
        if let Err(e) = read(name, backend, &value) {
            prop_assert_eq!(&e.name, name, "{}", e);
        }
    }
}

/// The smallest and the largest of [`EXTREMES`] that the reader accepts for `name`.
fn accepted_extremes(name: &str, backend: &str) -> Vec<&'static str> {
    let mut accepted: Vec<&'static str> = EXTREMES
        .iter()
        .copied()
        .filter(|v| read(name, backend, v).is_ok())
        .collect();
    let key = |v: &&str| {
        turnstile::settings::parse_duration(v)
            .map_or(v.parse::<f64>().unwrap_or(0.0), |d| d.as_secs_f64())
    };
    accepted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    match (accepted.first(), accepted.last()) {
        (Some(low), Some(high)) => vec![*low, *high],
        _ => Vec::new(),
    }
}

/// Starts the service with every setting of `backend` at the smallest (then the largest) value
/// it accepts, and checks that it answers a call.
async fn serves_at_the_extremes(backend: &str, extra: &[(&str, String)]) {
    let root = rules_root(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
    );
    for end in [0, 1] {
        let mut env: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        env.push(("BACKEND_TYPE".into(), backend.into()));
        for (name, b) in DURATIONS.iter().chain(SIZES) {
            // Drain and header sizes of zero are fine; everything the backend reads is set.
            if *b == backend || *b == "memory" {
                let values = accepted_extremes(name, backend);
                let value = values
                    .get(end)
                    .unwrap_or_else(|| panic!("{name}: nothing accepted"));
                env.push(((*name).to_owned(), (*value).to_owned()));
            }
        }
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let p = Process::start(&root, &pairs);
        let mut client = p.client().await;
        let answer = client
            .should_rate_limit(req1("d", &[("k", "v")]))
            .await
            .unwrap_or_else(|s| {
                panic!(
                    "{backend} at its {} settings: {s}",
                    ["least", "greatest"][end]
                )
            });
        assert_eq!(answer.into_inner().statuses.len(), 1);
        p.stop().expect("stops");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_and_greatest_accepted_values_serve_on_memory() {
    serves_at_the_extremes("memory", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_and_greatest_accepted_values_serve_on_memcached() {
    let Some(memcached) = Memcached::start() else {
        return missing("memcached");
    };
    serves_at_the_extremes("memcache", &[("MEMCACHE_HOST_PORT", memcached.addr())]).await;
}

#[test]
fn overflowing_and_useless_values_exit_64_naming_the_variable() {
    let root = rules_root("domain: d\ndescriptors:\n  - key: k\n");
    for (name, value, backend) in [
        (
            "GRPC_REQUEST_TIMEOUT",
            "4000000000000000h4000000000000000h",
            "memory",
        ),
        ("GRPC_IDLE_TIMEOUT", "4000000000000000h", "memory"),
        ("GRPC_MAX_CONNECTION_AGE", "4000000000000000h", "memory"),
        ("RLQS_ASSIGNMENT_TTL", "100000000000h", "memory"),
        ("GRPC_MAX_HEADER_LIST_SIZE", "1", "memory"),
        ("MEMCACHE_TIMEOUT", "1ns", "memcache"),
        ("MEMCACHE_TIMEOUT", "0", "memcache"),
        (
            "EXPIRATION_JITTER_MAX_SECONDS",
            "18446744073709551615",
            "memcache",
        ),
        ("REDIS_TIMEOUT", "0", "redis"),
        ("REDIS_URL", "localhost:notaport", "redis"),
        ("REDIS_URL", "127.0.0.1:99999", "redis"),
        ("REDIS_URL", "redis://127.0.0.1:1/0", "redis"),
        ("REDIS_URL", ":::", "redis"),
        ("MEMCACHE_HOST_PORT", "localhost", "memcache"),
        ("MEMCACHE_HOST_PORT", "a:b:c", "memcache"),
    ] {
        let mut env = loopback_env(&root);
        env.push(("BACKEND_TYPE", backend.into()));
        env.push(("REDIS_SOCKET_TYPE", "tcp".into()));
        env.push(("REDIS_URL", "127.0.0.1:6379".into()));
        env.push(("MEMCACHE_HOST_PORT", "127.0.0.1:11211".into()));
        env.retain(|(k, _)| *k != name);
        env.push((name, value.into()));
        let out = command(&env).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{name}={value}: {stderr}");
        assert!(stderr.contains(name), "{name}={value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}={value}: {stderr}");
    }
}

#[test]
fn a_cluster_list_with_an_empty_entry_is_refused() {
    let env: HashMap<&str, &str> = HashMap::from([
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", "a:1,b:2,,"),
    ]);
    let e = Settings::from_env(&move |k| env.get(k).map(|v| (*v).to_owned()), None)
        .expect_err("an empty entry");
    let e = e.single().expect("one problem");
    assert_eq!(e.name, "REDIS_URL");
    assert!(e.problem.contains("empty"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_least_and_greatest_accepted_values_serve_on_redis() {
    let Some(redis) = crate::support::redis_server::RedisProcess::start() else {
        return missing("redis-server");
    };
    let env = [
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", redis.addr()),
    ];
    serves_at_the_extremes("redis", &env).await;
}
