//! Prometheus text exposition (format 0.0.4) of [`Metrics`](super::Metrics).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::Metrics;
use super::histogram::{BOUNDS, Histogram};

/// Escapes a label value.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn counter(out: &mut String, name: &str, help: &str, value: u64, labels: &str) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value}"
    );
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram, labels: &str) {
    let (buckets, count, sum) = h.snapshot();
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in BOUNDS.iter().zip(&buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let _ = writeln!(
        out,
        "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {count}"
    );
}

pub(crate) fn render(m: &Metrics) -> String {
    let mut out = String::with_capacity(4096);
    let extra = m.extra_labels.trim_start_matches(',');
    let with = |labels: String| {
        if m.extra_labels.is_empty() {
            labels
        } else {
            format!("{labels}{}", m.extra_labels)
        }
    };

    let limits = m
        .limits
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut keys: Vec<_> = limits.iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    type Pick = fn(&super::LimitStats) -> u64;
    let stats: [(&str, &str, Pick); 6] = [
        ("total_hits", "hits on matched limits", |s| {
            s.total_hits.load(Ordering::Relaxed)
        }),
        ("over_limit", "hits over the limit", |s| {
            s.over_limit.load(Ordering::Relaxed)
        }),
        ("near_limit", "hits above the near-limit threshold", |s| {
            s.near_limit.load(Ordering::Relaxed)
        }),
        ("within_limit", "hits within the limit", |s| {
            s.within_limit.load(Ordering::Relaxed)
        }),
        ("shadow_mode", "hits over a shadow-mode limit", |s| {
            s.shadow_mode.load(Ordering::Relaxed)
        }),
        (
            "over_limit_with_local_cache",
            "hits refused by the local over-limit cache",
            |s| s.over_limit_with_local_cache.load(Ordering::Relaxed),
        ),
    ];
    for (stat, help, pick) in stats {
        let name = format!("ratelimit_service_rate_limit_{stat}");
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (segments, s) in &keys {
            let mut labels = format!(
                "domain=\"{}\"",
                escape(segments.first().map_or("", String::as_str))
            );
            if let Some(key1) = segments.get(1) {
                let _ = write!(labels, ",key1=\"{}\"", escape(key1));
            }
            if segments.len() > 2 {
                let _ = write!(labels, ",key2=\"{}\"", escape(&segments[2..].join(".")));
            }
            let _ = writeln!(out, "{name}{{{}}} {}", with(labels), pick(s));
        }
    }
    drop(limits);

    let not_found = m
        .domain_not_found
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let name = "ratelimit_service_rate_limit_domain_not_found";
    let _ = writeln!(
        out,
        "# HELP {name} requests for a domain with no configuration\n# TYPE {name} counter"
    );
    let mut domains: Vec<_> = not_found.iter().collect();
    domains.sort_by(|a, b| a.0.cmp(b.0));
    for (domain, n) in domains {
        let _ = writeln!(
            out,
            "{name}{{{}}} {}",
            with(format!("domain=\"{}\"", escape(domain))),
            n.load(Ordering::Relaxed)
        );
    }
    drop(not_found);

    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    counter(
        &mut out,
        "ratelimit_service_config_load_success",
        "successful configuration loads",
        load(&m.config_load_success),
        extra,
    );
    counter(
        &mut out,
        "ratelimit_service_config_load_error",
        "failed configuration loads",
        load(&m.config_load_error),
        extra,
    );
    counter(
        &mut out,
        "ratelimit_service_global_shadow_mode",
        "requests let through by SHADOW_MODE",
        load(&m.global_shadow_mode),
        extra,
    );
    let name = "ratelimit_service_should_rate_limit_error";
    let _ = writeln!(
        out,
        "# HELP {name} failed ShouldRateLimit calls\n# TYPE {name} counter"
    );
    let _ = writeln!(
        out,
        "{name}{{{}}} {}",
        with("err_type=\"redis_error\"".into()),
        load(&m.store_failed_requests)
    );
    let _ = writeln!(
        out,
        "{name}{{{}}} {}",
        with("err_type=\"service_error\"".into()),
        load(&m.service_errors)
    );
    counter(
        &mut out,
        "ratelimit_service_total_requests",
        "ShouldRateLimit calls",
        load(&m.total_requests),
        &with("grpc_method=\"ShouldRateLimit\"".into()),
    );
    histogram(
        &mut out,
        "ratelimit_service_response_time_seconds",
        "ShouldRateLimit latency",
        &m.response_time,
        extra,
    );
    histogram(
        &mut out,
        "turnstile_backend_call_seconds",
        "latency of one batched counter-store call",
        &m.backend_time,
        extra,
    );
    counter(
        &mut out,
        "turnstile_backend_errors_total",
        "failed counter-store calls (any cause)",
        load(&m.backend_errors),
        extra,
    );
    counter(
        &mut out,
        "turnstile_backend_timeouts_total",
        "counter-store calls past their deadline",
        load(&m.backend_timeouts),
        extra,
    );
    counter(
        &mut out,
        "turnstile_backend_failed_open_total",
        "requests answered OK because the counter store failed and fail-open applied",
        load(&m.failed_open),
        extra,
    );
    counter(
        &mut out,
        "turnstile_stats_keys_overflow_total",
        "stats keys folded into __overflow__ by the cardinality bound",
        load(&m.stats_overflow),
        extra,
    );
    out
}
