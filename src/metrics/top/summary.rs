//! The space-saving summary (Metwally, Agrawal, El Abbadi, 2005): the heaviest items of a
//! weighted stream in a fixed number of entries. An item in the summary carries its count and
//! the error it may have inherited; a new item takes the place of the lightest one, starting
//! from that one's count. Guarantees, for a stream of total weight `N` into `capacity` entries:
//!
//! - every item's estimate is at least its true weight, and at most `error` above it;
//! - every `error` is at most `N / capacity` (the lightest entry never weighs more than that);
//! - so every item truly heavier than `N / capacity` is in the summary.
//!
//! Owns the entries and their arithmetic; knows nothing of rules, clocks or rendering.

use std::collections::HashMap;

/// One item of the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted<K> {
    pub(crate) item: K,
    /// At least the item's true weight since it entered.
    pub(crate) count: u64,
    /// How much of `count` may belong to the items it displaced (`count - error` is a lower
    /// bound of its true weight).
    pub(crate) error: u64,
}

/// The heaviest items of a stream in at most `capacity` entries.
#[derive(Debug, Clone)]
pub(crate) struct SpaceSaving<K> {
    capacity: usize,
    entries: Vec<Counted<K>>,
    index: HashMap<K, usize>,
    /// The stream's total weight.
    total: u64,
}

impl<K: std::hash::Hash + Eq + Clone> SpaceSaving<K> {
    /// An empty summary of `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> SpaceSaving<K> {
        // Room for every entry up front: the summary fills, and never grows past it.
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            entries: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
            total: 0,
        }
    }

    /// Adds `weight` to `item`. `item` is built only when it enters the summary.
    pub(crate) fn add<Q>(&mut self, key: &Q, weight: u64, item: impl FnOnce() -> K)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        if weight == 0 {
            return;
        }
        self.total = self.total.saturating_add(weight);
        if let Some(&at) = self.index.get(key) {
            let entry = &mut self.entries[at];
            entry.count = entry.count.saturating_add(weight);
            return;
        }
        let item = item();
        if self.entries.len() < self.capacity {
            self.index.insert(item.clone(), self.entries.len());
            self.entries.push(Counted {
                item,
                count: weight,
                error: 0,
            });
            return;
        }
        // The lightest entry: a scan of `capacity` counts (64 by default), cheaper than keeping
        // a heap in order on every increment of an entry already in.
        let (at, lightest) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
            .map(|(at, e)| (at, e.count))
            .unwrap_or((0, 0));
        let old = std::mem::replace(
            &mut self.entries[at],
            Counted {
                item: item.clone(),
                count: lightest.saturating_add(weight),
                error: lightest,
            },
        );
        self.index.remove::<K>(&old.item);
        self.index.insert(item, at);
    }

    /// The stream's total weight.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The entries, heaviest first.
    pub(crate) fn heaviest(&self) -> Vec<&Counted<K>> {
        let mut out: Vec<&Counted<K>> = self.entries.iter().collect();
        out.sort_by_key(|entry| std::cmp::Reverse(entry.count));
        out
    }

    /// The entry count.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::SpaceSaving;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn summary_of(stream: &[(u8, u64)], capacity: usize) -> SpaceSaving<u8> {
        let mut s = SpaceSaving::new(capacity);
        for &(item, weight) in stream {
            s.add(&item, weight, || item);
        }
        s
    }

    #[test]
    fn a_heavy_item_among_many_light_ones_is_first_and_exact() {
        let mut s = SpaceSaving::new(8);
        for round in 0..100u32 {
            s.add("heavy", 10, || "heavy".to_owned());
            let light = format!("light-{round}");
            s.add(light.as_str(), 1, || light.clone());
        }
        let top = s.heaviest();
        assert_eq!(top[0].item, "heavy");
        assert!(top[0].count >= 1_000 && top[0].count - top[0].error <= 1_000);
        assert_eq!(s.len(), 8, "never more than the capacity");
        assert_eq!(s.total(), 1_100);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Against the exact counts: every estimate is an upper bound within its error, every
        /// error within N / capacity, and every item heavier than that is present.
        #[test]
        fn estimates_bound_the_exact_counts(
            stream in proptest::collection::vec((0u8..40, 1u64..20), 0..400),
            capacity in 1usize..12,
        ) {
            let s = summary_of(&stream, capacity);
            let mut exact: HashMap<u8, u64> = HashMap::new();
            for &(item, weight) in &stream {
                *exact.entry(item).or_default() += weight;
            }
            let n: u64 = exact.values().sum();
            prop_assert_eq!(s.total(), n);
            prop_assert!(s.len() <= capacity);
            let bound = n / capacity as u64;
            for entry in s.heaviest() {
                let truth = exact[&entry.item];
                prop_assert!(entry.count >= truth);
                prop_assert!(entry.count - entry.error <= truth);
                prop_assert!(entry.error <= bound);
            }
            for (item, &truth) in &exact {
                if truth > bound {
                    prop_assert!(s.heaviest().iter().any(|e| e.item == *item), "{} missing", item);
                }
            }
        }
    }
}
