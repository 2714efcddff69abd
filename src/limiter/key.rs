//! Counter keys' layouts. A key in Turnstile's layout encodes prefix, domain, entries, window
//! length and window start without ambiguity (`prefix` `domain` `|k=v`… `|60@1200`), written
//! with [`KeyWriter`], which escapes every component and bounds the whole, so every value a
//! client can send (spaces, newlines, NUL, non-ASCII, megabytes) is countable under a key of
//! its own and two different descriptors never share a key. The reference's layout is kept
//! beside it for window counters when asked for.
//!
//! [`Keys`] writes a descriptor's part once, sized up front, and each key is that part plus a
//! tail; the last key takes the buffer itself, so a fixed window's key costs one allocation.

use crate::storage::{CounterKey, KeyWriter, MAX_REFERENCE_KEY_LEN, Separator, Tag};

/// What ends a counter key after the descriptor's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// A window of `period` seconds starting at `start` (`|60@1200`).
    Window { period: u64, start: u64 },
    /// RLQS demand (allowed + denied) in a window of `period` seconds starting at `start`
    /// (`|60~d1200`).
    Demand { period: u64, start: u64 },
    /// A concurrency count (`|60~c`).
    Lease { period: u64 },
    /// A token bucket's state (`|60~tb5`).
    TokenBucket { period: u64, rate: u128 },
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
    /// unbounded in the reference (bounded here by [`crate::storage::MAX_REFERENCE_KEY_LEN`],
    /// beyond which a key is written in Turnstile's layout), exactly as the reference
    /// otherwise. Other algorithms keep Turnstile's layout.
    Reference,
}

/// The keys of one descriptor at a time. Each descriptor's part is written once, sized up
/// front, and its last key takes that buffer as it is: a fixed window's key costs one
/// allocation, its own.
#[derive(Debug)]
pub(crate) struct Keys {
    writer: KeyWriter,
    /// How long the current descriptor's part (prefix, domain, entries) is in `writer`; 0 when
    /// it is not written there (a written part ends in a separator): when every key asked for
    /// is a window's in the reference's layout (within its bound), where it would go unused.
    base: usize,
    /// The reference's bytes up to the window start, when that layout is on.
    reference: Option<String>,
}

/// Which keys a descriptor will be asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tails {
    /// Windows' only (fixed and sliding windows).
    Windows,
    /// Any (leases, token buckets, RLQS demand).
    Any,
}

/// Room for the longest tail: two 20-digit numbers and their separators.
const TAIL_ROOM: usize = 48;

/// The most digits of a window start (a `u64`).
const MAX_DIGITS: usize = 20;

impl Keys {
    /// No descriptor yet (nothing allocated).
    pub(crate) fn new() -> Keys {
        Keys {
            writer: KeyWriter::with_capacity(0),
            base: 0,
            reference: None,
        }
    }

    /// Starts the keys of `entries` (the request's values, or a wildcard pattern where
    /// `share_threshold` shares one counter) in `layout`, for the `tails` it will be asked for.
    pub(crate) fn start<'a>(
        &mut self,
        layout: KeyLayout,
        prefix: &str,
        domain: &str,
        entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
        tails: Tails,
    ) {
        // Unescaped lengths: one allocation unless a component needs escaping.
        let raw = entries
            .clone()
            .fold(prefix.len() + domain.len(), |n, (k, v)| {
                n + k.len() + v.len() + 2
            });
        self.reference = match layout {
            KeyLayout::Turnstile => None,
            KeyLayout::Reference => Some(reference_base(prefix, domain, entries.clone(), raw)),
        };
        let write = match (&self.reference, tails) {
            (Some(reference), Tails::Windows) => {
                reference.len() + MAX_DIGITS > MAX_REFERENCE_KEY_LEN
            }
            _ => true,
        };
        if !write {
            self.base = 0;
            return;
        }
        let w = &mut self.writer;
        *w = KeyWriter::with_capacity(raw + TAIL_ROOM);
        w.component(prefix).keep().component(domain);
        for (k, v) in entries.clone() {
            w.separator(Separator::Part)
                .component(k)
                .separator(Separator::Value)
                .component(v);
        }
        w.separator(Separator::Part);
        self.base = w.len();
    }

    /// The current descriptor's key for a tail, keeping its part for another key.
    pub(crate) fn key(&mut self, tail: Tail) -> CounterKey {
        match self.reference_key(tail) {
            Some(key) => key,
            None => self.write_tail(tail).key(),
        }
    }

    /// The current descriptor's last key: its buffer becomes the key. Start the next descriptor
    /// before asking for another.
    pub(crate) fn last_key(&mut self, tail: Tail) -> CounterKey {
        if let Tail::Window { start, .. } = tail
            && let Some(text) = self.reference.take()
        {
            // The reference's part becomes the key (the next descriptor starts its own).
            if let Some(key) = reference_window(text, start) {
                return key;
            }
        }
        match self.reference_key(tail) {
            Some(key) => key,
            None => {
                self.write_tail(tail);
                std::mem::replace(&mut self.writer, KeyWriter::with_capacity(0)).finish()
            }
        }
    }

    /// The reference's bytes for a window, when that layout is on and the key is within its
    /// bound.
    fn reference_key(&self, tail: Tail) -> Option<CounterKey> {
        match (tail, &self.reference) {
            (Tail::Window { start, .. }, Some(reference)) => {
                let mut text = String::with_capacity(reference.len() + MAX_DIGITS);
                text.push_str(reference);
                reference_window(text, start)
            }
            _ => None,
        }
    }

    fn write_tail(&mut self, tail: Tail) -> &mut KeyWriter {
        if self.base == 0 {
            // Asked for a tail `start` was not told of: the reference's part stands in, as
            // one escaped component (a key still distinct per descriptor).
            let part = self.reference.clone().unwrap_or_default();
            self.writer = KeyWriter::with_capacity(part.len() + TAIL_ROOM);
            self.writer.component(&part).separator(Separator::Part);
            self.base = self.writer.len();
        }
        let w = &mut self.writer;
        w.truncate(self.base);
        match tail {
            Tail::Window { period, start } => w
                .number(period.into())
                .separator(Separator::Start)
                .number(start.into()),
            Tail::Demand { period, start } => w
                .number(period.into())
                .separator(Separator::Kind)
                .tag(Tag::Demand)
                .number(start.into()),
            Tail::Lease { period } => w
                .number(period.into())
                .separator(Separator::Kind)
                .tag(Tag::Lease),
            Tail::TokenBucket { period, rate } => w
                .number(period.into())
                .separator(Separator::Kind)
                .tag(Tag::TokenBucket)
                .number(rate),
        }
    }
}

/// The reference's key of the window starting at `start`, from its part `text`; `None` beyond
/// the reference layout's bound.
fn reference_window(mut text: String, start: u64) -> Option<CounterKey> {
    text.push_str(itoa::Buffer::new().format(start));
    CounterKey::reference(text).ok()
}

/// The reference's bytes up to the window start, `prefix + domain + "_" + (key + "_" + value +
/// "_")…`, sized from `raw` (the components' bytes) with room for the start's digits.
fn reference_base<'a>(
    prefix: &str,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    raw: usize,
) -> String {
    let mut text = String::with_capacity(raw + 1 + MAX_DIGITS);
    text.push_str(prefix);
    text.push_str(domain);
    text.push('_');
    for (k, v) in entries {
        text.push_str(k);
        text.push('_');
        text.push_str(v);
        text.push('_');
    }
    text
}

/// Builds the key for one fixed-window counter, in Turnstile's layout.
pub fn counter_key<'a>(
    prefix: &str,
    domain: &str,
    entries: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    period: u64,
    window_start: u64,
) -> CounterKey {
    let mut keys = Keys::new();
    keys.start(KeyLayout::Turnstile, prefix, domain, entries, Tails::Any);
    keys.last_key(Tail::Window {
        period,
        start: window_start,
    })
}

#[cfg(test)]
mod tests {
    use super::counter_key;
    use crate::storage::MAX_KEY_LEN;
    use proptest::prelude::*;

    fn key(entries: &[(&str, &str)]) -> String {
        counter_key("p:", "domain", entries.iter().copied(), 60, 1200).to_string()
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

    #[test]
    fn the_reference_layout_within_its_bound_and_turnstiles_beyond() {
        use super::{KeyLayout, Keys, Tail, Tails};
        use crate::storage::MAX_REFERENCE_KEY_LEN;
        let window = Tail::Window {
            period: 60,
            start: 1200,
        };
        let mut keys = Keys::new();
        let entries = [("k", "a b"), ("k2", "v")];
        for tails in [Tails::Any, Tails::Windows] {
            keys.start(
                KeyLayout::Reference,
                "p:",
                "d",
                entries.iter().copied(),
                tails,
            );
            assert_eq!(keys.key(window).as_str(), "p:d_k_a b_k2_v_1200");
            assert_eq!(keys.last_key(window).as_str(), "p:d_k_a b_k2_v_1200");
        }
        // Other tails keep Turnstile's layout.
        keys.start(
            KeyLayout::Reference,
            "p:",
            "d",
            entries.iter().copied(),
            Tails::Any,
        );
        let lease = keys.key(Tail::Lease { period: 60 });
        assert_eq!(lease.as_str(), "p:d|k=a%20b|k2=v|60~c");
        // Asked for one after saying windows only: still a key of its own.
        keys.start(
            KeyLayout::Reference,
            "p:",
            "d",
            entries.iter().copied(),
            Tails::Windows,
        );
        let lease = keys.key(Tail::Lease { period: 60 });
        assert!(lease.as_str().ends_with("|60~c"), "{lease}");
        let long = "x".repeat(MAX_REFERENCE_KEY_LEN);
        for tails in [Tails::Any, Tails::Windows] {
            let entries = [("k", long.as_str())].into_iter();
            keys.start(KeyLayout::Reference, "p:", "d", entries, tails);
            for key in [keys.key(window), keys.last_key(window)] {
                assert!(key.len() <= MAX_KEY_LEN, "{}", key.len());
                assert!(key.starts_with("p:#"), "{key}");
            }
        }
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
