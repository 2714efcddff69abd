//! The reference's stats key of a matched descriptor, as path segments: the domain, then one
//! segment per level. Exact matches use `key_value`, key-only matches `key`, wildcards
//! `key_pattern`; `value_to_metric` uses the request's value at that level, `detailed_metric`
//! at every level; `share_threshold` always keeps the pattern. Overrides use the request's
//! entries. `:` and `|` become `_`, as in the reference, and so does every control character
//! (`escape`: a value never starts a statsd line of its own).

use crate::limiter::{Applied, Entry};
use crate::rules::LevelMatch;

fn sanitize(text: &str) -> String {
    super::escape::statsd_segment(text).into_owned()
}

fn runtime(entry: &Entry<'_>) -> String {
    if entry.value.is_empty() {
        entry.key.to_string()
    } else {
        format!("{}_{}", entry.key, entry.value)
    }
}

/// The stats key segments (domain first) for a descriptor with `entries` under `applied`.
pub(crate) fn segments(domain: &str, entries: &[Entry<'_>], applied: &Applied<'_>) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::{is_dynamic, segments};
    use crate::config::{LoadOptions, parse_files};
    use crate::limiter::{Applied, Entry, LimitOverride};
    use crate::rules::Unit;

    const RULES: &str = r#"
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: { unit: second, requests_per_unit: 5 }
  - key: key7
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 70 }
  - key: route
    value: "api/*"
    share_threshold: true
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: wild
    value: "foo*"
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: vtm
    value_to_metric: true
    descriptors:
      - key: inner
        rate_limit: { unit: minute, requests_per_unit: 1 }
"#;

    fn key(entries: &[(&str, &str)]) -> (String, bool) {
        let loaded =
            parse_files(&[("t.yaml".into(), RULES.into())], LoadOptions::default()).expect("rules");
        let domain = loaded.rules.domain("test-domain").expect("domain");
        let limit = domain.lookup(entries.iter().copied()).expect("a limit");
        let entries: Vec<Entry<'_>> = entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect();
        let applied = Applied::Rule(limit);
        (
            segments("test-domain", &entries, &applied).join("."),
            is_dynamic(&applied),
        )
    }

    #[test]
    fn the_reference_stats_keys() {
        assert_eq!(
            key(&[("key1", "value1"), ("subkey1", "x")]),
            ("test-domain.key1_value1.subkey1".into(), false)
        );
        assert_eq!(key(&[("key7", "X")]), ("test-domain.key7_X".into(), true));
        assert_eq!(
            key(&[("route", "api/v1"), ("method", "GET")]),
            ("test-domain.route_api/*.method".into(), false)
        );
        assert_eq!(
            key(&[("wild", "foo1")]),
            ("test-domain.wild_foo*".into(), false)
        );
        assert_eq!(
            key(&[("vtm", "abc"), ("inner", "z")]),
            ("test-domain.vtm_abc.inner".into(), true)
        );
        assert_eq!(
            key(&[("key7", "a:b|c")]).0,
            "test-domain.key7_a_b_c",
            "':' and '|' become '_'"
        );
    }

    #[test]
    fn overrides_use_the_request_entries() {
        let entries = vec![
            Entry {
                key: "k".into(),
                value: "v".into(),
            },
            Entry {
                key: "bare".into(),
                value: String::new().into(),
            },
        ];
        let applied = Applied::Override(LimitOverride {
            algorithm: crate::rules::Algorithm::FixedWindow,
            requests_per_unit: 1,
            unit: Unit::Minute,
        });
        assert_eq!(segments("d", &entries, &applied).join("."), "d.k_v.bare");
        assert!(is_dynamic(&applied));
    }
}
