//! RLQS metrics: streams open, buckets tracked, reports, assignments sent by kind, pushes at a
//! window's end, refused streams and store failures, and per rule the global usage in its
//! current window against its limit (one series per configured rule, so cardinality is bounded
//! by the configuration and, as stats keys are, by `STATS_MAX_KEYS`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::label::escape;

/// The kinds of assignment, as labelled.
const KINDS: [&str; 3] = ["allow_all", "deny_all", "token_bucket"];

/// A rule's global usage in its current window, and its limit.
#[derive(Debug, Clone, Copy)]
struct WindowUsage {
    used: u64,
    limit: u64,
}

/// RLQS counters and gauges.
#[derive(Debug, Default)]
pub struct RlqsMetrics {
    streams_open: AtomicU64,
    buckets_tracked: AtomicU64,
    reports: AtomicU64,
    assignments: [AtomicU64; 3],
    refused: AtomicU64,
    store_errors: AtomicU64,
    refreshes: AtomicU64,
    usage: Mutex<BTreeMap<String, WindowUsage>>,
}

impl RlqsMetrics {
    /// A stream opened.
    pub fn stream_opened(&self) {
        self.streams_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream that tracked `buckets` buckets ended.
    pub fn stream_closed(&self, buckets: usize) {
        self.streams_open.fetch_sub(1, Ordering::Relaxed);
        self.buckets_tracked
            .fetch_sub(buckets as u64, Ordering::Relaxed);
    }

    /// A stream now tracks `added` more buckets.
    pub fn buckets_added(&self, added: usize) {
        self.buckets_tracked
            .fetch_add(added as u64, Ordering::Relaxed);
    }

    /// A report was received.
    pub fn report(&self) {
        self.reports.fetch_add(1, Ordering::Relaxed);
    }

    /// An assignment of `kind` (`Assignment::kind`) was sent.
    pub fn assigned(&self, kind: &str) {
        if let Some(i) = KINDS.iter().position(|k| *k == kind) {
            self.assignments[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A report was refused (the stream ends with an error status).
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Assignments were pushed to a stream because a window ended (no report asked).
    pub fn window_refresh(&self) {
        self.refreshes.fetch_add(1, Ordering::Relaxed);
    }

    /// A report could not be folded into the store (nothing was assigned).
    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The global usage of `rule` in its current window, with its limit. At most `max_rules`
    /// rules are tracked; others are not recorded.
    pub fn usage(&self, rule: &str, used: u64, limit: u64, max_rules: usize) {
        let Ok(mut usage) = self.usage.lock() else {
            return;
        };
        if usage.len() < max_rules || usage.contains_key(rule) {
            usage.insert(rule.to_owned(), WindowUsage { used, limit });
        }
    }

    /// Streams open now.
    pub fn streams_open(&self) -> u64 {
        self.streams_open.load(Ordering::Relaxed)
    }

    /// Buckets tracked by open streams now.
    pub fn buckets_tracked(&self) -> u64 {
        self.buckets_tracked.load(Ordering::Relaxed)
    }

    /// Prometheus text for these metrics; `extra` is the `EXTRA_TAGS` label list (no comma).
    pub(crate) fn render(&self, out: &mut String, extra: &str) {
        let sep = if extra.is_empty() { "" } else { "," };
        let simple = [
            (
                "turnstile_rlqs_streams_open",
                "RLQS streams open",
                "gauge",
                self.streams_open(),
            ),
            (
                "turnstile_rlqs_buckets_tracked",
                "buckets tracked by open RLQS streams",
                "gauge",
                self.buckets_tracked(),
            ),
            (
                "turnstile_rlqs_reports_total",
                "RLQS usage reports received",
                "counter",
                self.reports.load(Ordering::Relaxed),
            ),
            (
                "turnstile_rlqs_refused_total",
                "RLQS reports refused (the stream ended with an error)",
                "counter",
                self.refused.load(Ordering::Relaxed),
            ),
            (
                "turnstile_rlqs_window_refreshes_total",
                "RLQS responses pushed at a window's end without a report",
                "counter",
                self.refreshes.load(Ordering::Relaxed),
            ),
            (
                "turnstile_rlqs_store_errors_total",
                "RLQS reports or window-end refreshes the counter store could not take (nothing assigned)",
                "counter",
                self.store_errors.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, kind, value) in simple {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            let _ = writeln!(out, "{name}{{{extra}}} {value}");
        }
        let name = "turnstile_rlqs_assignments_total";
        let _ = writeln!(
            out,
            "# HELP {name} RLQS bucket assignments sent, by kind\n# TYPE {name} counter"
        );
        for (kind, n) in KINDS.iter().zip(&self.assignments) {
            let n = n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{kind=\"{kind}\"{sep}{extra}}} {n}");
        }
        let Ok(usage) = self.usage.lock() else { return };
        for (name, help, pick) in [
            (
                "turnstile_rlqs_window_usage",
                "allowed requests in the current window of an RLQS-served rule, all replicas",
                0,
            ),
            (
                "turnstile_rlqs_window_limit",
                "the limit per window of an RLQS-served rule",
                1,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (rule, WindowUsage { used, limit }) in usage.iter() {
                let value = if pick == 0 { used } else { limit };
                let _ = writeln!(
                    out,
                    "{name}{{rule=\"{}\"{sep}{extra}}} {value}",
                    escape(rule)
                );
            }
        }
    }
}
