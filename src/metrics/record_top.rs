//! Feeding the top-limited summaries ([`super::top`]) from a decided request: per descriptor
//! under a limit, the hits answered over it (or that shadow mode let through) and those near
//! it, with the reference's split. A check-only call refused (no hits, as a token budget's
//! request-time check) counts as one refusal; refunds count nothing.
//!
//! Must not touch: the stats counters (`record`), the decision.

use super::Metrics;
use super::split::split_hits;
use super::top::Kind;
use crate::limiter::{Code, Counting, Request, Verdict};

/// The rule name of request-supplied limits (no rule of the configuration applies).
const OVERRIDE: &str = " (limit sent by the request)";

impl Metrics {
    /// Adds a decided request's refusals and near-limit hits to the summaries.
    pub(super) fn record_top(&self, request: &Request<'_>, verdict: &Verdict<'_>) {
        for (descriptor, status) in request.descriptors.iter().zip(&verdict.statuses) {
            let Some(limited) = status.limit else {
                continue;
            };
            if descriptor.refund {
                continue;
            }
            let limit = u64::from(limited.rate.requests_per_unit);
            let hits = status.counting.hits();
            let (over, near) = match status.counting {
                Counting::Counted { after, .. } if hits > 0 => {
                    let split = split_hits(limit, self.near_limit_ratio, after, hits);
                    (split.over, split.near)
                }
                Counting::LocalCache { .. } => (hits.max(1), 0),
                _ if status.code == Code::OverLimit || status.shadowed => (1, 0),
                _ => (0, 0),
            };
            if over + near == 0 {
                continue;
            }
            let named;
            let rule = match limited.applied.rule() {
                Some(rule) => rule.full_key.as_str(),
                None => {
                    named = format!("{}{OVERRIDE}", request.domain);
                    named.as_str()
                }
            };
            let entries = descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_ref(), e.value.as_ref()));
            self.top.record(rule, entries.clone(), Kind::Over, over);
            self.top.record(rule, entries, Kind::Near, near);
        }
    }
}
