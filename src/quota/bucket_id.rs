//! Bucket ids and how they map onto a domain's descriptor tree.
//!
//! A bucket id is an unordered set of pairs; the tree is ordered. The pairs match the path that
//! uses each of them exactly once, the tree choosing the order (see
//! [`Domain::lookup_unordered`](crate::rules::Domain::lookup_unordered)): `{user: alice, path:
//! /api}` reaches a limit configured under `path: /api` → `user`, or under `user` → `path`,
//! whichever the file has (ascending key order decides when it has both). What the limit
//! says then decides how the bucket is counted.

use crate::rules::{Algorithm, Limit, Rate, RuleSet};

/// The most pairs a bucket id may have.
pub const MAX_BUCKET_PAIRS: usize = 32;

/// A bucket id: its pairs sorted by key (keys are distinct, as in a protobuf map).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId(Vec<(String, String)>);

impl BucketId {
    /// A bucket id from its pairs; `None` when there are none or more than
    /// [`MAX_BUCKET_PAIRS`]. A repeated key keeps its last value (protobuf map semantics).
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Option<BucketId> {
        let mut pairs: Vec<(String, String)> = pairs.into_iter().collect();
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, earlier| later.0 == earlier.0);
        (!pairs.is_empty() && pairs.len() <= MAX_BUCKET_PAIRS).then_some(BucketId(pairs))
    }

    /// The pairs, sorted by key.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// Bytes of its keys and values together (what `RLQS_MAX_BUCKET_ID_BYTES` bounds).
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// How a bucket is served under the current rules.
#[derive(Debug)]
pub enum Resolution<'r> {
    /// No limit (unknown domain, no path, or a concurrency limit, which reports cannot
    /// measure): the unmatched action applies.
    Unmatched,
    /// `unlimited: true`: allowed, not counted.
    Unlimited,
    /// Counted in fixed windows of the limit's period.
    Counted {
        /// The rule.
        limit: &'r Limit,
        /// Requests per window.
        per_window: u64,
        /// Window length (seconds).
        period: u64,
        /// The pairs in the order of the rule's path (the counter key's order).
        entries: Vec<(&'r str, &'r str)>,
        /// Denials are enforced (not shadow or quota mode).
        enforce: bool,
    },
}

/// Resolves `bucket` in `domain` under `rules`.
pub fn resolve<'r>(rules: &'r RuleSet, domain: &str, bucket: &'r BucketId) -> Resolution<'r> {
    let Some(tree) = rules.domain(domain) else {
        return Resolution::Unmatched;
    };
    let pairs: Vec<(&str, &str)> = bucket
        .pairs()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let Some((limit, order)) = tree.lookup_unordered(&pairs) else {
        return Resolution::Unmatched;
    };
    match limit.rate {
        Rate::Unlimited { .. } => Resolution::Unlimited,
        Rate::Limited(rate) if rate.algorithm == Algorithm::Concurrency => Resolution::Unmatched,
        Rate::Limited(rate) => Resolution::Counted {
            limit,
            per_window: u64::from(rate.requests_per_unit),
            period: rate.period.seconds(),
            entries: order.into_iter().map(|i| pairs[i]).collect(),
            enforce: !limit.shadow_mode && !limit.quota_mode,
        },
    }
}
