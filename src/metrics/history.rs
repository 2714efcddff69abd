//! Each rule's calls and refusals over the last minutes, for the status page's charts: every
//! [`STEP`] the sampler reads the cumulative hits and over-limit hits of every rule whose stats
//! key comes from the configuration (one per rule, at most [`MAX_RULES`] of them, the busiest
//! kept), and keeps [`SAMPLES`] samples; [`Metrics::history`] turns them into per-step deltas,
//! with the step in progress read live. Rules counted under request values (`detailed_metric`,
//! `value_to_metric`) and `DISABLE_STATS` have no history.
//!
//! Must not touch: the counters themselves (read, never reset), rendering.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use super::Metrics;
use crate::clock::{Clock, SystemClock};

/// Time between samples, in milliseconds.
pub const STEP: u64 = 10_000;
/// Samples kept: ten minutes.
pub const SAMPLES: usize = 60;
/// Rules per sample.
pub const MAX_RULES: usize = 200;

/// One sample: when, and each rule's cumulative (hits, over-limit hits).
#[derive(Debug)]
struct Sample {
    at_ms: u64,
    rules: HashMap<Arc<str>, (u64, u64)>,
}

/// The samples taken.
#[derive(Debug, Default)]
pub struct History {
    samples: Mutex<VecDeque<Sample>>,
}

/// A rule's hits and refusals per step, oldest first.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RuleHistory {
    /// The rule (`domain.key_value.key`).
    pub rule: String,
    /// Hits per step.
    pub hits: Vec<u64>,
    /// Over-limit hits per step.
    pub refused: Vec<u64>,
}

/// Every rule's history.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HistorySnapshot {
    /// Milliseconds per step.
    pub step_ms: u64,
    /// The Unix millisecond each step ends at (the last one is now).
    pub ends_ms: Vec<u64>,
    /// Rules, the most refused over the history first.
    pub rules: Vec<RuleHistory>,
}

impl Metrics {
    /// Each configured rule's cumulative (hits, over-limit hits), the busiest [`MAX_RULES`].
    fn cumulative(&self) -> HashMap<Arc<str>, (u64, u64)> {
        let read = self
            .by_full_key
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut rules: Vec<(Arc<str>, (u64, u64))> = read
            .iter()
            .map(|(rule, stats)| {
                let hits = stats.total_hits.load(Ordering::Relaxed);
                let over = stats.over_limit.load(Ordering::Relaxed);
                (Arc::from(rule.as_str()), (hits, over))
            })
            .collect();
        drop(read);
        rules.sort_by_key(|rule| std::cmp::Reverse(rule.1.0));
        rules.truncate(MAX_RULES);
        rules.into_iter().collect()
    }

    /// Takes a sample now (the sampler calls this every [`STEP`]).
    pub fn sample_history(&self) {
        let sample = Sample {
            at_ms: SystemClock.now().millis(),
            rules: self.cumulative(),
        };
        let mut samples = self
            .history
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// Per-step deltas between the samples, and from the last one to now.
    pub fn history(&self) -> HistorySnapshot {
        let now = Sample {
            at_ms: SystemClock.now().millis(),
            rules: self.cumulative(),
        };
        let samples = self
            .history
            .samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let points: Vec<&Sample> = samples.iter().chain(std::iter::once(&now)).collect();
        let mut rules: Vec<RuleHistory> = now
            .rules
            .keys()
            .map(|rule| {
                let at = |p: &Sample| p.rules.get(rule).copied().unwrap_or_default();
                let steps = points.windows(2).map(|w| {
                    let (a, b) = (at(w[0]), at(w[1]));
                    (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))
                });
                let (hits, refused) = steps.unzip();
                RuleHistory {
                    rule: rule.to_string(),
                    hits,
                    refused,
                }
            })
            .collect();
        let total = |r: &RuleHistory| r.refused.iter().sum::<u64>();
        rules.sort_by(|a, b| total(b).cmp(&total(a)).then(a.rule.cmp(&b.rule)));
        HistorySnapshot {
            step_ms: STEP,
            ends_ms: points.iter().skip(1).map(|p| p.at_ms).collect(),
            rules,
        }
    }
}
