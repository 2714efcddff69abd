//! Value patterns with one or more `*`, each matching zero or more characters. Segments must
//! appear in order without overlapping: the first is a prefix, the last a suffix.

/// A compiled wildcard pattern.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    text: String,
    segments: Vec<String>,
}

impl Pattern {
    /// Compiles `text`; `None` if it has no `*` (then it is an exact value).
    pub(crate) fn new(text: &str) -> Option<Pattern> {
        if !text.contains('*') {
            return None;
        }
        Some(Pattern {
            text: text.to_owned(),
            segments: text.split('*').map(str::to_owned).collect(),
        })
    }

    /// The pattern as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches. Allocation-free.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.segments.split_first() {
            Some(split) => split,
            None => return false,
        };
        let (last, middle) = match rest.split_last() {
            Some(split) => split,
            None => return value == first,
        };
        let Some(mut remaining) = value.strip_prefix(first.as_str()) else {
            return false;
        };
        for segment in middle {
            match remaining.find(segment.as_str()) {
                Some(at) => remaining = &remaining[at + segment.len()..],
                None => return false,
            }
        }
        remaining.ends_with(last.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    fn matches(pattern: &str, value: &str) -> bool {
        Pattern::new(pattern).expect("pattern").matches(value)
    }

    #[test]
    fn trailing_middle_and_multiple_stars() {
        assert!(matches("foo*", "foo1"));
        assert!(matches("foo*", "foo"));
        assert!(!matches("foo*", "bar"));
        for ok in ["barab", "bar123b", "barb"] {
            assert!(matches("bar*b", ok), "{ok}");
        }
        for bad in ["bara", "xbarb", "bar"] {
            assert!(!matches("bar*b", bad), "{bad}");
        }
        assert!(matches("foo*bar*baz", "foo123bar456baz"));
        assert!(matches("foo*bar*baz", "foobarbaz"));
        assert!(!matches("foo*bar*baz", "foobaz"));
        assert!(matches("*", ""));
        assert!(matches("*x", "x"));
        assert!(!matches("a*a", "a"));
    }

    #[test]
    fn exact_text_is_not_a_pattern() {
        assert!(Pattern::new("foo").is_none());
    }
}
