//! The compiled, immutable rule model: per domain a tree of descriptor levels, and the limits that
//! hang on its nodes. Built once by `config` and shared read-only (behind an `Arc`) by every
//! request. Owns matching (`matcher`) and wildcard patterns (`wildcard`).
//!
//! Must not touch: YAML, protobuf types, storage, tokio. Nothing here is joined with `_`: the
//! composite-key ambiguities of the reference do not exist in this model.

mod attached;
mod matcher;
mod metadata;
mod rate;
mod replaces;
mod wildcard;

pub use attached::Attached;
pub use matcher::MAX_UNORDERED_STEPS;
pub use metadata::MetaValue;
pub use rate::{Algorithm, MAX_PERIOD_SECONDS, PerUnit, Period, Unit};
pub(crate) use wildcard::Pattern;

use std::collections::HashMap;

/// How one level of a descriptor path was matched; decides the stats key and the counter key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelMatch {
    /// `key` + exact `value`.
    Exact(String),
    /// `key` + a value pattern containing `*`.
    Wildcard {
        /// The pattern as written, e.g. `files/*`.
        pattern: String,
        /// All values matching the pattern share one counter (and stats key).
        share_threshold: bool,
    },
    /// `key` alone: any value.
    Default,
}

/// One level of the path from a domain's root to the node that carries a limit.
#[derive(Debug, Clone)]
pub struct PathLevel {
    /// The descriptor entry key at this level.
    pub key: String,
    /// How the node at this level matches a value.
    pub matched: LevelMatch,
    /// Use the runtime value in the stats key at this level (`value_to_metric`).
    pub value_to_metric: bool,
}

/// What a descriptor gets when the store that counts it cannot answer
/// (`BACKEND_FAILURE_MODE`, or a rule's `on_store_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreFailure {
    /// The call fails with `UNAVAILABLE` (the reference's behaviour).
    #[default]
    Unavailable,
    /// The descriptor answers OK, uncounted (`BACKEND_FAIL_OPEN`, a rule's `fail_open`).
    Open,
    /// The replica counts the descriptor in its own memory with its share of the limit (the
    /// limit over the number of replicas sharing the store), and hands the hits back to the
    /// store when it answers again.
    Local,
}

impl StoreFailure {
    /// The names a setting or a rule may give, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["unavailable", "open", "local"];

    /// The mode named `name` (one of [`StoreFailure::NAMES`]).
    pub fn named(name: &str) -> Option<StoreFailure> {
        match name {
            "unavailable" => Some(StoreFailure::Unavailable),
            "open" => Some(StoreFailure::Open),
            "local" => Some(StoreFailure::Local),
            _ => None,
        }
    }

    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            StoreFailure::Unavailable => "unavailable",
            StoreFailure::Open => "open",
            StoreFailure::Local => "local",
        }
    }
}

/// What a configured limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// `requests_per_unit` per `unit`, counted.
    Limited(PerUnit),
    /// `unlimited: true`: never counted; answers OK with `limit_remaining` = `u32::MAX`.
    /// `written` is the `requests_per_unit` the file gave (meaningless, kept for `/rlconfig`,
    /// which prints it as the reference does).
    Unlimited {
        /// The file's `requests_per_unit`.
        written: u32,
    },
}

/// A limit from the configuration, with everything the decision and the response need.
#[derive(Debug, Clone)]
pub struct Limit {
    /// What the limit allows.
    pub rate: Rate,
    /// `rate_limit.name`: returned as `current_limit.name` and used by `replaces`.
    pub name: Option<String>,
    /// Names of other limits this one drops from the same request.
    pub replaces: Vec<String>,
    /// This limit's number among the names its domain's `replaces` entries refer to (`None`:
    /// nothing replaces it); set when the rule set is built.
    pub(crate) replaceable_as: Option<u32>,
    /// `replaces` as those numbers; set when the rule set is built.
    pub(crate) replaces_ids: Vec<u32>,
    /// Count and report, but always answer OK for this descriptor.
    pub shadow_mode: bool,
    /// Soft limit (see `limiter` for the overall-code rule).
    pub quota_mode: bool,
    /// Use the runtime values at every level in the stats key.
    pub detailed_metric: bool,
    /// Copied into the response's dynamic metadata when the descriptor passes.
    pub metadata: Option<MetaValue>,
    /// What this limit's descriptors get when the counter store fails (`on_store_failure`, or
    /// `fail_open: true` = [`StoreFailure::Open`]); `None`: the process-wide mode.
    pub on_store_failure: Option<StoreFailure>,
    /// The path from the domain root to this limit's node.
    pub path: Vec<PathLevel>,
    /// `domain.key_value.key…` as the reference prints it in `/rlconfig`.
    pub full_key: String,
    /// What metrics attach to this limit: its stats counters, found without hashing its key.
    pub attached: Attached,
}

/// One node of a descriptor tree.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) limit: Option<Limit>,
    pub(crate) children: Level,
}

/// The nodes of one tree level, grouped by entry key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) by_key: HashMap<String, KeyNodes>,
}

/// The nodes of one level that share an entry key.
#[derive(Debug, Default)]
pub(crate) struct KeyNodes {
    pub(crate) exact: HashMap<String, Node>,
    /// In config order: the first matching pattern wins.
    pub(crate) wildcards: Vec<(Pattern, Node)>,
    pub(crate) default: Option<Node>,
}

/// The rules of one domain.
#[derive(Debug, Default)]
pub struct Domain {
    pub(crate) root: Level,
}

/// Every loaded domain. Immutable once built; a reload builds a new one.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, Domain>,
}

impl RuleSet {
    /// A rule set from compiled domains.
    pub(crate) fn new(mut domains: HashMap<String, Domain>) -> Self {
        for domain in domains.values_mut() {
            domain.resolve_replaces();
        }
        Self { domains }
    }

    /// The domain named `name`, if loaded.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// How many domains are loaded.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// Every limit of every domain (for dumps such as `/rlconfig`), in no particular order.
    pub fn limits(&self) -> Vec<&Limit> {
        let mut out = Vec::new();
        for domain in self.domains.values() {
            domain.root.collect_limits(&mut out);
        }
        out
    }
}

impl Level {
    fn collect_limits<'a>(&'a self, out: &mut Vec<&'a Limit>) {
        for nodes in self.by_key.values() {
            let all = nodes
                .exact
                .values()
                .chain(nodes.wildcards.iter().map(|(_, n)| n))
                .chain(nodes.default.iter());
            for node in all {
                out.extend(node.limit.as_ref());
                node.children.collect_limits(out);
            }
        }
    }
}
