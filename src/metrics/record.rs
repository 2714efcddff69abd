//! Recording decided requests per stats key, as the reference counts them: hits split into
//! within / near / over the limit (apart from them, the top-limited summaries), the stats keys
//! of request values bounded (`max_keys`, label length), unknown domains counted, and the sorted views the renderers read.
//!
//! Must not touch: rendering (`render`, `statsd`), the limiter's decisions (read, never made).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::split::{Split, split_hits};
use super::{LimitStats, Metrics, OVERFLOW, label, stats_key};
use crate::limiter::{Counting, Request, Verdict};

/// The stats counters metrics attach to a configured limit, and which metrics did.
struct Attached {
    owner: u64,
    stats: Arc<LimitStats>,
}

impl Metrics {
    /// The counters of a stats key. Keys built from request values (`dynamic`) are bounded;
    /// keys that come from the configuration alone are always kept.
    pub(super) fn limit_stats(&self, key: Vec<String>, dynamic: bool) -> Arc<LimitStats> {
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
    pub(super) fn bounded<'v>(&self, value: &'v str) -> std::borrow::Cow<'v, str> {
        let bounded = label::bounded(value);
        if matches!(bounded, std::borrow::Cow::Owned(_)) {
            self.labels_shortened.fetch_add(1, Ordering::Relaxed);
        }
        bounded
    }

    /// The counters of a configuration-derived stats key, cached by the limit's full key.
    pub(super) fn static_stats(
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

    pub(super) fn domain_not_found(&self, domain: &str) {
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
    pub fn record(&self, request: &Request<'_>, verdict: &Verdict<'_>) {
        if verdict.domain_found && !verdict.failed_open {
            self.record_top(request, verdict);
        }
        if self.stats_disabled {
            return;
        }
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
            let segments = || stats_key::segments(&request.domain, &descriptor.entries, &applied);
            let found;
            let stats: &LimitStats = match applied.rule() {
                // Configuration-derived keys: attached to the limit the first time (found by its
                // precomputed full key), then read from it without hashing anything.
                Some(rule) if !stats_key::is_dynamic(&applied) => {
                    let attach = || Attached {
                        owner: self.id,
                        stats: self.static_stats(rule, segments),
                    };
                    match rule.attached.get_or_attach(attach) {
                        Some(attached) if attached.owner == self.id => &attached.stats,
                        _ => {
                            found = self.static_stats(rule, segments);
                            &found
                        }
                    }
                }
                _ => {
                    found = self.limit_stats(segments(), true);
                    &found
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
    pub(super) fn limits_sorted(&self) -> Vec<(Vec<String>, Arc<LimitStats>)> {
        sorted_snapshot(&self.limits, Arc::clone)
    }

    /// Every unknown domain seen with its count, sorted.
    pub(super) fn domains_not_found_sorted(&self) -> Vec<(String, u64)> {
        sorted_snapshot(&self.domain_not_found, |v| v.load(Ordering::Relaxed))
    }
}

/// A copy of `map`'s entries (each value through `value`), taken under its read lock and sorted
/// by key after the lock is released.
fn sorted_snapshot<K: Ord + Clone, V, T>(
    map: &std::sync::RwLock<std::collections::HashMap<K, V>>,
    value: impl Fn(&V) -> T,
) -> Vec<(K, T)> {
    let mut out: Vec<(K, T)> = {
        let map = map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), value(v))).collect()
    };
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
