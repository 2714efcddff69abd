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

/// A counter key up to its tail: prefix, domain and entries, escaped. One base serves every
/// counter of a descriptor (a sliding window's two windows, for instance).
#[derive(Debug, Clone)]
pub(crate) struct KeyBase {
    text: String,
    prefix_len: usize,
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
        KeyBase { text, prefix_len }
    }

    /// The full key with `tail` (made of safe characters: digits, `@`, `~`, letters), hashed
    /// when it would be longer than [`MAX_KEY_LEN`].
    pub(crate) fn with(&self, tail: &str) -> String {
        let mut key = String::with_capacity(self.text.len() + tail.len() + 1);
        key.push_str(&self.text);
        key.push('|');
        key.push_str(tail);
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
    KeyBase::new(prefix, domain, entries).with(&format!("{period}@{window_start}"))
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
