//! Process settings, read once at start-up from the environment (the reference's names and
//! defaults) plus a few command-line flags, and validated. The environment is read through a
//! function so tests inject a map instead of mutating the process environment.
//!
//! Must not touch: anything but the option types of `limiter` and `storage` it builds
//! directly (the layer map in `lib.rs`).

mod address;
mod backend;
mod decision;
mod error;
mod grpc;
mod postgres;
mod reader;
mod redis;
mod rlqs;
mod stats;
mod tracing;
mod xds;

pub use backend::{
    Backend, MemcachedClient, MemcachedServers, MemcachedSettings, MemcachedTls,
    MemcachedTransport, backend_type, memcached_classic_protocol,
};
pub use decision::{LimiterSettings, ResponseSettings};
pub use error::{SettingsError, SettingsErrors};
pub use grpc::{AdaptiveConcurrency, ConnectionAge, GrpcLimits, TlsSettings};
pub use postgres::{PostgresRoute, PostgresSettings};
pub use redis::{KeyLayout, RedisAuth, RedisSettings, RedisTarget, RedisTls};
pub use rlqs::{RlqsSettings, Unmatched};
pub use stats::{DogStatsd, Mogrifier};
pub use tracing::{OtlpProtocol, TracingSettings};
pub use xds::{ConfigSource, DEFAULT_MAX_MESSAGE_BYTES, XdsBackoff, XdsSettings, XdsTls};

pub use reader::parse_duration;
use reader::{LONGEST, Reader, Span, err};

use std::path::PathBuf;
use std::time::Duration;

/// The names of the `RateLimit-*` response headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// `LIMIT_LIMIT_HEADER`.
    pub limit: String,
    /// `LIMIT_REMAINING_HEADER`.
    pub remaining: String,
    /// `LIMIT_RESET_HEADER`.
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// The Prometheus listener (`USE_PROMETHEUS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prometheus {
    /// `PROMETHEUS_ADDR` (`:9090` means every interface).
    pub addr: String,
    /// `PROMETHEUS_PATH`.
    pub path: String,
}

/// Every process setting.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `GRPC_HOST`.
    pub grpc_host: String,
    /// `GRPC_PORT`.
    pub grpc_port: u16,
    /// `GRPC_UDS`: serve gRPC on this Unix socket instead of `GRPC_HOST:GRPC_PORT`.
    pub grpc_uds: Option<PathBuf>,
    /// The directory of rule files: `--config-dir`, or
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub config_dir: PathBuf,
    /// `CONFIG_TYPE`: rule files (`FILE`) or rules over xDS (`GRPC_XDS_SOTW`).
    pub config_source: ConfigSource,
    /// `RUNTIME_IGNOREDOTFILES`.
    pub ignore_dotfiles: bool,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: start even when the first load fails (files), or
    /// serve before the first rules arrive (xDS).
    pub force_start_without_config: bool,
    /// `BACKEND_TYPE` and its backend's settings.
    pub backend: Backend,
    /// `POSTGRES_URL` with `POSTGRES_FROM_UNIT` beside another backend: long windows counted
    /// in PostgreSQL.
    pub postgres_route: Option<PostgresRoute>,
    /// The limiter's options: key prefix, shadow and quota modes, failing open, the local
    /// over-limit cache, the key layout, stopping increments over the limit.
    pub limiter: LimiterSettings,
    /// What responses carry beyond the statuses (headers, dynamic metadata).
    pub response: ResponseSettings,
    /// `LOG_LEVEL`.
    pub log_level: String,
    /// `LOG_FORMAT` is `json`.
    pub log_json: bool,
    /// `HOST` and `PORT`: the HTTP listener (`/healthcheck`, `/json`).
    pub http_addr: String,
    /// `DEBUG_HOST` and `DEBUG_PORT`: the debug listener (`/rlconfig`, `/metrics`).
    pub debug_addr: String,
    /// `USE_PROMETHEUS`: serve `PROMETHEUS_PATH` on `PROMETHEUS_ADDR`.
    pub prometheus: Option<Prometheus>,
    /// `ADMIN_TOKEN_FILE`: a file holding the bearer token `/counters` requires.
    pub admin_token_file: Option<PathBuf>,
    /// `PROMETHEUS_MAPPER_YAML`: a statsd_exporter mapping file naming the reference's series.
    pub prometheus_mapper: Option<PathBuf>,
    /// `USE_STATSD`: push counters to `STATSD_HOST:STATSD_PORT` (UDP).
    pub statsd: Option<String>,
    /// `USE_DOG_STATSD`: push counters to `STATSD_HOST:STATSD_PORT` in DogStatsD's format.
    pub dogstatsd: Option<DogStatsd>,
    /// `DISABLE_STATS`: no per-descriptor stats are counted and no sink is started.
    pub disable_stats: bool,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: the response-time histogram in ms.
    pub response_time_ms: bool,
    /// `TRACING_ENABLED` with the exporter's settings.
    pub tracing: Option<TracingSettings>,
    /// `STATS_FLUSH_INTERVAL`: how often statsd counters are pushed.
    pub stats_flush: Duration,
    /// `EXTRA_TAGS` (`k:v,k2:v2`): labels on every metric.
    pub extra_tags: Vec<(String, String)>,
    /// `NEAR_LIMIT_RATIO`.
    pub near_limit_ratio: f64,
    /// `STATS_MAX_KEYS`: bound on distinct request-derived stats keys.
    pub stats_max_keys: usize,
    /// `TOP_LIMITED_SERIES`: the most limited values per rule rendered as Prometheus series
    /// (0: none; above the summary's entries per rule, all of them).
    pub top_limited_series: usize,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub healthy_needs_config: bool,
    /// `SHUTDOWN_DRAIN_SECONDS`: how long requests are still answered after SIGTERM while
    /// health reports NOT_SERVING.
    pub drain: Duration,
    /// `GRPC_MAX_CONNECTION_AGE` and `GRPC_MAX_CONNECTION_AGE_GRACE`.
    pub max_connection_age: ConnectionAge,
    /// Connection, stream and request limits of the gRPC server.
    pub grpc_limits: GrpcLimits,
    /// How the Rate Limit Quota Service shares quotas out.
    pub rlqs: RlqsSettings,
    /// `GRPC_SERVER_USE_TLS` with `GRPC_SERVER_TLS_CERT`, `GRPC_SERVER_TLS_KEY` and optionally
    /// `GRPC_CLIENT_TLS_CACERT` (mTLS).
    pub tls: Option<TlsSettings>,
}

/// The address to listen on for `host` and `port`: an IPv6 host (`::`, `::1`, or bracketed as
/// Istio's sample writes it, `[::]`) in brackets, anything else as it is.
pub fn listen_address(host: &str, port: u16) -> String {
    let host = host.trim();
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if bare.contains(':') {
        format!("[{bare}]:{port}")
    } else {
        format!("{bare}:{port}")
    }
}

/// Go's `host:port` with an empty host meaning every interface (`:9090`).
fn listen_addr(addr: &str) -> String {
    if let Some(port) = addr.strip_prefix(':') {
        format!("0.0.0.0:{port}")
    } else {
        addr.to_owned()
    }
}

/// `LOG_FORMAT`: `text` (false) or `json` (true).
fn log_json(r: &Reader<'_>) -> Result<bool, SettingsError> {
    match r.string("LOG_FORMAT", "text").to_ascii_lowercase().as_str() {
        "text" => Ok(false),
        "json" => Ok(true),
        other => Err(err("LOG_FORMAT", other, "expected text or json")),
    }
}

/// `STATS_FLUSH_INTERVAL`: from 10 ms.
const STATS_FLUSH: Span = Span::within(Duration::from_millis(10), LONGEST);

impl Settings {
    /// Reads settings from `env`; `config_dir` (from `--config-dir`) wins over `RUNTIME_*`.
    /// Every setting is read: the error names each one that cannot be used.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        config_dir: Option<PathBuf>,
    ) -> Result<Settings, SettingsErrors> {
        let r = Reader::new(env);
        let settings = Self::read(&r, config_dir);
        let problems = r.into_problems();
        if problems.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsErrors(problems))
        }
    }

    /// Every setting, with a stand-in (the default) for each value reported to `r`.
    fn read(r: &Reader<'_>, config_dir: Option<PathBuf>) -> Settings {
        let backend = r.or(
            backend::backend(r),
            Backend::Memory {
                max_keys: backend::MEMORY_MAX_KEYS,
            },
        );
        let config_dir = config_dir.unwrap_or_else(|| {
            let mut dir = PathBuf::from(r.string("RUNTIME_ROOT", "/srv/runtime_data/current"));
            dir.push(r.string("RUNTIME_SUBDIRECTORY", ""));
            dir.push(r.string("RUNTIME_APPDIRECTORY", "config"));
            dir
        });
        // Accepted for compatibility: Turnstile always watches the directory and its two
        // parents, which covers what the reference's flag chooses between.
        r.bool("RUNTIME_WATCH_ROOT", true);
        let sinks = stats::sinks(r);
        let limiter = decision::limiter(r, &backend);
        Settings {
            limiter,
            grpc_host: r.string("GRPC_HOST", "0.0.0.0"),
            grpc_port: r.parsed("GRPC_PORT", 8081),
            grpc_uds: Some(r.string("GRPC_UDS", ""))
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            config_dir,
            config_source: r.or(xds::config_source(r), ConfigSource::File),
            postgres_route: r.or(postgres::route(r, &backend), None),
            ignore_dotfiles: r.bool("RUNTIME_IGNOREDOTFILES", false),
            merge_domains: r.bool("MERGE_DOMAIN_CONFIG", false),
            force_start_without_config: r.bool("FORCE_START_WITHOUT_INITIAL_CONFIG", false),
            backend,
            response: decision::response(r),
            log_level: r.string("LOG_LEVEL", "WARN"),
            log_json: r.or(log_json(r), false),
            http_addr: listen_address(&r.string("HOST", "0.0.0.0"), r.parsed("PORT", 8080u16)),
            debug_addr: listen_address(
                &r.string("DEBUG_HOST", "0.0.0.0"),
                r.parsed("DEBUG_PORT", 6070u16),
            ),
            prometheus: sinks.prometheus,
            dogstatsd: sinks.dogstatsd,
            disable_stats: sinks.disabled,
            response_time_ms: r.bool("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false),
            tracing: tracing::tracing(r),
            admin_token_file: Some(r.string("ADMIN_TOKEN_FILE", ""))
                .filter(|p| !p.trim().is_empty())
                .map(PathBuf::from),
            prometheus_mapper: Some(r.string("PROMETHEUS_MAPPER_YAML", ""))
                .filter(|p| !p.trim().is_empty())
                .map(PathBuf::from),
            statsd: sinks.statsd,
            stats_flush: r.duration("STATS_FLUSH_INTERVAL", Duration::from_secs(10), STATS_FLUSH),
            extra_tags: r.or(stats::parse_tags(&r.string("EXTRA_TAGS", "")), Vec::new()),
            near_limit_ratio: stats::near_limit_ratio(r),
            stats_max_keys: r.number("STATS_MAX_KEYS", 10_000usize, 0, 10_000_000),
            top_limited_series: r.number("TOP_LIMITED_SERIES", 0usize, 0, 100),
            healthy_needs_config: r.bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false),
            drain: Duration::from_secs(r.number("SHUTDOWN_DRAIN_SECONDS", 5u64, 0, 86_400)),
            max_connection_age: grpc::connection_age(r),
            grpc_limits: grpc::grpc_limits(r),
            rlqs: rlqs::rlqs(r),
            tls: r.or(grpc::tls(r), None),
        }
    }
}

#[cfg(test)]
mod tests;
