//! The one table of what the process counts. Each row names a metric for Prometheus and for
//! statsd and says how to read it, so the two sinks cannot drift apart: `render` and `statsd`
//! only walk these tables.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{LimitStats, Metrics};
use crate::storage::Gauge;

/// A process-wide counter.
pub(crate) struct CounterRow {
    /// The Prometheus name; rows sharing a name are series of one metric.
    pub(crate) prometheus: &'static str,
    /// The series' own labels (before `EXTRA_TAGS`), e.g. `err_type="redis_error"`.
    pub(crate) labels: &'static str,
    /// The reference's statsd name, where the reference has one.
    pub(crate) statsd: Option<&'static str>,
    pub(crate) help: &'static str,
    pub(crate) read: fn(&Metrics) -> u64,
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

pub(crate) const COUNTERS: &[CounterRow] = &[
    CounterRow {
        prometheus: "ratelimit_service_config_load_success",
        labels: "",
        statsd: Some("ratelimit.service.config_load_success"),
        help: "successful configuration loads",
        read: |m| load(&m.config_load_success),
    },
    CounterRow {
        prometheus: "ratelimit_service_config_load_error",
        labels: "",
        statsd: Some("ratelimit.service.config_load_error"),
        help: "failed configuration loads",
        read: |m| load(&m.config_load_error),
    },
    CounterRow {
        prometheus: "ratelimit_service_global_shadow_mode",
        labels: "",
        statsd: Some("ratelimit.service.global_shadow_mode"),
        help: "requests let through by SHADOW_MODE",
        read: |m| load(&m.global_shadow_mode),
    },
    CounterRow {
        prometheus: "ratelimit_service_should_rate_limit_error",
        labels: "err_type=\"redis_error\"",
        statsd: Some("ratelimit.service.call.should_rate_limit.redis_error"),
        help: "failed ShouldRateLimit calls",
        read: |m| load(&m.store_failed_requests),
    },
    CounterRow {
        prometheus: "ratelimit_service_should_rate_limit_error",
        labels: "err_type=\"service_error\"",
        statsd: Some("ratelimit.service.call.should_rate_limit.service_error"),
        help: "failed ShouldRateLimit calls",
        read: |m| load(&m.service_errors),
    },
    CounterRow {
        prometheus: "ratelimit_service_total_requests",
        labels: "grpc_method=\"ShouldRateLimit\"",
        statsd: Some("ratelimit_server.ShouldRateLimit.total_requests"),
        help: "ShouldRateLimit calls",
        read: |m| load(&m.total_requests),
    },
    CounterRow {
        prometheus: "turnstile_counters_reset_total",
        labels: "",
        statsd: None,
        help: "counters reset through DELETE /counters",
        read: |m| load(&m.counters_reset),
    },
    CounterRow {
        prometheus: "turnstile_backend_errors_total",
        labels: "",
        statsd: None,
        help: "failed counter-store calls (any cause)",
        read: |m| load(&m.backend_errors),
    },
    CounterRow {
        prometheus: "turnstile_backend_timeouts_total",
        labels: "",
        statsd: None,
        help: "counter-store calls past their deadline",
        read: |m| load(&m.backend_timeouts),
    },
    CounterRow {
        prometheus: "turnstile_backend_failed_open_total",
        labels: "",
        statsd: None,
        help: "requests answered OK because the counter store failed and fail-open applied",
        read: |m| load(&m.failed_open),
    },
    CounterRow {
        prometheus: "turnstile_overloaded_total",
        labels: "",
        statsd: None,
        help: "counter-store calls refused because Turnstile itself was overloaded (queue full, or commands not sent in time); the store is not blamed",
        read: |m| load(&m.overloaded),
    },
    CounterRow {
        prometheus: "turnstile_stats_keys_overflow_total",
        labels: "",
        statsd: None,
        help: "stats keys folded into __overflow__ by the cardinality bound",
        read: |m| load(&m.stats_overflow),
    },
    CounterRow {
        prometheus: "turnstile_stats_labels_shortened_total",
        labels: "",
        statsd: None,
        help: "request-derived label values longer than 128 bytes, kept as a prefix and a hash",
        read: |m| load(&m.labels_shortened),
    },
    CounterRow {
        prometheus: "turnstile_trace_spans_exported_total",
        labels: "",
        statsd: None,
        help: "spans the OTLP collector accepted",
        read: |m| m.spans.exported(),
    },
    CounterRow {
        prometheus: "turnstile_trace_spans_dropped_total",
        labels: "reason=\"queue_full\"",
        statsd: None,
        help: "spans dropped instead of holding a decision up",
        read: |m| m.spans.dropped_queue_full(),
    },
    CounterRow {
        prometheus: "turnstile_trace_spans_dropped_total",
        labels: "reason=\"export_failed\"",
        statsd: None,
        help: "spans dropped instead of holding a decision up",
        read: |m| m.spans.dropped_export_failed(),
    },
];

/// A per-stats-key counter: Prometheus `ratelimit_service_rate_limit_<stat>{domain,key1,key2}`,
/// statsd `ratelimit.service.rate_limit.<domain>.<key…>.<stat>`.
pub(crate) struct LimitRow {
    pub(crate) stat: &'static str,
    pub(crate) help: &'static str,
    pub(crate) read: fn(&LimitStats) -> u64,
}

/// A row whose statistic is named for its field of [`LimitStats`].
macro_rules! limit_row {
    ($stat:ident, $help:literal) => {
        LimitRow {
            stat: stringify!($stat),
            help: $help,
            read: |s| load(&s.$stat),
        }
    };
}

pub(crate) const LIMIT_STATS: &[LimitRow] = &[
    limit_row!(total_hits, "hits on matched limits"),
    limit_row!(over_limit, "hits over the limit"),
    limit_row!(near_limit, "hits above the near-limit threshold"),
    limit_row!(within_limit, "hits within the limit"),
    limit_row!(shadow_mode, "hits over a shadow-mode limit"),
    limit_row!(
        over_limit_with_local_cache,
        "hits refused by the local over-limit cache"
    ),
];

/// The per-domain counter of requests for an unknown domain (Prometheus
/// `ratelimit_service_rate_limit_domain_not_found{domain}`, statsd
/// `ratelimit.service.rate_limit.<domain>.domain_not_found`).
pub(crate) const DOMAIN_NOT_FOUND: (&str, &str) = (
    "domain_not_found",
    "requests for a domain with no configuration",
);

/// One sample of a store's readings: `(name, help, labels, value)`; a name ending in `_total`
/// is a counter, any other a gauge.
pub(crate) type GaugeSample = (&'static str, &'static str, String, u64);

/// The Prometheus samples of a store's readings.
pub(crate) fn gauge_samples(gauge: &Gauge, out: &mut Vec<GaugeSample>) {
    match gauge {
        Gauge::MemoryCounters(n) => out.push((
            "turnstile_memory_counters",
            "live counters held by the in-process store",
            String::new(),
            *n,
        )),
        Gauge::MemcachedServer {
            server,
            up,
            connections,
            idle_connections,
        } => {
            let label = format!("server=\"{}\"", super::label::escape(server));
            out.extend([
                (
                    "turnstile_memcached_up",
                    "1 while the server is not in backoff after failures",
                    label.clone(),
                    u64::from(*up),
                ),
                (
                    "turnstile_memcached_connections",
                    "connections open to the server",
                    label.clone(),
                    *connections,
                ),
                (
                    "turnstile_memcached_idle_connections",
                    "pooled connections open and idle",
                    label,
                    *idle_connections,
                ),
            ]);
        }
        Gauge::Breaker {
            server,
            open,
            opens,
            probes,
        } => {
            let label = format!("server=\"{}\"", super::label::escape(server));
            out.extend([
                (
                    "turnstile_store_breaker_open",
                    "1 while the store server's circuit breaker is open (calls fail at once)",
                    label.clone(),
                    u64::from(*open),
                ),
                (
                    "turnstile_store_breaker_opens_total",
                    "times the store server's circuit breaker opened",
                    label.clone(),
                    *opens,
                ),
                (
                    "turnstile_store_breaker_probes_total",
                    "probes sent to the store server while its breaker was open",
                    label,
                    *probes,
                ),
            ]);
        }
        Gauge::PostgresPool { connections, idle } => out.extend([
            (
                "turnstile_postgres_connections",
                "connections open to PostgreSQL",
                String::new(),
                *connections,
            ),
            (
                "turnstile_postgres_idle_connections",
                "connections to PostgreSQL open and idle",
                String::new(),
                *idle,
            ),
        ]),
    }
}
