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

mod connections;
mod histogram;
mod instrumented;
mod label;
mod render;
mod rlqs;
mod split;
mod stats_key;
pub mod statsd;
mod table;

pub use connections::OpenConnections;
pub use instrumented::Instrumented;
pub use rlqs::RlqsMetrics;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use histogram::Histogram;
use split::{Split, split_hits};

use crate::limiter::{Counting, Request, Verdict};
use crate::storage::{Gauge, StorageError};

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
    pub(crate) open_connections: Arc<OpenConnections>,
    pub(crate) response_time: Histogram,
    pub(crate) backend_time: Histogram,
    /// Rate Limit Quota Service streams, reports and assignments.
    pub rlqs: RlqsMetrics,
}

impl Metrics {
    /// Metrics with at most `max_keys` distinct stats keys, the near-limit ratio
    /// (`NEAR_LIMIT_RATIO`) and extra labels on every series (`EXTRA_TAGS`, `k:v,k2:v2`).
    pub fn new(max_keys: usize, near_limit_ratio: f64, extra_tags: &[(String, String)]) -> Self {
        let extra_labels = extra_tags
            .iter()
            .map(|(k, v)| format!(",{k}=\"{}\"", render::escape(v)))
            .collect();
        Self {
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
            open_connections: Arc::default(),
            response_time: Histogram::default(),
            backend_time: Histogram::default(),
            rlqs: RlqsMetrics::default(),
        }
    }

    /// Records an RLQS-served rule's global usage (bounded by `STATS_MAX_KEYS` rules).
    pub fn rlqs_usage(&self, rule: &str, used: u64, limit: u64) {
        self.rlqs.usage(rule, used, limit, self.max_keys);
    }

    /// The open-connections gauge, for the server to keep.
    pub fn open_connections(&self) -> Arc<OpenConnections> {
        Arc::clone(&self.open_connections)
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
        self.backend_time.observe(elapsed);
        match error {
            Some(StorageError::Timeout(_)) => {
                self.backend_timeouts.fetch_add(1, Ordering::Relaxed);
                self.backend_errors.fetch_add(1, Ordering::Relaxed);
            }
            // Turnstile's own overload says nothing about the store.
            Some(StorageError::Overloaded(_)) => {
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

    /// Counts a request that failed for another reason than the store (no configuration).
    pub fn service_error(&self) {
        self.service_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters of a stats key. Keys built from request values (`dynamic`) are bounded;
    /// keys that come from the configuration alone are always kept.
    fn limit_stats(&self, key: Vec<String>, dynamic: bool) -> Arc<LimitStats> {
        let key: Vec<String> = if dynamic {
            key.into_iter()
                .map(|segment| match self.bounded(&segment) {
                    std::borrow::Cow::Borrowed(_) => segment,
                    std::borrow::Cow::Owned(short) => short,
                })
                .collect()
        } else {
            key
        };
        let read = self
            .limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = read.get(&key) {
            return Arc::clone(v);
        }
        drop(read);
        let mut write = self
            .limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if dynamic && write.len() >= self.max_keys && !write.contains_key(&key) {
            self.stats_overflow.fetch_add(1, Ordering::Relaxed);
            vec![
                key.first().cloned().unwrap_or_default(),
                OVERFLOW.to_owned(),
            ]
        } else {
            key
        };
        Arc::clone(write.entry(key).or_default())
    }

    /// `value` bounded in bytes (see [`label`]), counting the values that had to be shortened.
    fn bounded<'v>(&self, value: &'v str) -> std::borrow::Cow<'v, str> {
        let bounded = label::bounded(value);
        if matches!(bounded, std::borrow::Cow::Owned(_)) {
            self.labels_shortened.fetch_add(1, Ordering::Relaxed);
        }
        bounded
    }

    /// The counters of a configuration-derived stats key, cached by the limit's full key.
    fn static_stats(
        &self,
        rule: &crate::rules::Limit,
        segments: impl FnOnce() -> Vec<String>,
    ) -> Arc<LimitStats> {
        let read = self
            .by_full_key
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(stats) = read.get(rule.full_key.as_str()) {
            return Arc::clone(stats);
        }
        drop(read);
        let stats = self.limit_stats(segments(), false);
        let mut write = self
            .by_full_key
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        write.insert(rule.full_key.clone(), Arc::clone(&stats));
        stats
    }

    fn domain_not_found(&self, domain: &str) {
        let domain = self.bounded(domain);
        let domain = domain.as_ref();
        let read = self
            .domain_not_found
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(v) = read.get(domain) {
            v.fetch_add(1, Ordering::Relaxed);
            return;
        }
        drop(read);
        let mut write = self
            .domain_not_found
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = if write.len() >= self.max_keys {
            OVERFLOW
        } else {
            domain
        };
        write
            .entry(name.to_owned())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Records a decided request: per stats key, hits split into within/near/over as the
    /// reference splits them (near threshold = floor(limit × `NEAR_LIMIT_RATIO`)).
    pub fn record(&self, request: &Request, verdict: &Verdict<'_>) {
        if !verdict.domain_found {
            self.domain_not_found(&request.domain);
            return;
        }
        if verdict.global_shadowed {
            self.global_shadow_mode.fetch_add(1, Ordering::Relaxed);
        }
        if verdict.failed_open {
            self.failed_open.fetch_add(1, Ordering::Relaxed);
            return;
        }
        for (descriptor, status) in request.descriptors.iter().zip(&verdict.statuses) {
            let Some(limited) = status.limit else {
                continue;
            };
            let hits = status.counting.hits();
            if hits == 0 {
                continue;
            }
            let applied = limited.applied;
            let stats = match applied.rule() {
                // Configuration-derived keys: found by the limit's precomputed full key, without
                // building the segments again.
                Some(rule) if !stats_key::is_dynamic(&applied) => self.static_stats(rule, || {
                    stats_key::segments(&request.domain, &descriptor.entries, &applied)
                }),
                _ => {
                    let segments =
                        stats_key::segments(&request.domain, &descriptor.entries, &applied);
                    self.limit_stats(segments, true)
                }
            };
            let limit = u64::from(limited.rate.requests_per_unit);
            let split = match status.counting {
                Counting::Counted { after, .. } => {
                    split_hits(limit, self.near_limit_ratio, after, hits)
                }
                _ => {
                    // Refused by the local cache: every hit is over, and counted as such.
                    stats
                        .over_limit_with_local_cache
                        .fetch_add(hits, Ordering::Relaxed);
                    Split {
                        within: 0,
                        near: 0,
                        over: hits,
                    }
                }
            };
            stats.total_hits.fetch_add(hits, Ordering::Relaxed);
            stats
                .within_limit
                .fetch_add(split.within, Ordering::Relaxed);
            stats.near_limit.fetch_add(split.near, Ordering::Relaxed);
            stats.over_limit.fetch_add(split.over, Ordering::Relaxed);
            if status.shadowed {
                stats.shadow_mode.fetch_add(split.over, Ordering::Relaxed);
            }
        }
    }

    /// Every stats key with its counters, sorted.
    fn limits_sorted(&self) -> Vec<(Vec<String>, Arc<LimitStats>)> {
        let limits = self
            .limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<_> = limits
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect();
        drop(limits);
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every unknown domain seen with its count, sorted.
    fn domains_not_found_sorted(&self) -> Vec<(String, u64)> {
        let not_found = self
            .domain_not_found
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<_> = not_found
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect();
        drop(not_found);
        out.sort();
        out
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
            out.push((format!("ratelimit.service.rate_limit.{domain}.{stat}"), n));
        }
        out
    }

    /// Prometheus text exposition of every metric, followed by the counter store's `gauges`.
    pub fn render(&self, gauges: &[Gauge]) -> String {
        render::render(self, gauges)
    }
}
