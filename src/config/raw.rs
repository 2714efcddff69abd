//! The serde mirror of a rule file, and the only user of the YAML crate (`serde-saphyr`), so a
//! switch of YAML crate is a one-file change. Unknown keys are rejected with their line and
//! column. Keys of the reference's flat key set that sit at a level where they mean nothing
//! (e.g. `unit:` on a descriptor) are accepted and reported as ignored, because the reference
//! loads such files; every other key is an error.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use super::{MAX_DEPTH, MAX_NODES};

use serde::de::value::MapAccessDeserializer;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::{Location, Spanned};

/// A position in a rule file (1-based; 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub(crate) line: u64,
    pub(crate) column: u64,
}

impl From<Location> for Pos {
    fn from(loc: Location) -> Self {
        Pos {
            line: loc.line(),
            column: loc.column(),
        }
    }
}

/// A YAML parse or shape error, with its position.
#[derive(Debug)]
pub(crate) struct ParseError {
    pub(crate) pos: Pos,
    pub(crate) message: String,
}

/// Parses one rule file.
pub(crate) fn parse(text: &str) -> Result<RawFile, ParseError> {
    if text.trim().is_empty() {
        return Ok(RawFile::default());
    }
    serde_saphyr::from_str_with_options::<Shaped<RawFile>>(text, options())
        .map(|file| file.0)
        .map_err(|err| {
            // An error without a place is about the whole document: point at its start.
            let pos = err
                .location()
                .map(Pos::from)
                .filter(|p| p.line > 0)
                .unwrap_or(Pos { line: 1, column: 1 });
            let mut message = err.without_snippet().to_string();
            // The position is reported separately; drop the crate's own copy of it.
            if let Some(at) = message.rfind(" at line ") {
                message.truncate(at);
            }
            ParseError {
                pos,
                message: super::messages::in_rule_file_terms(&message),
            }
        })
}

/// Reader options: limits that real rule files never reach but that stop YAML bombs (alias
/// expansion, nesting and size are bounded by the crate's budget).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_NODES,
            max_events: 2 * MAX_NODES,
            max_depth: MAX_DEPTH,
        },
    }
}

/// What a map of this kind is, in the rule file's terms (for "expected …, found …").
pub(crate) trait Shape {
    /// One such map, e.g. "a descriptor map".
    const ONE: &'static str;
    /// A list of them, e.g. "a list of descriptor maps".
    const LIST: &'static str;
}

/// A YAML map read as `T`. Deserialized through `deserialize_any`, so anything but a map is an
/// error naming what was found and what belongs there (the derived struct code would get the
/// parser's own "expected mapping" instead).
#[derive(Debug)]
pub(crate) struct Shaped<T>(pub(crate) T);

impl<'de, T: Deserialize<'de> + Shape> Deserialize<'de> for Shaped<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Shape> Visitor<'de> for MapVisitor<T> {
            type Value = Shaped<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::ONE)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Shaped)
            }
        }
        deserializer.deserialize_any(MapVisitor(PhantomData))
    }
}

/// A list of `T` maps, each with its position. A key present with nothing after it
/// (`descriptors:`) is an empty list, as the reference reads it.
#[derive(Debug)]
pub(crate) struct List<T>(pub(crate) Vec<Spanned<T>>);

impl<T> Default for List<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de> + Shape> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Shape> Visitor<'de> for ListVisitor<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::LIST)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(List(Vec::new()))
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(List(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<Shaped<T>>>()? {
                    items.push(Spanned::new(item.value.0, item.referenced, item.defined));
                }
                Ok(List(items))
            }
        }
        deserializer.deserialize_any(ListVisitor(PhantomData))
    }
}

macro_rules! raw_struct {
    ($(#[$meta:meta])* $name:ident { $($field:ident : $ty:ty,)* } ignored { $($ignored:ident,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            $(#[serde(default)] pub(crate) $field: $ty,)*
            $(#[serde(default)] $ignored: Option<Spanned<IgnoredAny>>,)*
        }

        impl $name {
            /// The flat-set keys present at this level that mean nothing here.
            pub(crate) fn ignored_keys(&self) -> Vec<(&'static str, Pos)> {
                let mut out = Vec::new();
                $(if let Some(s) = &self.$ignored { out.push((stringify!($ignored), Pos::from(s.referenced))); })*
                out
            }
        }
    };
}

raw_struct! {
    /// A whole rule file: one domain.
    RawFile {
        domain: Option<Spanned<String>>,
        descriptors: List<RawDescriptor>,
    } ignored {
        key, value, rate_limit, unit, requests_per_unit, unlimited, shadow_mode, quota_mode, name,
        replaces, detailed_metric, value_to_metric, share_threshold, metadata,
    }
}

raw_struct! {
    /// One descriptor node.
    RawDescriptor {
        key: Option<Spanned<String>>,
        value: Option<Spanned<String>>,
        rate_limit: Option<Spanned<Shaped<RawRateLimit>>>,
        descriptors: List<RawDescriptor>,
        shadow_mode: bool,
        quota_mode: bool,
        detailed_metric: bool,
        value_to_metric: bool,
        share_threshold: Option<Spanned<bool>>,
        metadata: Option<Spanned<RawMeta>>,
    } ignored {
        domain, unit, requests_per_unit, unlimited, name, replaces,
    }
}

raw_struct! {
    /// The `rate_limit` map of a descriptor.
    RawRateLimit {
        unit: Option<Spanned<String>>,
        requests_per_unit: u32,
        unlimited: bool,
        name: Option<String>,
        replaces: List<RawReplace>,
        fail_open: Option<Spanned<bool>>,
        on_store_failure: Option<Spanned<String>>,
        unit_multiplier: Option<Spanned<u64>>,
        algorithm: Option<Spanned<String>>,
        burst: Option<Spanned<u32>>,
    } ignored {
        domain, key, value, descriptors, rate_limit, shadow_mode, quota_mode, detailed_metric,
        value_to_metric, share_threshold, metadata,
    }
}

/// One `replaces` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplace {
    #[serde(default)]
    pub(crate) name: Option<String>,
}

impl Shape for RawFile {
    const ONE: &'static str = "a rule file: a map with `domain` and `descriptors`";
    const LIST: &'static str = "rule files";
}

impl Shape for RawDescriptor {
    const ONE: &'static str =
        "a descriptor map (`key`, and optionally `value`, `rate_limit`, `descriptors`, ...)";
    const LIST: &'static str = "a list of descriptor maps";
}

impl Shape for RawRateLimit {
    const ONE: &'static str =
        "a rate_limit map (`unit` and `requests_per_unit`, or `unlimited: true`, ...)";
    const LIST: &'static str = "a list of rate_limit maps";
}

impl Shape for RawReplace {
    const ONE: &'static str = "a map with the `name` of the limit it replaces";
    const LIST: &'static str = "a list of maps with a `name` each";
}

/// A metadata value as written in YAML: scalars keep their YAML type (they are echoed to Envoy
/// as JSON), and map keys of any scalar type are read as their literal text (`y:`, `on:`,
/// `1:`), as the reference reads them.
#[derive(Debug)]
pub(crate) enum RawMeta {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    List(Vec<RawMeta>),
    Map(BTreeMap<String, RawMeta>),
}

impl<'de> Deserialize<'de> for RawMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MetaVisitor)
    }
}

struct MetaVisitor;

impl<'de> Visitor<'de> for MetaVisitor {
    type Value = RawMeta;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a metadata value (text, number, boolean, list or map)")
    }
    fn visit_unit<E>(self) -> Result<RawMeta, E> {
        Ok(RawMeta::Null)
    }
    fn visit_none<E>(self) -> Result<RawMeta, E> {
        Ok(RawMeta::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<RawMeta, E> {
        Ok(RawMeta::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<RawMeta, E> {
        Ok(RawMeta::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<RawMeta, E> {
        Ok(i64::try_from(v).map_or(RawMeta::Float(v as f64), RawMeta::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<RawMeta, E> {
        Ok(RawMeta::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<RawMeta, E> {
        Ok(RawMeta::String(v.to_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawMeta, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(RawMeta::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMeta, A::Error> {
        let mut out = BTreeMap::new();
        // Keys are read as text: a String key takes any scalar's literal text.
        while let Some((key, value)) = map.next_entry::<String, RawMeta>()? {
            out.insert(key, value);
        }
        Ok(RawMeta::Map(out))
    }
}
