//! Service metrics, counted as the reference counts them (in hits, per stats key) and rendered
//! in Prometheus text with the reference's Prometheus names
//! (`ratelimit_service_rate_limit_{total_hits,over_limit,near_limit,within_limit,shadow_mode}`
//! with `domain`/`key1`/`key2` labels, `ratelimit_service_config_load_{success,error}`,
//! `ratelimit_service_should_rate_limit_error`, a response-time histogram), plus counter-store
//! metrics. Label cardinality is bounded: past `max_keys` distinct stats keys, further keys are
//! counted under `key1="__overflow__"` (the reference's stats grow without bound, its #275).
//!
//! Metrics observe the rest of the service and are never called by it: the gRPC edge records a
//! decided request from its verdict, [`Instrumented`] wraps the counter store to time its calls,
//! and stores report typed [`Gauge`]s that only this module names. What each metric is called
//! in Prometheus and in statsd is one table (`table`).
//!
//! Must not touch: protobuf, YAML, storage crates.

mod admission;
mod connections;
mod escape;
mod histogram;
pub mod history;
mod instrumented;
mod label;
pub mod mapper;
pub mod mogrify;
mod outage;
mod peers;
mod record;
mod record_top;
mod render;
mod rlqs;
mod source;
mod split;
mod stats_key;
pub mod statsd;
mod table;
pub mod top;
mod top_series;

pub use admission::AdmissionReadings;
pub use connections::OpenConnections;
pub use instrumented::{Instrumented, StoreLabel};
pub use peers::{CloseReason, PeerReadings, ShedReason};
pub use rlqs::RlqsMetrics;
pub use source::SourceStatus;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use histogram::Histogram;

use crate::storage::{ErrorKind, Gauge, StorageError};
use crate::traces::SpanCounts;

/// The per-stats-key counters.
#[derive(Debug, Default)]
pub(crate) struct LimitStats {
    pub(crate) total_hits: AtomicU64,
    pub(crate) over_limit: AtomicU64,
    pub(crate) near_limit: AtomicU64,
    pub(crate) within_limit: AtomicU64,
    pub(crate) shadow_mode: AtomicU64,
    pub(crate) over_limit_with_local_cache: AtomicU64,
}

const OVERFLOW: &str = "__overflow__";

/// Every metric of the process.
#[derive(Debug)]
pub struct Metrics {
    /// This instance among the process's (tests run several over one rule set): stats attached
    /// to a limit by another instance are not this one's.
    id: u64,
    limits: RwLock<HashMap<Vec<String>, Arc<LimitStats>>>,
    /// Configuration-derived stats keys by the limit's `full_key` (at most the number of limits
    /// ever loaded).
    by_full_key: RwLock<HashMap<String, Arc<LimitStats>>>,
    domain_not_found: RwLock<HashMap<String, Arc<AtomicU64>>>,
    max_keys: usize,
    near_limit_ratio: f64,
    extra_labels: String,
    extra_tags: Vec<(String, String)>,
    pub(crate) config_load_success: AtomicU64,
    pub(crate) config_load_error: AtomicU64,
    pub(crate) global_shadow_mode: AtomicU64,
    pub(crate) total_requests: AtomicU64,
    pub(crate) backend_errors: AtomicU64,
    pub(crate) service_errors: AtomicU64,
    pub(crate) store_failed_requests: AtomicU64,
    pub(crate) backend_timeouts: AtomicU64,
    pub(crate) failed_open: AtomicU64,
    pub(crate) overloaded: AtomicU64,
    pub(crate) stats_overflow: AtomicU64,
    pub(crate) labels_shortened: AtomicU64,
    pub(crate) counters_reset: AtomicU64,
    pub(crate) open_connections: Arc<OpenConnections>,
    pub(crate) admission: Arc<AdmissionReadings>,
    pub(crate) peers: Arc<PeerReadings>,
    pub(crate) response_time: Histogram,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`.
    response_time_ms: bool,
    /// `DISABLE_STATS`: per-descriptor stats are not counted.
    stats_disabled: bool,
    /// What became of trace spans (zero while tracing is off).
    pub(crate) spans: Arc<SpanCounts>,
    /// Rate Limit Quota Service streams, reports and assignments.
    pub rlqs: RlqsMetrics,
    /// The state of the rules' source (xDS).
    pub source: SourceStatus,
    /// `PROMETHEUS_MAPPER_YAML`: how the reference's statsd series are named in Prometheus
    /// (the built-in names when unset).
    mapper: Option<mapper::Mapper>,
    /// Who is limited: per rule, the values refused and near their limit.
    pub top: top::TopLimited,
    /// `TOP_LIMITED_SERIES`: the first N values of each rule rendered as series (0: none).
    top_series: usize,
    /// Each rule's hits and refusals, sampled for the status page.
    history: history::History,
}

impl Metrics {
    /// Metrics with at most `max_keys` distinct stats keys, the near-limit ratio
    /// (`NEAR_LIMIT_RATIO`) and extra labels on every series (`EXTRA_TAGS`, `k:v,k2:v2`).
    pub fn new(max_keys: usize, near_limit_ratio: f64, extra_tags: &[(String, String)]) -> Self {
        let extra_labels = extra_tags
            .iter()
            .map(|(k, v)| format!(",{k}=\"{}\"", label::escape(v)))
            .collect();
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            limits: RwLock::default(),
            by_full_key: RwLock::default(),
            domain_not_found: RwLock::default(),
            max_keys,
            near_limit_ratio,
            extra_labels,
            extra_tags: extra_tags.to_vec(),
            config_load_success: AtomicU64::new(0),
            config_load_error: AtomicU64::new(0),
            global_shadow_mode: AtomicU64::new(0),
            total_requests: AtomicU64::new(0),
            backend_errors: AtomicU64::new(0),
            service_errors: AtomicU64::new(0),
            store_failed_requests: AtomicU64::new(0),
            backend_timeouts: AtomicU64::new(0),
            failed_open: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            stats_overflow: AtomicU64::new(0),
            labels_shortened: AtomicU64::new(0),
            counters_reset: AtomicU64::new(0),
            open_connections: Arc::default(),
            admission: Arc::default(),
            peers: Arc::default(),
            response_time: Histogram::default(),
            response_time_ms: false,
            stats_disabled: false,
            spans: Arc::default(),
            rlqs: RlqsMetrics::default(),
            source: SourceStatus::default(),
            mapper: None,
            top: top::TopLimited::default(),
            top_series: 0,
            history: history::History::default(),
        }
    }

    /// Names the reference's series in Prometheus as `mapper` says (`PROMETHEUS_MAPPER_YAML`).
    pub fn with_mapper(mut self, mapper: mapper::Mapper) -> Self {
        self.mapper = Some(mapper);
        self
    }

    /// Renders the first `n` values of each rule's top-limited summary as
    /// `turnstile_top_limited_hits` series (`TOP_LIMITED_SERIES`; 0 renders none).
    pub fn with_top_series(mut self, n: usize) -> Self {
        self.top_series = n.min(top::ENTRIES);
        self
    }

    /// Renders `ratelimit_service_response_time_seconds` in milliseconds (bounds and sum), as
    /// the reference does with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`.
    pub fn with_response_time_in_ms(mut self) -> Self {
        self.response_time_ms = true;
        self
    }

    /// Counts no per-descriptor stats (`DISABLE_STATS`): decisions cost no stats work, and
    /// the `ratelimit_service_rate_limit_*` series stay absent.
    pub fn without_stats(mut self) -> Self {
        self.stats_disabled = true;
        self
    }

    /// What became of trace spans, for the tracer to count into.
    pub fn span_counts(&self) -> Arc<SpanCounts> {
        Arc::clone(&self.spans)
    }

    /// Records an RLQS-served rule's global usage (bounded by `STATS_MAX_KEYS` rules).
    pub fn rlqs_usage(&self, rule: &str, used: u64, limit: u64) {
        self.rlqs.usage(rule, used, limit, self.max_keys);
    }

    /// The open-connections gauge, for the server to keep.
    pub fn open_connections(&self) -> Arc<OpenConnections> {
        Arc::clone(&self.open_connections)
    }

    /// The adaptive concurrency limit's readings, for the server to keep.
    pub fn admission(&self) -> Arc<AdmissionReadings> {
        Arc::clone(&self.admission)
    }

    /// Where fairness between peers reports refusals, closed connections and shares.
    pub fn peers(&self) -> Arc<PeerReadings> {
        Arc::clone(&self.peers)
    }

    /// Counts a configuration load.
    pub fn config_loaded(&self, ok: bool) {
        let counter = if ok {
            &self.config_load_success
        } else {
            &self.config_load_error
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one ShouldRateLimit call and its latency.
    pub fn request_done(&self, elapsed: Duration) {
        self.total_requests.fetch_add(1, Ordering::Relaxed);
        self.response_time.observe(elapsed);
    }

    /// Counts a counter-store call and its latency.
    fn backend_call(&self, elapsed: Duration, error: Option<&StorageError>) {
        // Kept with the peers' readings: the door steers on it (`peers::door`).
        self.peers.store_time.observe(elapsed);
        match error.map(StorageError::kind) {
            Some(ErrorKind::Timeout) => {
                self.backend_timeouts.fetch_add(1, Ordering::Relaxed);
                self.backend_errors.fetch_add(1, Ordering::Relaxed);
            }
            // Turnstile's own overload says nothing about the store.
            Some(ErrorKind::Overloaded) => {
                self.overloaded.fetch_add(1, Ordering::Relaxed);
            }
            Some(_) => {
                self.backend_errors.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// Counts a request answered with an error because the counter store failed.
    pub fn store_failed_request(&self) {
        self.store_failed_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a reset through `/counters`.
    pub fn counters_reset(&self) {
        self.counters_reset.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request that failed for another reason than the store (no configuration).
    pub fn service_error(&self) {
        self.service_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter under its reference statsd name, with its current value.
    pub(crate) fn statsd_counters(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = table::COUNTERS
            .iter()
            .filter_map(|row| Some((row.statsd?.to_owned(), (row.read)(self))))
            .collect();
        for (segments, stats) in self.limits_sorted() {
            let base = format!("ratelimit.service.rate_limit.{}", segments.join("."));
            for row in table::LIMIT_STATS {
                out.push((format!("{base}.{}", row.stat), (row.read)(&stats)));
            }
        }
        let (stat, _) = table::DOMAIN_NOT_FOUND;
        for (domain, n) in self.domains_not_found_sorted() {
            // The request's own domain: escaped as every segment of a statsd name is.
            let domain = escape::statsd_segment(&domain);
            out.push((format!("ratelimit.service.rate_limit.{domain}.{stat}"), n));
        }
        out
    }

    /// Prometheus text exposition of every metric, followed by the counter store's `gauges`.
    pub fn render(&self, gauges: &[Gauge]) -> String {
        render::render(self, gauges)
    }

    /// Prometheus text of what the local mode did (`/metrics` follows [`Metrics::render`]
    /// with it).
    pub fn render_outage(&self, readings: &crate::limiter::OutageReadings) -> String {
        let mut out = String::new();
        outage::render(
            &mut out,
            readings,
            self.extra_labels.trim_start_matches(','),
        );
        out
    }
}
