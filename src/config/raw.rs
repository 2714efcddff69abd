//! The serde mirror of a rule file, and the only user of the YAML crate (`serde-saphyr`), so a
//! switch of YAML crate is a one-file change. Unknown keys are rejected with their line and
//! column. Keys of the reference's flat key set that sit at a level where they mean nothing
//! (e.g. `unit:` on a descriptor) are accepted and reported as ignored, because the reference
//! loads such files; every other key is an error.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;
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
    serde_saphyr::from_str::<RawFile>(text).map_err(|err| {
        let pos = err.location().map(Pos::from).unwrap_or_default();
        let mut message = err.without_snippet().to_string();
        // The position is reported separately; drop the crate's own copy of it.
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        ParseError { pos, message }
    })
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
        descriptors: Vec<Spanned<RawDescriptor>>,
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
        rate_limit: Option<Spanned<RawRateLimit>>,
        descriptors: Vec<Spanned<RawDescriptor>>,
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
        replaces: Vec<Spanned<RawReplace>>,
        fail_open: bool,
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

/// A metadata value as written in YAML.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawMeta {
    Null(()),
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    List(Vec<RawMeta>),
    Map(BTreeMap<String, RawMeta>),
}
