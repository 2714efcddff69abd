//! The reference's stats key of a matched descriptor, as path segments: the domain, then one
//! segment per level. Exact matches use `key_value`, key-only matches `key`, wildcards
//! `key_pattern`; `value_to_metric` uses the request's value at that level, `detailed_metric`
//! at every level; `share_threshold` always keeps the pattern. Overrides use the request's
//! entries. `:` and `|` become `_`, as in the reference.

use crate::limiter::{Applied, Entry};
use crate::rules::LevelMatch;

fn sanitize(text: &str) -> String {
    text.replace([':', '|'], "_")
}

fn runtime(entry: &Entry) -> String {
    if entry.value.is_empty() {
        entry.key.clone()
    } else {
        format!("{}_{}", entry.key, entry.value)
    }
}

/// The stats key segments (domain first) for a descriptor with `entries` under `applied`.
pub(crate) fn segments(domain: &str, entries: &[Entry], applied: &Applied<'_>) -> Vec<String> {
    let mut out = Vec::with_capacity(entries.len() + 1);
    out.push(sanitize(domain));
    let Some(rule) = applied.rule() else {
        out.extend(entries.iter().map(|e| sanitize(&runtime(e))));
        return out;
    };
    for (level, entry) in rule.path.iter().zip(entries) {
        let segment = match &level.matched {
            LevelMatch::Wildcard {
                pattern,
                share_threshold: true,
            } => format!("{}_{pattern}", level.key),
            _ if rule.detailed_metric => runtime(entry),
            LevelMatch::Exact(value) => format!("{}_{value}", level.key),
            _ if level.value_to_metric => runtime(entry),
            LevelMatch::Wildcard { pattern, .. } => format!("{}_{pattern}", level.key),
            LevelMatch::Default => level.key.clone(),
        };
        out.push(sanitize(&segment));
    }
    out
}

/// Whether the key depends on request values (and so needs the cardinality bound).
pub(crate) fn is_dynamic(applied: &Applied<'_>) -> bool {
    match applied.rule() {
        None => true,
        Some(rule) => rule.detailed_metric || rule.path.iter().any(|l| l.value_to_metric),
    }
}
