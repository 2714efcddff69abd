//! Rule metadata: a YAML map copied into the response's dynamic metadata when a descriptor
//! passes. A small owned value tree, so that `rules` does not depend on protobuf types.

use std::collections::BTreeMap;

/// A metadata value (what a `google.protobuf.Value` can hold).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// `null` / `~`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// Any number (protobuf `Value` numbers are doubles).
    Number(f64),
    /// Text (YAML strings, and any scalar that is neither a number nor a boolean).
    String(String),
    /// A YAML sequence.
    List(Vec<MetaValue>),
    /// A map with string keys.
    Map(BTreeMap<String, MetaValue>),
}

impl MetaValue {
    /// Merges `other` into `self`: keys already present win (first one wins), and nested maps
    /// are merged recursively.
    pub fn merge_from(&mut self, other: &MetaValue) {
        if let (MetaValue::Map(mine), MetaValue::Map(theirs)) = (self, other) {
            for (key, value) in theirs {
                match mine.get_mut(key) {
                    Some(existing) => existing.merge_from(value),
                    None => {
                        mine.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MetaValue;
    use std::collections::BTreeMap;

    fn map(pairs: &[(&str, MetaValue)]) -> MetaValue {
        MetaValue::Map(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    #[test]
    fn first_value_wins_and_maps_merge() {
        let s = |t: &str| MetaValue::String(t.to_owned());
        let mut a = map(&[("name", s("a")), ("nested", map(&[("x", s("1"))]))]);
        let b = map(&[
            ("name", s("b")),
            ("other", s("o")),
            ("nested", map(&[("x", s("2")), ("y", s("3"))])),
        ]);
        a.merge_from(&b);
        let want = map(&[
            ("name", s("a")),
            ("other", s("o")),
            ("nested", map(&[("x", s("1")), ("y", s("3"))])),
        ]);
        assert_eq!(a, want);
    }
}
