//! Raw YAML structs → the immutable rule model. Every semantic check of the reference loader
//! runs here, and every problem is collected (with file, line, column and path) rather than
//! stopping at the first.

use std::collections::HashMap;

use serde_saphyr::Spanned;

use super::error::ConfigError;
use super::raw::{Pos, RawDescriptor, RawFile, RawMeta, RawRateLimit};
use crate::rules::{
    Domain, KeyNodes, Level, LevelMatch, Limit, MetaValue, Node, PathLevel, Pattern,
};

/// Collects errors and warnings while compiling one file into the shared domain map.
pub(crate) struct FileCompiler<'a> {
    pub(crate) origin: &'a str,
    /// What the store in use can count.
    pub(crate) store: super::StoreBounds,
    pub(crate) errors: &'a mut Vec<ConfigError>,
    pub(crate) warnings: &'a mut Vec<String>,
    /// Keys the reference does not know (`check-config --reference` lists them).
    pub(crate) extensions: &'a mut Vec<String>,
}

impl FileCompiler<'_> {
    pub(super) fn error(&mut self, pos: Pos, path: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            origin: self.origin.to_owned(),
            line: pos.line,
            column: pos.column,
            path: path.to_owned(),
            message: message.into(),
        });
    }

    fn warn_ignored(&mut self, keys: Vec<(&'static str, Pos)>, path: &str) {
        for (key, pos) in keys {
            self.warnings.push(format!(
                "{}:{}:{}: {path}: key '{key}' has no meaning here and is ignored",
                self.origin, pos.line, pos.column
            ));
        }
    }

    /// Compiles one parsed file into `domains`, merging into an existing domain when `merge`.
    pub(crate) fn compile(
        &mut self,
        raw: RawFile,
        domains: &mut HashMap<String, Domain>,
        merge: bool,
    ) {
        self.warn_ignored(raw.ignored_keys(), "");
        let (name, pos) = match &raw.domain {
            Some(d) if !d.value.is_empty() => (d.value.clone(), Pos::from(d.referenced)),
            other => {
                let pos = other
                    .as_ref()
                    .map(|d| Pos::from(d.referenced))
                    .unwrap_or(Pos { line: 1, column: 1 });
                self.error(pos, "domain", "config file cannot have empty domain");
                return;
            }
        };
        if domains.contains_key(&name) && !merge {
            self.error(
                pos,
                "domain",
                format!("duplicate domain '{name}' in config file"),
            );
            return;
        }
        let domain = domains.entry(name.clone()).or_default();
        self.level(raw.descriptors.0, &mut domain.root, &[], "", &name);
    }

    fn level(
        &mut self,
        descriptors: Vec<Spanned<RawDescriptor>>,
        level: &mut Level,
        parent: &[PathLevel],
        yaml_path: &str,
        full_key: &str,
    ) {
        for (index, spanned) in descriptors.into_iter().enumerate() {
            let pos = Pos::from(spanned.referenced);
            let path = format!("{yaml_path}descriptors[{index}]");
            self.descriptor(spanned.value, pos, level, parent, &path, full_key);
        }
    }

    fn descriptor(
        &mut self,
        mut raw: RawDescriptor,
        pos: Pos,
        level: &mut Level,
        parent: &[PathLevel],
        path: &str,
        full_key: &str,
    ) {
        self.warn_ignored(raw.ignored_keys(), path);
        let key = match &raw.key {
            Some(k) if !k.value.is_empty() => k.value.clone(),
            _ => {
                self.error(pos, path, "descriptor has empty key");
                return;
            }
        };
        let value = raw
            .value
            .as_ref()
            .map(|v| v.value.clone())
            .filter(|v| !v.is_empty());
        // The reference's composite key (`domain.key_value.key…`): only for messages, `/rlconfig`
        // and stats keys. Counting never uses it, because joining with `_` and `.` is ambiguous
        // (`a_b` + `c` and `a` + `b_c` collide); the tree below keeps every level apart.
        let composite = match &value {
            Some(v) => format!("{full_key}.{key}_{v}"),
            None => format!("{full_key}.{key}"),
        };
        let pattern = value.as_deref().and_then(Pattern::new);
        let matched = self.level_match(
            &raw,
            value.as_ref(),
            pattern.is_some(),
            pos,
            path,
            &composite,
        );
        let mut node_path = parent.to_vec();
        node_path.push(PathLevel {
            key: key.clone(),
            matched,
            value_to_metric: raw.value_to_metric,
        });

        let limit = raw.rate_limit.take().and_then(|rl| {
            let at = Pos::from(rl.referenced);
            let rl_path = format!("{path}.rate_limit");
            self.limit(rl.value.0, at, &raw, &node_path, &composite, &rl_path)
        });

        let mut node = Node {
            limit,
            children: Level::default(),
        };
        self.level(
            raw.descriptors.0,
            &mut node.children,
            &node_path,
            &format!("{path}."),
            &composite,
        );

        // The node is compiled (children included) before it is placed, so a duplicate still
        // reports the errors inside it; the first of two duplicates is the one kept.
        let duplicate = place(level, key, value, pattern, node);
        if duplicate {
            self.error(
                pos,
                path,
                format!("duplicate descriptor composite key '{composite}'"),
            );
        }
    }

    /// How this level matches a request value: a value with `*` is a pattern (tried in file
    /// order after the exact values), an empty value is the key-only default. A
    /// `share_threshold` without a pattern is reported here.
    fn level_match(
        &mut self,
        raw: &RawDescriptor,
        value: Option<&String>,
        is_pattern: bool,
        pos: Pos,
        path: &str,
        composite: &str,
    ) -> LevelMatch {
        let share = raw.share_threshold.as_ref().is_some_and(|s| s.value);
        if share && !is_pattern {
            let at = raw
                .share_threshold
                .as_ref()
                .map(|s| Pos::from(s.referenced))
                .unwrap_or(pos);
            let shown = composite
                .split_once('.')
                .map_or(composite, |(_, rest)| rest);
            self.error(at, &format!("{path}.share_threshold"), format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{shown}'"
            ));
        }
        match (value, is_pattern) {
            (Some(v), true) => LevelMatch::Wildcard {
                pattern: v.clone(),
                share_threshold: share,
            },
            (Some(v), false) => LevelMatch::Exact(v.clone()),
            (None, _) => LevelMatch::Default,
        }
    }

    fn limit(
        &mut self,
        raw: RawRateLimit,
        pos: Pos,
        descriptor: &RawDescriptor,
        node_path: &[PathLevel],
        full_key: &str,
        path: &str,
    ) -> Option<Limit> {
        self.warn_ignored(raw.ignored_keys(), path);
        let rate = self.rate(&raw, pos, path);
        let on_store_failure = self.on_store_failure(&raw, path);
        let mut ok = rate.is_some() && on_store_failure.is_ok();
        let name = raw.name.filter(|n| !n.is_empty());
        let mut replaces = Vec::with_capacity(raw.replaces.0.len());
        for (i, replace) in raw.replaces.0.iter().enumerate() {
            let at = Pos::from(replace.referenced);
            let rpath = format!("{path}.replaces[{i}]");
            match replace.value.name.as_deref() {
                None | Some("") => {
                    self.error(at, &rpath, "should not have an empty replaces entry");
                    ok = false;
                }
                Some(n) if Some(n) == name.as_deref() => {
                    self.error(
                        at,
                        &rpath,
                        "replaces should not contain name of same descriptor",
                    );
                    ok = false;
                }
                Some(n) => replaces.push(n.to_owned()),
            }
        }
        let metadata = descriptor.metadata.as_ref().map(|m| meta_value(&m.value));
        let rate = rate.filter(|_| ok)?;
        Some(Limit {
            rate,
            name,
            replaces,
            replaceable_as: None,
            replaces_ids: Vec::new(),
            shadow_mode: descriptor.shadow_mode,
            quota_mode: descriptor.quota_mode,
            detailed_metric: descriptor.detailed_metric,
            metadata,
            on_store_failure: on_store_failure.ok()?,
            path: node_path.to_vec(),
            full_key: full_key.to_owned(),
            attached: Default::default(),
        })
    }
}

fn nodes_has_pattern(nodes: &KeyNodes, text: &str) -> bool {
    nodes.wildcards.iter().any(|(p, _)| p.text() == text)
}

fn meta_value(raw: &RawMeta) -> MetaValue {
    match raw {
        RawMeta::Null => MetaValue::Null,
        RawMeta::Bool(b) => MetaValue::Bool(*b),
        // Protobuf `Value` numbers are doubles; large integers lose precision as in the reference.
        RawMeta::Int(i) => MetaValue::Number(*i as f64),
        RawMeta::Float(f) => MetaValue::Number(*f),
        RawMeta::String(s) => MetaValue::String(s.clone()),
        RawMeta::List(items) => MetaValue::List(items.iter().map(meta_value).collect()),
        RawMeta::Map(map) => MetaValue::Map(
            map.iter()
                .map(|(k, v)| (k.clone(), meta_value(v)))
                .collect(),
        ),
    }
}

/// Places a compiled node under `key` in `level`; whether one was there already (then the
/// first is kept).
fn place(
    level: &mut Level,
    key: String,
    value: Option<String>,
    pattern: Option<Pattern>,
    node: Node,
) -> bool {
    let nodes = level.by_key.entry(key).or_default();
    match (value, pattern) {
        (Some(v), Some(p)) => {
            let dup = nodes_has_pattern(nodes, &v);
            if !dup {
                nodes.wildcards.push((p, node));
            }
            dup
        }
        (Some(v), None) => {
            let dup = nodes.exact.contains_key(&v);
            if !dup {
                nodes.exact.insert(v, node);
            }
            dup
        }
        (None, _) => {
            let dup = nodes.default.is_some();
            if !dup {
                nodes.default = Some(node);
            }
            dup
        }
    }
}
