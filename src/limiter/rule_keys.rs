//! The counter keys of a descriptor (RLS) or of a bucket's path (RLQS) under a rule: the key
//! layout (Turnstile's or the reference's), wildcard values that share one counter, and the
//! tails. Must not touch: the store, the decision.

use super::key::{Keys, Tail};
use super::{Applied, Descriptor, Limiter};
use crate::rules::{LevelMatch, Limit, PathLevel};
use crate::storage::CounterKey;

impl<S> Limiter<S> {
    /// Starts `keys` on the counters of `descriptor` under `limit`.
    pub(super) fn start_keys(
        &self,
        keys: &mut Keys,
        domain: &str,
        descriptor: &Descriptor,
        limit: &Applied<'_>,
    ) {
        let path = limit.rule().map(|l| l.path.as_slice()).unwrap_or(&[]);
        let entries = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()));
        self.start_for(keys, domain, entries, path);
    }

    /// The key of the fixed-window counter that RLS keeps for `entries` (in path order) under
    /// `rule`, for the window of `period` seconds starting at `start`: RLQS folds its usage
    /// reports into the very counters RLS counts in.
    pub fn window_key(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: &Limit,
        period: u64,
        start: u64,
    ) -> CounterKey {
        self.rule_key(domain, entries, rule, Tail::Window { period, start })
    }

    /// The key of the demand counter (requests allowed and denied) RLQS keeps beside
    /// [`Limiter::window_key`], always in Turnstile's layout.
    pub fn demand_key(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: &Limit,
        period: u64,
        start: u64,
    ) -> CounterKey {
        self.rule_key(domain, entries, rule, Tail::Demand { period, start })
    }

    fn rule_key(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: &Limit,
        tail: Tail,
    ) -> CounterKey {
        let mut keys = Keys::new();
        self.start_for(&mut keys, domain, entries.iter().copied(), &rule.path);
        keys.last_key(tail)
    }

    fn start_for<'e>(
        &self,
        keys: &mut Keys,
        domain: &str,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
        path: &[PathLevel],
    ) {
        let entries = entries.enumerate().map(|(i, (key, value))| {
            let value = match path.get(i).map(|p| &p.matched) {
                Some(LevelMatch::Wildcard {
                    pattern,
                    share_threshold: true,
                }) => pattern.as_str(),
                _ => value,
            };
            (key, value)
        });
        keys.start(
            self.settings.key_layout,
            &self.settings.key_prefix,
            domain,
            entries,
        );
    }
}
