//! [`CounterKey`]: the only form in which a key reaches a store, so every store can rely on
//! its bound. Two layouts make one: Turnstile's ([`KeyWriter`]: every byte either from a fixed
//! set of separators and digits or percent-escaped, at most [`MAX_KEY_LEN`] bytes, longer
//! keys replaced by their kept prefix and a 128-bit hash) and the reference's
//! ([`CounterKey::reference`]: its bytes as they are, for sharing counters with
//! envoyproxy/ratelimit in one Redis, at most [`MAX_REFERENCE_KEY_LEN`] bytes).
//!
//! Must not touch: what the parts of a key mean (prefix, domain, entries, windows are the
//! limiter's), any store.

use std::fmt::Write;

use xxhash_rust::xxh3::xxh3_128;

/// The longest key in Turnstile's layout (186 raw bytes is 248 base64 bytes, within
/// memcached's 250-byte key limit).
pub const MAX_KEY_LEN: usize = 186;

/// The longest key in the reference's layout (Redis only). The reference has no bound; one
/// descriptor's values that long are abuse, and such a key is written in Turnstile's layout
/// instead (a counter the reference would not share, and no more than that).
pub const MAX_REFERENCE_KEY_LEN: usize = 4096;

/// A counter or bucket key a store accepts: in Turnstile's layout printable ASCII without
/// spaces and at most [`MAX_KEY_LEN`] bytes; in the reference's at most
/// [`MAX_REFERENCE_KEY_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey(String);

/// A key that is not one: too long, or with a byte Turnstile's layout escapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Longer than the layout's bound.
    #[error("a counter key of {len} bytes is longer than {max}")]
    TooLong {
        /// The key's length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A space, a control character or a non-ASCII byte.
    #[error("a counter key holds byte {byte:#04x}, which is not printable ASCII")]
    Unprintable {
        /// The first such byte.
        byte: u8,
    },
}

impl CounterKey {
    /// `text` as a key in Turnstile's layout, if it is one (printable ASCII without spaces,
    /// at most [`MAX_KEY_LEN`] bytes): for keys written elsewhere (tests, tools).
    pub fn checked(text: impl Into<String>) -> Result<CounterKey, KeyError> {
        let text = text.into();
        if let Some(&byte) = text.as_bytes().iter().find(|b| !b.is_ascii_graphic()) {
            return Err(KeyError::Unprintable { byte });
        }
        bounded(text, MAX_KEY_LEN)
    }

    /// `text` as a key in the reference's layout, bytes as they are, if it is at most
    /// [`MAX_REFERENCE_KEY_LEN`] bytes long.
    pub fn reference(text: String) -> Result<CounterKey, KeyError> {
        bounded(text, MAX_REFERENCE_KEY_LEN)
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn bounded(text: String, max: usize) -> Result<CounterKey, KeyError> {
    match text.len() {
        len if len > max => Err(KeyError::TooLong { len, max }),
        _ => Ok(CounterKey(text)),
    }
}

impl std::ops::Deref for CounterKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CounterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The separators a key in Turnstile's layout is built with; inside components they are
/// always escaped, so components never run into each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Separator {
    /// Between the domain and each entry, and before the tail (`|`).
    Part,
    /// Between an entry's key and value (`=`).
    Value,
    /// Before a window's start (`@`).
    Start,
    /// Before a tail's kind (`~`).
    Kind,
}

/// Writes a key in Turnstile's layout: components escaped, separators and numbers as they
/// are, the whole bounded by [`KeyWriter::finish`].
#[derive(Debug)]
pub struct KeyWriter {
    text: String,
    /// What a key too long keeps before its hash.
    kept: usize,
}

fn is_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/' | b':' | b'*')
}

impl KeyWriter {
    /// An empty key with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> KeyWriter {
        KeyWriter {
            text: String::with_capacity(capacity),
            kept: 0,
        }
    }

    /// Appends `text` escaped: bytes outside a small safe set (and so every separator) as `%XX`.
    pub fn component(&mut self, text: &str) -> &mut KeyWriter {
        for &b in text.as_bytes() {
            if is_safe(b) {
                self.text.push(char::from(b));
            } else {
                // Writing to a String cannot fail.
                let _ = write!(self.text, "%{b:02X}");
            }
        }
        self
    }

    /// Marks what has been written so far as the part a key too long keeps (the prefix).
    pub fn keep(&mut self) -> &mut KeyWriter {
        self.kept = self.text.len();
        self
    }

    /// Appends a separator.
    pub fn separator(&mut self, separator: Separator) -> &mut KeyWriter {
        self.text.push(match separator {
            Separator::Part => '|',
            Separator::Value => '=',
            Separator::Start => '@',
            Separator::Kind => '~',
        });
        self
    }

    /// Appends a short tag of lowercase letters (a tail's kind: `d`, `c`, `tb`).
    pub fn tag(&mut self, tag: Tag) -> &mut KeyWriter {
        self.text.push_str(match tag {
            Tag::Demand => "d",
            Tag::Lease => "c",
            Tag::TokenBucket => "tb",
        });
        self
    }

    /// Appends a number in decimal (without `core::fmt`, whose u128 path divides by 10^19: 0.5 %
    /// of the server at saturation, perf).
    pub fn number(&mut self, n: u128) -> &mut KeyWriter {
        self.text.push_str(itoa::Buffer::new().format(n));
        self
    }

    /// How long the key written so far is.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Cuts the key back to its first `len` bytes (a length [`KeyWriter::len`] gave).
    pub fn truncate(&mut self, len: usize) {
        self.text.truncate(len);
        self.kept = self.kept.min(len);
    }

    /// The key so far, bounded: when longer than [`MAX_KEY_LEN`], its kept prefix (cut to leave
    /// room) and `#` and the 128-bit hash of the whole, in hex. The writer stays as it was.
    pub fn key(&self) -> CounterKey {
        if self.text.len() <= MAX_KEY_LEN {
            return CounterKey(self.text.clone());
        }
        let hash = xxh3_128(self.text.as_bytes());
        // The kept prefix is ASCII (escaped), so any length is a character boundary.
        let kept = self
            .text
            .get(..self.kept.min(MAX_KEY_LEN - 34))
            .unwrap_or_default();
        let mut key = String::with_capacity(kept.len() + 33);
        key.push_str(kept);
        let _ = write!(key, "#{hash:032x}");
        CounterKey(key)
    }

    /// The key, bounded as [`KeyWriter::key`] says, without a copy when it fits.
    pub fn finish(self) -> CounterKey {
        match self.text.len() <= MAX_KEY_LEN {
            true => CounterKey(self.text),
            false => self.key(),
        }
    }
}

/// A tail's kind, after [`Separator::Kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// RLQS demand.
    Demand,
    /// A concurrency lease count.
    Lease,
    /// A token bucket.
    TokenBucket,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_keys_are_printable_and_bounded() {
        assert_eq!(CounterKey::checked("a|b=c").map(|k| k.len()), Ok(5));
        assert_eq!(
            CounterKey::checked("a b"),
            Err(KeyError::Unprintable { byte: b' ' })
        );
        assert_eq!(
            CounterKey::checked("k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1,
                max: MAX_KEY_LEN
            })
        );
        let long = "k".repeat(MAX_REFERENCE_KEY_LEN + 1);
        assert!(CounterKey::reference(long).is_err());
        assert!(CounterKey::reference("a b_\n_".into()).is_ok());
    }

    #[test]
    fn a_key_too_long_keeps_its_prefix_and_a_hash_of_the_whole() {
        let mut w = KeyWriter::with_capacity(8);
        w.component("pre fix").keep().component(&"x".repeat(500));
        let key = w.key();
        assert_eq!(
            key.len(),
            "pre%20fix".len() + 33,
            "prefix, # and 32 hex digits"
        );
        assert!(key.starts_with("pre%20fix#"), "{key}");
        assert!(key.bytes().all(|b| b.is_ascii_graphic()), "{key}");
        assert_eq!(w.finish(), key);
        let mut other = KeyWriter::with_capacity(8);
        other
            .component("pre fix")
            .keep()
            .component(&"x".repeat(501));
        assert_ne!(other.finish(), key);
    }
}
