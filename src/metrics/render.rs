//! Prometheus text exposition (format 0.0.4) of [`Metrics`](super::Metrics) and a store's
//! gauges, driven by the rows of [`table`](super::table).
//!
//! Written here rather than with a Prometheus client crate on purpose: the hot path records
//! into atomics found through one cached `Arc` per configured limit (no label hashing per
//! request), the cardinality bound folds request-derived keys into `__overflow__` before
//! anything is stored, and the text format is the few lines below. A client crate's label
//! families would add a hash lookup with owned label sets to every recorded hit.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::Metrics;
use super::histogram::{BOUNDS, Histogram};
use super::label::escape;
use super::mapper::{Mapped, Mapper, MetricType};
use super::table::{
    COUNTERS, CounterRow, DOMAIN_NOT_FOUND, GaugeSample, LIMIT_STATS, gauge_samples,
};
use crate::storage::Gauge;

/// Joins a series' own labels with the `EXTRA_TAGS` labels.
fn labels(own: &str, extra: &str) -> String {
    match (own.is_empty(), extra.is_empty()) {
        (_, true) => own.to_owned(),
        (true, false) => extra.to_owned(),
        (false, false) => format!("{own},{extra}"),
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A histogram in seconds, or in milliseconds when `scale` is 1000 (bounds and sum).
/// The scale of a latency histogram shown in milliseconds (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`).
const MILLISECONDS_A_SECOND: f64 = 1_000.0;

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram, extra: &str, scale: f64) {
    let (buckets, count, sum) = h.snapshot();
    let sum = sum * scale;
    header(out, name, help, "histogram");
    let sep = if extra.is_empty() { "" } else { "," };
    for (bound, n) in BOUNDS.iter().zip(&buckets) {
        // Rounded to a microsecond's digits: 0.00005 × 1000 is not exactly 0.05 in binary.
        let bound = (bound * scale * 1e6).round() / 1e6;
        let _ = writeln!(out, "{name}_bucket{{{extra}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{extra}{sep}le=\"+Inf\"}} {count}");
    let _ = writeln!(
        out,
        "{name}_sum{{{extra}}} {sum}\n{name}_count{{{extra}}} {count}"
    );
}

/// The `domain`, `key1`, `key2` labels of a stats key (the reference's Prometheus mapping:
/// everything after the first key is joined with `.` into `key2`).
fn stats_key_labels(segments: &[String]) -> String {
    let mut out = format!(
        "domain=\"{}\"",
        escape(segments.first().map_or("", String::as_str))
    );
    if let Some(key1) = segments.get(1) {
        let _ = write!(out, ",key1=\"{}\"", escape(key1));
    }
    if segments.len() > 2 {
        let _ = write!(out, ",key2=\"{}\"", escape(&segments[2..].join(".")));
    }
    out
}

pub(crate) fn render(m: &Metrics, gauges: &[Gauge]) -> String {
    let mut out = String::with_capacity(4096);
    let extra = m.extra_labels.trim_start_matches(',');

    match &m.mapper {
        None => builtin_names(&mut out, m, extra),
        Some(mapper) => mapped_names(&mut out, m, mapper, extra),
    }

    histogram(
        &mut out,
        "ratelimit_service_response_time_seconds",
        if m.response_time_ms {
            "ShouldRateLimit latency in milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)"
        } else {
            "ShouldRateLimit latency"
        },
        &m.response_time,
        extra,
        if m.response_time_ms {
            MILLISECONDS_A_SECOND
        } else {
            1.0
        },
    );
    histogram(
        &mut out,
        "turnstile_backend_call_seconds",
        "latency of one batched counter-store call",
        &m.peers.store_time,
        extra,
        1.0,
    );

    let name = "turnstile_grpc_connections_open";
    header(
        &mut out,
        name,
        "connections open on the gRPC listener",
        "gauge",
    );
    let _ = writeln!(out, "{name}{{{extra}}} {}", m.open_connections.get());
    admission(&mut out, &m.admission, extra);
    peers(&mut out, &m.peers, extra);

    // Tasks alive on the runtime that renders this page (stable tokio runtime metric): the
    // soak samples it to show that connections, streams and reloads leave no task behind.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let name = "turnstile_runtime_alive_tasks";
        header(&mut out, name, "tasks alive on the async runtime", "gauge");
        let alive = runtime.metrics().num_alive_tasks();
        let _ = writeln!(out, "{name}{{{extra}}} {alive}");
    }

    m.rlqs.render(&mut out, extra);
    m.source.render(&mut out, extra);
    super::top_series::render(&mut out, m, extra);

    let mut samples: Vec<GaugeSample> = Vec::new();
    for gauge in gauges {
        gauge_samples(gauge, &mut samples);
    }
    // Each gauge's series together, under one HELP/TYPE header.
    samples.sort_by_key(|s| s.0);
    let mut previous = "";
    for (name, help, own, value) in samples {
        if name != previous {
            let kind = match name.ends_with("_total") {
                true => "counter",
                false => "gauge",
            };
            header(&mut out, name, help, kind);
            previous = name;
        }
        let _ = writeln!(out, "{name}{{{}}} {value}", labels(&own, extra));
    }
    out
}

/// The reference's series under its built-in Prometheus names, and Turnstile's counters.
fn builtin_names(out: &mut String, m: &Metrics, extra: &str) {
    let limits = m.limits_sorted();
    for row in LIMIT_STATS {
        let name = format!("ratelimit_service_rate_limit_{}", row.stat);
        header(out, &name, row.help, "counter");
        for (segments, stats) in &limits {
            let series = labels(&stats_key_labels(segments), extra);
            let _ = writeln!(out, "{name}{{{series}}} {}", (row.read)(stats));
        }
    }

    let (stat, help) = DOMAIN_NOT_FOUND;
    let name = format!("ratelimit_service_rate_limit_{stat}");
    header(out, &name, help, "counter");
    for (domain, n) in m.domains_not_found_sorted() {
        let series = labels(&format!("domain=\"{}\"", escape(&domain)), extra);
        let _ = writeln!(out, "{name}{{{series}}} {n}");
    }

    counter_rows(out, m, extra, |_| true);
}

/// The reference's statsd series named by a statsd_exporter mapping (summed where two map to
/// one series, as statsd_exporter adds them up), then Turnstile's own counters.
fn mapped_names(out: &mut String, m: &Metrics, mapper: &Mapper, extra: &str) {
    let mut families: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (statsd, value) in m.statsd_counters() {
        if let Mapped::Series {
            name,
            labels: pairs,
        } = mapper.map(&statsd, MetricType::Counter)
        {
            let own: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let series = families.entry(name).or_default();
            *series.entry(labels(&own.join(","), extra)).or_default() += value;
        }
    }
    for (name, series) in &families {
        header(
            out,
            name,
            "statsd series named by PROMETHEUS_MAPPER_YAML",
            "counter",
        );
        for (labels, value) in series {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
    counter_rows(out, m, extra, |row| row.statsd.is_none());
}

/// The rows of [`COUNTERS`] that `keep` keeps, under their Prometheus names.
fn counter_rows(out: &mut String, m: &Metrics, extra: &str, keep: fn(&CounterRow) -> bool) {
    let mut previous = "";
    for row in COUNTERS.iter().filter(|row| keep(row)) {
        if row.prometheus != previous {
            header(out, row.prometheus, row.help, "counter");
            previous = row.prometheus;
        }
        let series = labels(row.labels, extra);
        let _ = writeln!(out, "{}{{{series}}} {}", row.prometheus, (row.read)(m));
    }
}

/// A counter with one series per `reason` label value.
fn by_reason(out: &mut String, name: &str, help: &str, rows: &[(&str, u64)], extra: &str) {
    header(out, name, help, "counter");
    for (reason, value) in rows {
        let series = match extra {
            "" => format!("reason=\"{reason}\""),
            extra => format!("reason=\"{reason}\",{extra}"),
        };
        let _ = writeln!(out, "{name}{{{series}}} {value}");
    }
}

/// Fairness between peers: refusals and closed connections by reason, peers active, the
/// largest peer's share of the decisions in flight.
fn peers(out: &mut String, p: &crate::metrics::PeerReadings, extra: &str) {
    use crate::metrics::{CloseReason, ShedReason};
    let shed = ShedReason::ALL.map(|r| (r.label(), p.shed_total(r)));
    by_reason(
        out,
        "turnstile_requests_shed_total",
        "calls refused at once, by reason: peer_over_part (the client was over its part of the decisions in flight while others were active), limit (no place within the call's deadline), peer_streams (the client had its most RLQS streams open), store_too_slow (UNAVAILABLE: even the fastest recent decision was slower than the deadline)",
        &shed,
        extra,
    );
    let closed = CloseReason::ALL.map(|r| (r.label(), p.closed_total(r)));
    by_reason(
        out,
        "turnstile_grpc_connections_closed_total",
        "gRPC connections Turnstile closed, by reason: idle (no call for GRPC_IDLE_TIMEOUT), too_many_pings, peer_cap (GRPC_MAX_CONNECTIONS_PER_PEER), make_room (GRPC_MAX_CONNECTIONS reached: the longest idle of the client holding the most)",
        &closed,
        extra,
    );
    let single = [
        (
            "turnstile_peer_reads_paused_total",
            "times a client's gRPC connection stopped being read, or its /json request or RLQS report waited, because its requests open reached its part (of GRPC_FAIR_REQUESTS_OPEN, or of twice the adaptive limit; the rest waits in the kernel)",
            "counter",
            p.reads_paused_total().to_string(),
        ),
        (
            "turnstile_door_budget",
            "requests open the door lets in, in all clients' parts, to keep the runtime's queue within GRPC_FAIR_QUEUE_TARGET (at most GRPC_FAIR_REQUESTS_OPEN; absent until measured)",
            "gauge",
            p.door().0.map_or_else(String::new, |b| b.to_string()),
        ),
        (
            "turnstile_door_queue_seconds",
            "the runtime's queue at the last probe: how long a task that became ready waited to be polled",
            "gauge",
            (p.door().1.as_secs_f64()).to_string(),
        ),
        (
            "turnstile_door_store_queue_seconds",
            "the counter store's queue at the last probe: the store calls' mean time in the probe's interval over the least such mean of the window (GRPC_FAIR_QUEUE_TARGET holds it too)",
            "gauge",
            (p.door().2.as_secs_f64()).to_string(),
        ),
        (
            "turnstile_peers_active",
            "clients (by address, or certificate under mTLS) with a decision in flight",
            "gauge",
            p.active().to_string(),
        ),
        (
            "turnstile_peer_largest_share",
            "since the last scrape, the largest part of the decisions in flight one client held (0 to 1)",
            "gauge",
            p.take_largest_share().to_string(),
        ),
    ];
    for (name, help, kind, value) in single {
        if value.is_empty() {
            continue;
        }
        header(out, name, help, kind);
        let _ = writeln!(out, "{name}{{{extra}}} {value}");
    }
}

/// The adaptive limit on decisions in flight (`GRPC_ADAPTIVE_CONCURRENCY*`).
fn admission(out: &mut String, a: &crate::metrics::AdmissionReadings, extra: &str) {
    let series = [
        (
            "turnstile_concurrency_limit",
            "the adaptive limit on ShouldRateLimit calls in flight (0: off)",
            "gauge",
            a.limit(),
        ),
        (
            "turnstile_concurrency_in_flight",
            "ShouldRateLimit calls admitted and not yet answered",
            "gauge",
            a.in_flight(),
        ),
    ];
    for (name, help, kind, value) in series {
        header(out, name, help, kind);
        let _ = writeln!(out, "{name}{{{extra}}} {value}");
    }
}
