//! `TOP_LIMITED_SERIES`: the first N values of each rule's top-limited summaries as gauges,
//! `turnstile_top_limited_hits{rule, kind, rank, descriptor}`: the hits over the summary's window
//! (an upper bound, see [`super::top`]). The descriptor label is its entries as `key=value`
//! joined by `, `, bounded and escaped like every label built from request values; at most
//! N × 2 series per rule and [`super::top::MAX_RULES`] rules.
//!
//! Must not touch: the summaries' arithmetic (`top`), the other series (`render`).

use std::fmt::Write;

use super::Metrics;
use super::label::{bounded, escape};
use super::top::Listed;

const NAME: &str = "turnstile_top_limited_hits";

/// Appends the series, when `TOP_LIMITED_SERIES` asks for any.
pub(super) fn render(out: &mut String, m: &Metrics, extra: &str) {
    if m.top_series == 0 {
        return;
    }
    let snapshot = m.top.snapshot(m.top_series);
    let _ = writeln!(
        out,
        "# HELP {NAME} hits of the most limited descriptor values per rule over the last minutes \
         (TOP_LIMITED_SERIES)\n# TYPE {NAME} gauge"
    );
    let sep = if extra.is_empty() { "" } else { "," };
    for rule in &snapshot.rules {
        let name = escape(&bounded(&rule.rule));
        for (kind, listed) in [
            ("over_limit", &rule.over_limit),
            ("near_limit", &rule.near_limit),
        ] {
            for (rank, value) in listed.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{NAME}{{rule=\"{name}\",kind=\"{kind}\",rank=\"{}\",descriptor=\"{}\"{sep}{extra}}} {}",
                    rank + 1,
                    escape(&bounded(&descriptor(value))),
                    value.count
                );
            }
        }
    }
}

/// `key=value, key=value` (`…` when the summary kept only part of it).
fn descriptor(value: &Listed) -> String {
    let mut text = value
        .descriptor
        .entries
        .iter()
        .map(|[k, v]| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    if value.descriptor.cut {
        text.push('…');
    }
    text
}
