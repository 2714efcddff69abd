//! Every setting envoyproxy/ratelimit reads is read by Turnstile too: the 114 names of the
//! reference's `src/settings/settings.go` (at f2fb157, 2026-07-05), each asked for by
//! `Settings::from_env` in one of a few environments that switch every feature on (the names a
//! feature reads are asked only when it is on). A name Turnstile deliberately ignores would be
//! listed in docs/compatibility.md and below; there is none.

use std::cell::RefCell;
use std::collections::BTreeSet;

use turnstile::settings::Settings;

/// `envconfig:"…"` of every field of the reference's settings.
const REFERENCE: [&str; 114] = [
    "BACKEND_TYPE",
    "CACHE_KEY_PREFIX",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_TYPE",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "DISABLE_STATS",
    "EXPIRATION_JITTER_MAX_SECONDS",
    "EXTRA_TAGS",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "GRPC_HOST",
    "GRPC_MAX_CONNECTION_AGE",
    "GRPC_MAX_CONNECTION_AGE_GRACE",
    "GRPC_PORT",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_SERVER_USE_TLS",
    "GRPC_UDS",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "HOST",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "MEMCACHE_HOST_PORT",
    "MEMCACHE_MAX_IDLE_CONNS",
    "MEMCACHE_SRV",
    "MEMCACHE_SRV_REFRESH",
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
    "MERGE_DOMAIN_CONFIG",
    "NEAR_LIMIT_RATIO",
    "PORT",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_PATH",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "QUOTA_MODE",
    "REDIS_AUTH",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_PERSECOND",
    "REDIS_PERSECOND_AUTH",
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
    "REDIS_PERSECOND_PIPELINE_LIMIT",
    "REDIS_PERSECOND_PIPELINE_WINDOW",
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_PERSECOND_POOL_SIZE",
    "REDIS_PERSECOND_SENTINEL_AUTH",
    "REDIS_PERSECOND_SOCKET_TYPE",
    "REDIS_PERSECOND_TIMEOUT",
    "REDIS_PERSECOND_TLS",
    "REDIS_PERSECOND_TYPE",
    "REDIS_PERSECOND_URL",
    "REDIS_PIPELINE_LIMIT",
    "REDIS_PIPELINE_WINDOW",
    "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_POOL_SIZE",
    "REDIS_SENTINEL_AUTH",
    "REDIS_SOCKET_TYPE",
    "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_TIMEOUT",
    "REDIS_TLS",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_TYPE",
    "REDIS_URL",
    "RESPONSE_DYNAMIC_METADATA",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_WATCH_ROOT",
    "SHADOW_MODE",
    "STATSD_HOST",
    "STATSD_PORT",
    "STATS_FLUSH_INTERVAL",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "TRACING_ENABLED",
    "TRACING_EXPORTER_PROTOCOL",
    "TRACING_SAMPLING_RATE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS",
    "USE_PROMETHEUS",
    "USE_STATSD",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
];

/// Features on in every environment; the backend's, the rules' source's and the stats sink's
/// own settings are added per environment (one stats sink at a time).
const EVERY_FEATURE: &[(&str, &str)] = &[
    ("GRPC_SERVER_USE_TLS", "true"),
    ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
    ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
    ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
    ("TRACING_ENABLED", "true"),
    ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
];

const ENVIRONMENTS: &[&[(&str, &str)]] = &[
    &[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_TLS", "true"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TLS", "true"),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("USE_STATSD", "true"),
        ("USE_PROMETHEUS", "true"),
    ],
    &[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "primary,127.0.0.1:26379"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TYPE", "sentinel"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "primary,127.0.0.1:26380"),
        ("USE_DOG_STATSD", "true"),
    ],
    &[
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_SRV", "_memcache._tcp.example"),
        ("MEMCACHE_TLS", "true"),
    ],
];

/// The names `Settings::from_env` asks for in `env` (whether or not the settings are valid).
fn asked(env: &[(&str, &str)]) -> BTreeSet<String> {
    let names = RefCell::new(BTreeSet::new());
    let lookup = |name: &str| {
        names.borrow_mut().insert(name.to_owned());
        EVERY_FEATURE
            .iter()
            .chain(env)
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    let _ = Settings::from_env(&lookup, None);
    names.into_inner()
}

#[test]
fn every_setting_the_reference_reads_is_read() {
    let read: BTreeSet<String> = ENVIRONMENTS.iter().flat_map(|env| asked(env)).collect();
    let unread: Vec<&str> = REFERENCE
        .iter()
        .copied()
        .filter(|name| !read.contains(*name))
        .collect();
    assert_eq!(
        unread,
        Vec::<&str>::new(),
        "settings of the reference not read"
    );
    let distinct: BTreeSet<&str> = REFERENCE.iter().copied().collect();
    assert_eq!(distinct.len(), 114, "the reference's names, each once");
}
