//! Label values: escaped for the exposition format, and bounded. Stats keys built from request values (an unknown domain, a
//! `detailed_metric` value) are bounded in number by `STATS_MAX_KEYS`; this bounds each value in
//! bytes, so one request cannot make a multi-megabyte series name and the whole exposition stays
//! under `STATS_MAX_KEYS` × (a few labels of at most [`MAX_LABEL_BYTES`]). A longer value keeps
//! a readable prefix and gains a hash of the whole, so distinct values stay distinct.

use std::borrow::Cow;

/// The longest label value kept as is.
pub(crate) const MAX_LABEL_BYTES: usize = 128;
/// How much of an oversized value is kept before its hash.
const PREFIX_BYTES: usize = 64;

/// `value`, or its prefix and hash when longer than [`MAX_LABEL_BYTES`] (`None` when unchanged).
pub(crate) fn bounded(value: &str) -> Cow<'_, str> {
    if value.len() <= MAX_LABEL_BYTES {
        return Cow::Borrowed(value);
    }
    let mut end = PREFIX_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let hash = xxhash_rust::xxh3::xxh3_64(value.as_bytes());
    Cow::Owned(format!("{}…{hash:016x}", &value[..end]))
}

/// Escapes a label value (see `escape`).
pub(crate) fn escape(value: &str) -> String {
    super::escape::prometheus_label(value)
}

#[cfg(test)]
mod tests {
    use super::{MAX_LABEL_BYTES, bounded};

    #[test]
    fn long_values_keep_a_prefix_and_a_hash() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(1 << 20);
        let other = format!("{long}x");
        let (a, b) = (bounded(&long), bounded(&other));
        assert!(
            a.len() <= MAX_LABEL_BYTES && b.len() <= MAX_LABEL_BYTES,
            "{}",
            a.len()
        );
        assert!(a.starts_with("éé"));
        assert_ne!(a, b, "distinct values stay distinct");
    }
}
