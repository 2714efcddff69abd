//! The YAML reader's messages, said in the rule file's terms: what was found and what belongs
//! there ("expected a list of descriptor maps, found the text 'a'"), unknown keys with the keys
//! allowed at that place. Messages this module does not recognise pass through unchanged.

/// Rewrites one reader message.
pub(crate) fn in_rule_file_terms(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return format!("expected {expected}, found {}", found_as_text(found));
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return format!(
            "expected {}, found {}",
            expected_number(expected),
            found_as_text(found)
        );
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split_once('`').map_or(rest, |(k, _)| k);
        return match suggestion(key) {
            Some(known) => format!("unknown key '{key}' (did you mean '{known}'?)"),
            None => format!(
                "unknown key '{key}': not a rule file key (a file has `domain` and \
                 `descriptors`; see docs/configuration.md for the keys of each level)"
            ),
        };
    }
    if let Some(rest) = message.strip_prefix("duplicate field `") {
        let key = rest.trim_end_matches('`');
        return format!("key '{key}' appears twice in the same map");
    }
    if message.starts_with("multiple YAML documents detected") {
        return "a rule file holds one YAML document, and this one has several (a `---` line \
                starts another): put each domain in a file of its own"
            .into();
    }
    if let Some(breach) = message.strip_prefix("budget breached: ") {
        return budget(breach);
    }
    if let Some(kind) = message.strip_prefix("invalid ")
        && matches!(kind, "u32" | "u64" | "i64")
    {
        return format!("expected {}", expected_number(kind));
    }
    message.to_owned()
}

/// The YAML reader's budget breaches (its guard against YAML bombs), in words.
fn budget(breach: &str) -> String {
    use super::{MAX_DEPTH, MAX_NODES};
    let kind = breach.split([' ', '{']).next().unwrap_or(breach);
    match kind {
        "Nodes" | "Events" => format!(
            "the file has more than {MAX_NODES} YAML nodes (maps, lists and values; about \
             {} flat descriptors): split it into several files",
            MAX_NODES / 11
        ),
        "Depth" => format!(
            "descriptors nest deeper than {} levels, the most the reader accepts",
            MAX_DEPTH / 2 - 1
        ),
        "Aliases" | "Anchors" | "AliasAnchorRatio" => {
            "the file uses too many YAML aliases or anchors (a guard against YAML bombs)".into()
        }
        _ => format!(
            "the file exceeds a limit of the YAML reader (a guard against YAML bombs): {breach}"
        ),
    }
}

/// Every key a rule file may use, at any level.
const KEYS: &[&str] = &[
    "domain",
    "descriptors",
    "key",
    "value",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "fail_open",
    "on_store_failure",
    "unit_multiplier",
    "algorithm",
    "burst",
];

/// The known key that `key` most likely misspells: the same letters but for case and
/// underscores, or at most two edits away.
fn suggestion(key: &str) -> Option<&'static str> {
    let squash = |k: &str| -> String {
        k.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = squash(key);
    KEYS.iter()
        .map(|known| (edit_distance(&wanted, &squash(known)), *known))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, known)| known)
}

/// Levenshtein distance (the keys are short ASCII words).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// serde's description of an unexpected value, as the rule file's author would say it.
fn found_as_text(found: &str) -> String {
    if let Some(text) = found.strip_prefix("string ") {
        return format!("the text '{}'", text.trim_matches('"'));
    }
    for (prefix, what) in [
        ("integer ", "the number"),
        ("floating point ", "the number"),
        ("boolean ", "the boolean"),
    ] {
        if let Some(value) = found.strip_prefix(prefix) {
            return format!("{what} {}", value.trim_matches('`'));
        }
    }
    match found {
        "unit value" | "null" | "none" => "nothing (an empty value)".into(),
        "sequence" => "a list".into(),
        "map" => "a map".into(),
        other => other.to_owned(),
    }
}

fn expected_number(kind: &str) -> String {
    match kind {
        "u32" => "a whole number from 0 to 4294967295".into(),
        "u64" => "a whole number of 0 or more".into(),
        "i64" => "a whole number".into(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::in_rule_file_terms;

    #[test]
    fn reader_messages_in_rule_file_terms() {
        let cases = [
            (
                "invalid type: string \"a\", expected a list of descriptor maps",
                "expected a list of descriptor maps, found the text 'a'",
            ),
            (
                "invalid type: floating point `0.25`, expected a rule file",
                "expected a rule file, found the number 0.25",
            ),
            (
                "invalid type: sequence, expected a descriptor map",
                "expected a descriptor map, found a list",
            ),
            (
                "unknown field `ratelimit`",
                "unknown key 'ratelimit' (did you mean 'rate_limit'?)",
            ),
            (
                "unknown field `requestsperunit`",
                "unknown key 'requestsperunit' (did you mean 'requests_per_unit'?)",
            ),
            (
                "invalid u32",
                "expected a whole number from 0 to 4294967295",
            ),
            ("something else", "something else"),
        ];
        for (from, to) in cases {
            assert_eq!(in_rule_file_terms(from), to, "{from}");
        }
    }
}
