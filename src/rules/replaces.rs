//! `replaces` resolved once, when a rule set is built: every name that a `replaces` entry of a
//! domain refers to gets a number, each limit so named carries its number, and each limit's
//! `replaces` becomes those numbers, so a request compares a few integers instead of strings.
//! Names are per domain and span every file merged into it.
//!
//! Must not touch: matching, what a replaced limit means for the answer (the limiter's).

use std::collections::HashMap;

use super::{Domain, Level, Limit};

impl Domain {
    /// Numbers the names that `replaces` entries refer to and sets them on every limit.
    pub(crate) fn resolve_replaces(&mut self) {
        let mut ids: HashMap<String, u32> = HashMap::new();
        each_limit(&mut self.root, &mut |limit| {
            for name in &limit.replaces {
                let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
                ids.entry(name.clone()).or_insert(next);
            }
        });
        each_limit(&mut self.root, &mut |limit| {
            limit.replaceable_as = limit.name.as_ref().and_then(|n| ids.get(n).copied());
            limit.replaces_ids = limit
                .replaces
                .iter()
                .filter_map(|n| ids.get(n).copied())
                .collect();
        });
    }
}

/// Calls `f` on every limit of the tree under `level`.
fn each_limit(level: &mut Level, f: &mut impl FnMut(&mut Limit)) {
    for nodes in level.by_key.values_mut() {
        let exact = nodes.exact.values_mut();
        let wildcards = nodes.wildcards.iter_mut().map(|(_, node)| node);
        for node in exact.chain(wildcards).chain(nodes.default.as_mut()) {
            if let Some(limit) = node.limit.as_mut() {
                f(limit);
            }
            each_limit(&mut node.children, f);
        }
    }
}
