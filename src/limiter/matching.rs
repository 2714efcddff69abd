//! Which limit applies to each descriptor of a request: the rule its entries match, or the
//! request's own override (keeping the matched rule's algorithm), and the limits that the
//! matched ones replace (`replaces:` in the configuration).
//!
//! Must not touch: counting, stores, the answer.

use super::{Applied, LimitOverride, Request};
use crate::rules::Rate;

/// Each descriptor's limit: an override wins over the configuration and keeps the matched
/// rule's algorithm (a fixed window when none matched); `None` when nothing matched.
pub(super) fn matched<'r>(
    domain: &'r crate::rules::Domain,
    request: &Request<'_>,
) -> Vec<Option<Applied<'r>>> {
    request
        .descriptors
        .iter()
        .map(|d| {
            let rule = domain.lookup(d.entries.iter().map(|e| (&*e.key, &*e.value)));
            match d.limit_override {
                Some(o) => Some(Applied::Override(LimitOverride {
                    algorithm: rule
                        .and_then(|l| match l.rate {
                            Rate::Limited(rate) => Some(rate.algorithm),
                            Rate::Unlimited { .. } => None,
                        })
                        .unwrap_or_default(),
                    ..o
                })),
                None => rule.map(Applied::Rule),
            }
        })
        .collect()
}

/// The names the matched limits replace, as the numbers the rule set gave them: a limit so
/// named is dropped and not counted.
pub(super) struct Replaced(Vec<u32>);

impl Replaced {
    pub(super) fn replaces(&self, limit: &crate::rules::Limit) -> bool {
        limit.replaceable_as.is_some_and(|id| self.0.contains(&id))
    }
}

pub(super) fn replaced(applied: &[Option<Applied<'_>>]) -> Replaced {
    Replaced(
        applied
            .iter()
            .flatten()
            .filter_map(Applied::rule)
            .flat_map(|l| l.replaces_ids.iter().copied())
            .collect(),
    )
}
