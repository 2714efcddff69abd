//! When keys fall due: an index of 128-bit key hashes by the second they expire, kept beside a
//! shard's map, so that dropping what has expired costs O(log s) to find the earliest second
//! (s: distinct seconds pending, few: windows are aligned) and O(1) per dropped key, and a full
//! shard with nothing due answers at once instead of scanning every key under its lock.
//!
//! The index may hold stale entries (a key whose expiry moved, or which is gone): the owner
//! checks each taken hash against its map, and rebuilds the index from the map once stale
//! entries outnumber live keys, which keeps the index's size within twice the map's and the
//! rebuild's cost amortised O(1) per change.
//!
//! Must not touch: the maps themselves, counter values, clocks (time comes in as `now`).

use std::collections::BTreeMap;

/// Key hashes by expiry second.
#[derive(Debug, Default)]
pub(crate) struct DueIndex {
    by_second: BTreeMap<u64, Vec<u128>>,
    entries: usize,
}

impl DueIndex {
    /// Notes that `hash` expires at `second` (again, if its expiry moved).
    pub(crate) fn note(&mut self, hash: u128, second: u64) {
        self.by_second.entry(second).or_default().push(hash);
        self.entries += 1;
    }

    /// The hashes noted as expiring at or before `now`, taken out of the index, earliest first.
    /// Costs nothing when none is due.
    pub(crate) fn take_due(&mut self, now: u64) -> Vec<u128> {
        let mut due = Vec::new();
        while let Some(entry) = self.by_second.first_entry() {
            if *entry.key() > now {
                break;
            }
            due.extend(entry.remove());
        }
        self.entries -= due.len();
        due
    }

    /// The entry with the earliest expiry, taken out of the index.
    pub(crate) fn take_earliest(&mut self) -> Option<(u128, u64)> {
        let mut entry = self.by_second.first_entry()?;
        let second = *entry.key();
        let hash = entry.get_mut().pop();
        if entry.get().is_empty() {
            entry.remove();
        }
        self.entries -= usize::from(hash.is_some());
        hash.map(|h| (h, second))
    }

    /// Whether the index has grown past twice `live` keys (plus slack): time to rebuild.
    pub(crate) fn needs_rebuild(&self, live: usize) -> bool {
        self.entries > 2 * live + 64
    }

    /// Replaces the index with exactly `keys` (hash, expiry second).
    pub(crate) fn rebuild(&mut self, keys: impl Iterator<Item = (u128, u64)>) {
        self.by_second.clear();
        self.entries = 0;
        for (hash, second) in keys {
            self.note(hash, second);
        }
    }

    /// Entries held, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::DueIndex;

    #[test]
    fn takes_what_is_due_earliest_first_and_nothing_else() {
        let mut index = DueIndex::default();
        index.note(1, 30);
        index.note(2, 10);
        index.note(3, 20);
        index.note(4, 10);
        assert!(index.take_due(9).is_empty());
        assert_eq!(index.take_due(20), vec![2, 4, 3]);
        assert_eq!(index.len(), 1);
        assert_eq!(index.take_earliest(), Some((1, 30)));
        assert_eq!(index.take_earliest(), None);
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn rebuilds_only_past_twice_the_live_keys() {
        let mut index = DueIndex::default();
        for second in 0..200 {
            index.note(7, second);
        }
        assert!(index.needs_rebuild(1), "200 entries for one live key");
        assert!(!index.needs_rebuild(100));
        index.rebuild([(7, 199)].into_iter());
        assert_eq!(index.len(), 1);
        assert_eq!(index.take_due(199), vec![7]);
    }
}
