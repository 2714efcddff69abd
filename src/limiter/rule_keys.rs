//! The counter keys of a descriptor (RLS) or of a bucket's path (RLQS) under a rule: the key
//! layout (Turnstile's or the reference's), wildcard values that share one counter, and the
//! tails. Must not touch: the store, the decision.

use super::algorithm::Tail;
use super::key::KeyBase;
use super::{Applied, Descriptor, KeyLayout, Limiter};
use crate::rules::{LevelMatch, Limit, PathLevel};

impl<S> Limiter<S> {
    pub(super) fn key_base(
        &self,
        domain: &str,
        descriptor: &Descriptor,
        limit: &Applied<'_>,
    ) -> KeyBase {
        let path = limit.rule().map(|l| l.path.as_slice()).unwrap_or(&[]);
        let entries = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()));
        self.base_for(domain, entries, path)
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
    ) -> String {
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
    ) -> String {
        self.rule_key(domain, entries, rule, Tail::Demand { period, start })
    }

    fn rule_key(&self, domain: &str, entries: &[(&str, &str)], rule: &Limit, tail: Tail) -> String {
        self.base_for(domain, entries.iter().copied(), &rule.path)
            .tail(tail)
    }

    fn base_for<'e>(
        &self,
        domain: &str,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
        path: &[PathLevel],
    ) -> KeyBase {
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
        let base = KeyBase::new(&self.settings.key_prefix, domain, entries.clone());
        match self.settings.key_layout {
            KeyLayout::Turnstile => base,
            KeyLayout::Reference => base.with_reference(&self.settings.key_prefix, domain, entries),
        }
    }
}
