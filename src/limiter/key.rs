//! Counter keys. A key encodes prefix, domain, entries, window length and window start without
//! ambiguity, is printable ASCII without spaces, and is at most [`MAX_KEY_LEN`] bytes, so every
//! value a client can send (spaces, newlines, NUL, non-ASCII, megabytes) is countable under a
//! key of its own. Bytes outside a small safe set are percent-escaped, and the separators
//! (`|`, `=`, `@`) are themselves always escaped inside components, so two different
//! descriptors never share a key. A key that would be too long is replaced by the prefix and a
//! 128-bit hash of the full encoding.

use std::fmt::Write;

use xxhash_rust::xxh3::xxh3_128;

use crate::storage::MAX_KEY_LEN;

fn is_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b':' | b'*')
}

fn push_escaped(out: &mut String, text: &str) {
    for &b in text.as_bytes() {
        if is_safe(b) {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// Which bytes window counters are kept under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyLayout {
    /// Turnstile's escaped, unambiguous, bounded keys.
    #[default]
    Turnstile,
    /// envoyproxy/ratelimit's bytes for window counters, `prefix + domain + "_" + (key + "_" +
    /// value + "_")… + window start`, so both services share counters in one Redis during a
    /// cut-over. Ambiguous (`(a, b_c)` and `(a_b, c)` share a key; the period is not in the key,
    /// so two limits on the same entries whose windows start together share a counter) and
    /// unbounded, exactly as the reference. Other algorithms keep Turnstile's layout.
    Reference,
}

/// A counter key up to its tail: prefix, domain and entries, escaped. One base serves every
/// counter of a descriptor (a sliding window's two windows, for instance).
#[derive(Debug, Clone)]
pub(crate) struct KeyBase {
    text: String,
    prefix_len: usize,
    /// The reference's bytes up to the window start, when that layout is on.
    reference: Option<String>,
}

impl KeyBase {
    /// The base for `entries` (the request's values, or a wildcard pattern where
    /// `share_threshold` shares one counter).
    pub(crate) fn new<'a>(
        prefix: &str,
        domain: &str,
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> KeyBase {
        let mut text = String::with_capacity(64);
        push_escaped(&mut text, prefix);
        let prefix_len = text.len();
        push_escaped(&mut text, domain);
        for (k, v) in entries {
            text.push('|');
            push_escaped(&mut text, k);
            text.push('=');
            push_escaped(&mut text, v);
        }
        KeyBase {
            text,
            prefix_len,
            reference: None,
        }
    }

    /// Also keeps the reference's key bytes (`prefix + domain + "_" + (key + "_" + value +
    /// "_")…`) for window counters.
    pub(crate) fn with_reference<'a>(
        mut self,
        prefix: &str,
        domain: &str,
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> KeyBase {
        let mut text = format!("{prefix}{domain}_");
        for (k, v) in entries {
            text.push_str(k);
            text.push('_');
            text.push_str(v);
            text.push('_');
        }
        self.reference = Some(text);
        self
    }

    /// The key for a tail: the reference's bytes for windows when that layout is on, else
    /// Turnstile's.
    pub(crate) fn tail(&self, tail: super::algorithm::Tail) -> String {
        use super::algorithm::Tail;
        match (tail, &self.reference) {
            (Tail::Window { start, .. }, Some(reference)) => format!("{reference}{start}"),
            (Tail::Window { period, start }, None) => self.with(format_args!("{period}@{start}")),
            (Tail::Demand { period, start }, _) => self.with(format_args!("{period}~d{start}")),
            (Tail::Lease { period }, _) => self.with(format_args!("{period}~c")),
            (Tail::Bucket { period, rate }, _) => self.with(format_args!("{period}~tb{rate}")),
        }
    }

    /// The full key with `tail` (made of safe characters: digits, `@`, `~`, letters), hashed
    /// when it would be longer than [`MAX_KEY_LEN`].
    fn with(&self, tail: std::fmt::Arguments<'_>) -> String {
        // Room for the longest tail (two 20-digit numbers and a separator): one allocation.
        let mut key = String::with_capacity(self.text.len() + 48);
        key.push_str(&self.text);
        key.push('|');
        let _ = key.write_fmt(tail);
        if key.len() <= MAX_KEY_LEN {
            return key;
        }
        let hash = xxh3_128(key.as_bytes());
        key.truncate(self.prefix_len.min(MAX_KEY_LEN - 34));
        let _ = write!(key, "#{hash:032x}");
        key
    }
}

/// Builds the key for one fixed-window counter.
pub fn counter_key<'a>(
    prefix: &str,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    period: u64,
    window_start: u64,
) -> String {
    KeyBase::new(prefix, domain, entries).with(format_args!("{period}@{window_start}"))
}

#[cfg(test)]
mod tests {
    use super::counter_key;
    use crate::storage::MAX_KEY_LEN;
    use proptest::prelude::*;

    fn key(entries: &[(&str, &str)]) -> String {
        counter_key("p:", "domain", entries.iter().copied(), 60, 1200)
    }

    #[test]
    fn readable_for_plain_values() {
        assert_eq!(
            key(&[("k", "v"), ("k2", "v2")]),
            "p:domain|k=v|k2=v2|60@1200"
        );
    }

    #[test]
    fn values_that_would_collide_when_joined_do_not() {
        assert_ne!(key(&[("a", "b_c")]), key(&[("a_b", "c")]));
        assert_ne!(key(&[("a", "b|c=d")]), key(&[("a", "b"), ("c", "d")]));
        assert_ne!(key(&[("a", "b c")]), key(&[("a", "b"), ("c", "")]));
    }

    #[test]
    fn hostile_values_give_safe_bounded_keys() {
        let long = "x".repeat(1 << 20);
        for value in ["with space", "new\nline", "nul\0", "ünïcødé", long.as_str()] {
            let k = key(&[("k", value)]);
            assert!(k.len() <= MAX_KEY_LEN, "{}", k.len());
            assert!(k.bytes().all(|b| b.is_ascii_graphic()), "{k}");
        }
        assert_ne!(key(&[("k", &long)]), key(&[("k", &long[1..])]));
    }

    proptest! {
        #[test]
        fn distinct_descriptors_get_distinct_keys(
            a in proptest::collection::vec(("[a-c_|=%]{0,3}", "[a-c_|= %]{0,3}"), 1..3),
            b in proptest::collection::vec(("[a-c_|=%]{0,3}", "[a-c_|= %]{0,3}"), 1..3),
        ) {
            let ka = counter_key("", "d", a.iter().map(|(k, v)| (k.as_str(), v.as_str())), 1, 0);
            let kb = counter_key("", "d", b.iter().map(|(k, v)| (k.as_str(), v.as_str())), 1, 0);
            prop_assert_eq!(a == b, ka == kb);
        }
    }
}
