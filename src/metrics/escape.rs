//! What we emit, escaped where a name or a label is composed: every byte that means something
//! in a statsd line, a DogStatsD tag list or the Prometheus text format, wherever it comes from
//! (a descriptor value, a domain, an operator's setting).
//!
//! - A statsd name segment: `:` and `|` become `_` (the reference's own rule, which ends the
//!   name and the value), and so does every control character (a `\n` or `\r` would start a
//!   line of the client's choosing).
//! - A DogStatsD tag (key or value): also `,` (the next tag), `|` and `#` (another section), and
//!   control characters become `_`; `:` is kept in a value (DogStatsD splits a tag at its first).
//! - A Prometheus label value: `\`, `"` and `\n` escaped as the text format says, and every other
//!   control character replaced by `_` (the format has no escape for them, and a `\r` ends a line
//!   for some readers).
//!
//! Must not touch: which names and labels there are (the tables' and `stats_key`'s).

use std::borrow::Cow;

fn replaced(text: &str, bad: impl Fn(char) -> bool) -> Cow<'_, str> {
    match text.contains(&bad) {
        false => Cow::Borrowed(text),
        true => Cow::Owned(text.chars().map(|c| if bad(c) { '_' } else { c }).collect()),
    }
}

/// A statsd name segment.
pub(crate) fn statsd_segment(text: &str) -> Cow<'_, str> {
    replaced(text, |c| c == ':' || c == '|' || c.is_control())
}

/// A DogStatsD tag key (`key: true`, where `:` also ends it) or value.
pub(crate) fn dogstatsd_tag(text: &str, key: bool) -> Cow<'_, str> {
    replaced(text, |c| {
        matches!(c, ',' | '|' | '#') || (key && c == ':') || c.is_control()
    })
}

/// A Prometheus label value.
pub(crate) fn prometheus_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push('_'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_that_means_something_survives() {
        assert_eq!(
            statsd_segment("a\ninjected.metric:999|c"),
            "a_injected.metric_999_c"
        );
        assert_eq!(statsd_segment("x\ry"), "x_y");
        assert_eq!(statsd_segment("plain.value"), "plain.value");
        assert_eq!(dogstatsd_tag("dm_b,env:prod", false), "dm_b_env:prod");
        assert_eq!(dogstatsd_tag("k:v|#x", true), "k_v__x");
        assert_eq!(prometheus_label("a\"b\\c\nd\re"), "a\\\"b\\\\c\\nd_e");
    }
}
