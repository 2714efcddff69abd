//! Settings from a map instead of the process environment.

use super::*;
use std::collections::HashMap;

mod tls;

/// Settings from `pairs`; the one problem when they cannot be used.
pub(super) fn with(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    Settings::from_env(&move |k| map.get(k).cloned(), None).map_err(|all| {
        all.single()
            .cloned()
            .unwrap_or_else(|| panic!("one problem expected: {all}"))
    })
}

#[test]
fn defaults_match_the_reference() {
    let s = with(&[]).expect("defaults");
    assert_eq!((s.grpc_host.as_str(), s.grpc_port), ("0.0.0.0", 8081));
    assert_eq!(
        s.config_dir,
        PathBuf::from("/srv/runtime_data/current/config")
    );
    assert_eq!(
        s.backend,
        Backend::Memory {
            max_keys: 1_000_000
        }
    );
    assert_eq!(s.response, ResponseSettings::default());
    let on = with(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]).expect("headers");
    let names = on.response.headers.expect("headers on");
    assert_eq!(names.limit, "RateLimit-Limit");
    assert_eq!(s.limiter.key_layout, KeyLayout::Turnstile);
    assert!(!s.limiter.shadow_mode);
    assert_eq!(
        s.limiter.on_store_failure,
        crate::limiter::StoreFailure::Unavailable
    );
    assert_eq!(s.limiter.local_replicas, None);
    let m = with(&[
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", "a:1, b:2"),
    ])
    .expect("memcached");
    let Backend::Memcached(m) = m.backend else {
        panic!("memcached backend expected");
    };
    assert_eq!(m.client.jitter_max_seconds, 300);
    assert_eq!(m.client.timeout, Duration::from_millis(100));
    assert_eq!(m.client.transport, MemcachedTransport::Pipelined);
    assert_eq!(
        m.servers,
        MemcachedServers::List(vec!["a:1".into(), "b:2".into()])
    );
    assert_eq!(m.tls, None);
}

#[test]
fn pipelined_memcached_connections_are_the_runtime_s_unless_set() {
    let memcached = |extra: &[(&str, &str)]| {
        let mut pairs = vec![("BACKEND_TYPE", "memcache"), ("MEMCACHE_HOST_PORT", "a:1")];
        pairs.extend_from_slice(extra);
        with(&pairs).map(|s| match s.backend {
            Backend::Memcached(m) => m
                .client
                .pipelined_connections
                .map(std::num::NonZeroUsize::get),
            other => panic!("memcached backend expected, got {other:?}"),
        })
    };
    assert_eq!(memcached(&[]).expect("unset"), None);
    assert_eq!(
        memcached(&[("MEMCACHE_PIPELINED_CONNECTIONS", "")]).expect("empty"),
        None
    );
    let three = [("MEMCACHE_PIPELINED_CONNECTIONS", " 3 ")];
    assert_eq!(memcached(&three).expect("three"), Some(3));
    for bad in ["0", "257", "two"] {
        let e = memcached(&[("MEMCACHE_PIPELINED_CONNECTIONS", bad)]).expect_err(bad);
        assert_eq!(e.name, "MEMCACHE_PIPELINED_CONNECTIONS");
        assert!(e.to_string().contains("from 1 to 256"), "{e}");
    }
}

#[test]
fn runtime_directories_compose() {
    let s = with(&[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ])
    .expect("ok");
    assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
}

#[test]
fn bad_values_name_the_setting() {
    let e = with(&[("GRPC_PORT", "80x")]).expect_err("bad port");
    assert_eq!(e.name, "GRPC_PORT");
    let e = with(&[("SHADOW_MODE", "yes")]).expect_err("bad bool");
    assert_eq!(e.name, "SHADOW_MODE");
    let e = with(&[("BACKEND_TYPE", "memcache")]).expect_err("no servers");
    assert_eq!(e.name, "MEMCACHE_HOST_PORT");
}

#[test]
fn every_bad_setting_is_named_at_once() {
    let map: HashMap<&str, &str> = HashMap::from([
        ("GRPC_PORT", "80x"),
        ("SHADOW_MODE", "yes"),
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "localhost:6379"),
        ("REDIS_TIMEOUT", "soon"),
        ("REDIS_KEY_LAYOUT", "mine"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "localhost:0"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MIN", "0"),
        ("NEAR_LIMIT_RATIO", "2"),
        ("TRACING_ENABLED", "true"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "many"),
    ]);
    let all = Settings::from_env(&|k| map.get(k).map(|v| (*v).to_owned()), None)
        .expect_err("eight bad settings");
    let mut names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "GRPC_ADAPTIVE_CONCURRENCY_MIN",
            "GRPC_PORT",
            "NEAR_LIMIT_RATIO",
            "OTEL_BSP_MAX_QUEUE_SIZE",
            "REDIS_KEY_LAYOUT",
            "REDIS_PERSECOND_URL",
            "REDIS_TIMEOUT",
            "SHADOW_MODE",
        ],
        "{all}"
    );
    let text = all.to_string();
    assert!(text.starts_with("8 invalid settings:"), "{text}");
    assert!(text.contains("invalid setting GRPC_PORT=\"80x\""), "{text}");
    assert!(all.single().is_none());
}

#[test]
fn go_durations() {
    assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("10"), None);
}

/// Exactly what Envoy Gateway's rate-limit Deployment sets (its Redis and TLS file paths):
/// nothing refused, rules over xDS with mutual TLS, counting in Redis although `BACKEND_TYPE`
/// is unset (the reference's default is Redis).
#[test]
fn the_envoy_gateway_environment_is_taken_as_it_is() {
    let s = with(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", ":19001"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.redis-system.svc.cluster.local:6379"),
        ("TRACING_ENABLED", "false"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector:4318"),
    ])
    .expect("Envoy Gateway's environment");
    let ConfigSource::Xds(xds) = &s.config_source else {
        panic!("rules over xDS expected");
    };
    assert_eq!(xds.server, "envoy-gateway:18001");
    assert_eq!(xds.node_id, "envoy-ratelimit");
    let tls = xds.tls.as_ref().expect("TLS to the control plane");
    assert_eq!(
        tls.client_cert,
        Some((
            PathBuf::from("/certs/tls.crt"),
            PathBuf::from("/certs/tls.key")
        ))
    );
    assert!(s.force_start_without_config);
    assert!(s.tls.is_some(), "gRPC server TLS");
    assert!(matches!(s.backend, Backend::Redis(_)), "{:?}", s.backend);
    assert_eq!(
        s.prometheus.as_ref().map(|p| p.addr.as_str()),
        Some("0.0.0.0:19001")
    );
}

#[test]
fn xds_settings_have_the_references_defaults_and_name_bad_values() {
    let s = with(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).expect("defaults");
    let ConfigSource::Xds(xds) = s.config_source else {
        panic!("xDS expected");
    };
    assert_eq!(
        (xds.server.as_str(), xds.node_id.as_str()),
        ("localhost:18000", "default")
    );
    assert_eq!(xds.backoff.initial, Duration::from_secs(10));
    assert_eq!(xds.backoff.max, Duration::from_secs(60));
    assert_eq!(xds.backoff.stream_retry, Duration::from_secs(3));
    assert!(xds.backoff.jitter && xds.backoff.random_factor == 0.5);
    assert_eq!(xds.max_message_bytes, 4 << 20);
    assert!(xds.tls.is_none());
    assert!(
        matches!(s.backend, Backend::Memory { .. }),
        "no REDIS_URL: memory"
    );
    for (name, value) in [
        ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "no-port"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "Bad Name:v"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s"),
    ] {
        let e = with(&[("CONFIG_TYPE", "GRPC_XDS_SOTW"), (name, value)]).expect_err(name);
        assert_eq!(e.name, name, "{e}");
    }
    let e = with(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem"),
    ])
    .expect_err("a certificate without its key");
    assert_eq!(e.name, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
}

#[test]
fn the_adaptive_concurrency_limit_is_off_by_default_and_its_bounds_are_checked() {
    let d = with(&[]).expect("defaults").grpc_limits.adaptive;
    assert_eq!(d, AdaptiveConcurrency::default());
    assert!(!d.enabled);
    assert_eq!((d.min, d.max, d.max_wait), (16, 4_096, None));
    let on = with(&[
        ("GRPC_ADAPTIVE_CONCURRENCY", "true"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MIN", "8"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MAX", "512"),
        ("GRPC_ADAPTIVE_CONCURRENCY_TOLERANCE", "2ms"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MAX_WAIT", "0"),
    ])
    .expect("on")
    .grpc_limits
    .adaptive;
    assert_eq!(
        on,
        AdaptiveConcurrency {
            enabled: true,
            min: 8,
            max: 512,
            tolerance: std::time::Duration::from_millis(2),
            max_wait: Some(std::time::Duration::ZERO),
        }
    );
    // A minimum above the default maximum raises the maximum with it.
    let min_only = with(&[("GRPC_ADAPTIVE_CONCURRENCY_MIN", "10000")]).expect("min");
    assert_eq!(min_only.grpc_limits.adaptive.max, 10_000);
    for (name, value) in [
        ("GRPC_ADAPTIVE_CONCURRENCY_MAX", "8"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MIN", "0"),
        ("GRPC_ADAPTIVE_CONCURRENCY_TOLERANCE", "0"),
        ("GRPC_ADAPTIVE_CONCURRENCY_MAX_WAIT", "1h"),
        ("GRPC_ADAPTIVE_CONCURRENCY", "sometimes"),
    ] {
        let e = with(&[(name, value)]).expect_err(value);
        assert_eq!(e.name, name, "{e}");
    }
}

#[test]
fn the_grpc_limits_defaults_are_written_once() {
    let limits = with(&[]).expect("defaults").grpc_limits;
    assert_eq!(limits, GrpcLimits::default());
    assert_eq!(
        (limits.max_requests_in_flight, limits.max_header_list_size),
        (16_384, 65_536)
    );
}

#[test]
fn the_store_failure_mode_is_named_or_the_reference_s_fail_open() {
    use crate::limiter::StoreFailure;
    let mode = |pairs: &[(&str, &str)]| with(pairs).map(|s| s.limiter.on_store_failure);
    assert_eq!(
        mode(&[("BACKEND_FAIL_OPEN", "true")]),
        Ok(StoreFailure::Open)
    );
    assert_eq!(
        mode(&[("BACKEND_FAILURE_MODE", "local")]),
        Ok(StoreFailure::Local)
    );
    assert_eq!(
        mode(&[
            ("BACKEND_FAILURE_MODE", "open"),
            ("BACKEND_FAIL_OPEN", "true")
        ]),
        Ok(StoreFailure::Open)
    );
    let clash = mode(&[
        ("BACKEND_FAILURE_MODE", "local"),
        ("BACKEND_FAIL_OPEN", "true"),
    ]);
    let clash = clash.expect_err("two modes").to_string();
    assert!(clash.contains("BACKEND_FAIL_OPEN=true means"), "{clash}");
    let unknown = mode(&[("BACKEND_FAILURE_MODE", "closed")]).expect_err("unknown");
    assert!(
        unknown
            .to_string()
            .contains("one of unavailable, open, local"),
        "{unknown}"
    );
    let pinned = with(&[("BACKEND_LOCAL_REPLICAS", "3")]).expect("pinned");
    assert_eq!(pinned.limiter.local_replicas.map(|n| n.get()), Some(3));
}
