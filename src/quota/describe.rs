//! How RLQS serves each configured limit, in words: the bucket ids that reach it and what they
//! are assigned (`turnstile check-config DIR --rlqs` and `/rlconfig?rlqs`).

use crate::rules::{Algorithm, LevelMatch, Limit, Rate};

/// One line per limit: `full_key: bucket {k: v, …} → what`. A value is the exact value, the
/// wildcard pattern, or `*` for a key-only level (any value).
pub fn describe(limit: &Limit) -> String {
    let pairs: Vec<String> = limit
        .path
        .iter()
        .map(|level| {
            let value = match &level.matched {
                LevelMatch::Exact(value) => value.as_str(),
                LevelMatch::Wildcard { pattern, .. } => pattern.as_str(),
                LevelMatch::Default => "*",
            };
            format!("{}: {value}", level.key)
        })
        .collect();
    let served = match limit.rate {
        Rate::Unlimited { .. } => "ALLOW_ALL (unlimited, not counted)".to_owned(),
        Rate::Limited(rate) if rate.algorithm == Algorithm::Concurrency => {
            "not served by RLQS (reports cannot measure requests in flight): RLQS_UNMATCHED_ACTION"
                .to_owned()
        }
        Rate::Limited(rate) => {
            let period = match rate.period.multiplier() {
                1 => rate.unit().name().to_ascii_lowercase(),
                n => format!("{n} {}s", rate.unit().name().to_ascii_lowercase()),
            };
            let mut text = format!(
                "fair share of {} per {period} in fixed windows",
                rate.requests_per_unit
            );
            if rate.algorithm != Algorithm::FixedWindow {
                text.push_str(&format!(" (configured {})", rate.algorithm.name()));
            }
            if limit.shadow_mode || limit.quota_mode {
                text = format!("counted as a {text}, then ALLOW_ALL (shadow or quota mode)");
            }
            text
        }
    };
    format!(
        "{}: bucket {{{}}} → {served}",
        limit.full_key,
        pairs.join(", ")
    )
}
