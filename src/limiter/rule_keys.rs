//! The counter keys of a descriptor (RLS) or of a bucket's path (RLQS) under a rule: the key
//! layout (Turnstile's or the reference's), wildcard values that share one counter, and the
//! tails. Must not touch: the store, the decision.

use super::key::{Keys, Tail, Tails};
use super::{Applied, Descriptor, Limiter};
use crate::rules::{Algorithm, LevelMatch, Limit, PathLevel};
use crate::storage::CounterKey;

impl<S> Limiter<S> {
    /// Starts `keys` on the counters of `descriptor` under `limit`.
    pub(super) fn start_keys(
        &self,
        keys: &mut Keys,
        domain: &str,
        descriptor: &Descriptor<'_>,
        limit: &Applied<'_>,
    ) {
        let path = limit.rule().map(|l| l.path.as_slice()).unwrap_or(&[]);
        let entries = descriptor.entries.iter().map(|e| (&*e.key, &*e.value));
        let tails = match limit.rate().map(|rate| rate.algorithm) {
            Some(Algorithm::FixedWindow | Algorithm::SlidingWindow) => Tails::Windows,
            _ => Tails::Any,
        };
        self.start_for(keys, domain, entries, path, tails);
    }

    /// The keys RLQS counts a bucket in, for `entries` (in path order) under `rule` and the
    /// window of `period` seconds starting at `start`: the fixed-window counter RLS keeps (so
    /// RLQS folds its reports into the very counter RLS counts in), and the demand counters
    /// (requests allowed and denied, always in Turnstile's layout) of this window and the one
    /// before. The descriptor's part is written once for the three.
    pub fn bucket_keys(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        rule: &Limit,
        period: u64,
        start: u64,
    ) -> [CounterKey; 3] {
        let mut keys = Keys::new();
        self.start_for(
            &mut keys,
            domain,
            entries.iter().copied(),
            &rule.path,
            Tails::Any,
        );
        let before = start.saturating_sub(period);
        [
            keys.key(Tail::Window { period, start }),
            keys.key(Tail::Demand { period, start }),
            keys.last_key(Tail::Demand {
                period,
                start: before,
            }),
        ]
    }

    fn start_for<'e>(
        &self,
        keys: &mut Keys,
        domain: &str,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
        path: &[PathLevel],
        tails: Tails,
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
            tails,
        );
    }
}
