//! The live rule set: one atomically swappable `Arc<RuleSet>`. A request does one lock-free
//! load; a reload builds the new set to the side and swaps it in with one store, so a failed
//! reload never disturbs the rules being served.
//!
//! Must not touch: protobuf types, storage.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::rules::RuleSet;

/// The rules being served; empty until a configuration has loaded.
#[derive(Debug, Default)]
pub struct RulesHandle {
    current: ArcSwapOption<RuleSet>,
}

impl RulesHandle {
    /// A handle serving `rules`.
    pub fn new(rules: Option<RuleSet>) -> Self {
        Self {
            current: ArcSwapOption::from(rules.map(Arc::new)),
        }
    }

    /// The rules now, if any have loaded.
    pub fn load(&self) -> Option<Arc<RuleSet>> {
        self.current.load_full()
    }

    /// Serves `rules` from now on.
    pub fn store(&self, rules: RuleSet) {
        self.current.store(Some(Arc::new(rules)));
    }
}
