//! The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`): counter keys known to be over
//! their limit, until their window ends. A descriptor whose key is here is answered OVER_LIMIT
//! without a counter-store round trip and without counting (the reference's semantics). The
//! cache is bounded by its byte budget; when full it drops expired entries, then the one whose
//! window ends first (a dropped entry only costs a store round trip, never correctness), each
//! in O(1) through an index by expiry second: a full shard is never scanned.
//!
//! An entry remembers the limit the key went over: a descriptor whose limit is now higher (a
//! request's `limit` override raised it, envoyproxy/ratelimit's issue #1077) is counted in the
//! store again, since its count may be within the higher limit; one at the same or a lower
//! limit is over for certain.

use std::collections::HashMap;
use std::sync::Mutex;

use xxhash_rust::xxh3::xxh3_128;

use crate::storage::expiry::DueIndex;

const SHARDS: usize = 16;
/// Approximate bytes per entry (hash, expiry, map overhead, its place in the expiry index).
const ENTRY_BYTES: u64 = 72;

/// What the cache knows of a key: the end of its window, and the limit it went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Over {
    end: u64,
    limit: u32,
}

/// One shard: keys (hashed) with their window's end and limit, and when each falls due.
#[derive(Debug, Default)]
struct Shard {
    ends: HashMap<u128, Over>,
    due: DueIndex,
}

impl Shard {
    /// Makes room for one more key: drops the expired ones (O(1) each), and when none was,
    /// the one whose window ends first. Never scans the shard.
    fn make_room(&mut self, now: u64) {
        let mut dropped = false;
        for hash in self.due.take_due(now) {
            if self.ends.get(&hash).is_some_and(|o| o.end <= now) {
                self.ends.remove(&hash);
                dropped = true;
            }
        }
        if dropped {
            return;
        }
        while let Some((hash, end)) = self.due.take_earliest() {
            // Stale entries (a key re-inserted with another end, or removed) are skipped.
            if self.ends.get(&hash).is_some_and(|o| o.end == end) {
                self.ends.remove(&hash);
                return;
            }
        }
    }
}

/// Keys over their limit, with the end of their window.
#[derive(Debug)]
pub(crate) struct OverLimitCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl OverLimitCache {
    /// A cache of about `bytes` bytes; `None` when 0 (off).
    pub(crate) fn new(bytes: u64) -> Option<OverLimitCache> {
        if bytes == 0 {
            return None;
        }
        let entries = usize::try_from(bytes / ENTRY_BYTES).unwrap_or(usize::MAX);
        let per_shard = (entries / SHARDS).max(1);
        Some(OverLimitCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
        })
    }

    fn shard(&self, hash: u128) -> &Mutex<Shard> {
        &self.shards[(hash as usize) % SHARDS]
    }

    /// Whether `key` is known to be over `limit` at `now` (it went over that limit or a
    /// higher one in this window).
    pub(crate) fn contains(&self, key: &str, limit: u32, now: u64) -> bool {
        let hash = xxh3_128(key.as_bytes());
        lock(self.shard(hash))
            .ends
            .get(&hash)
            .is_some_and(|o| o.end > now && limit <= o.limit)
    }

    /// Remembers that `key` is over `limit` until `expires_at`.
    pub(crate) fn insert(&self, key: &str, limit: u32, expires_at: u64, now: u64) {
        let hash = xxh3_128(key.as_bytes());
        let mut shard = lock(self.shard(hash));
        if shard.ends.len() >= self.per_shard && !shard.ends.contains_key(&hash) {
            shard.make_room(now);
        }
        let over = Over {
            end: expires_at,
            limit,
        };
        let before = shard.ends.insert(hash, over);
        if before.map(|o| o.end) != Some(expires_at) {
            shard.due.note(hash, expires_at);
            if shard.due.needs_rebuild(shard.ends.len()) {
                let keys: Vec<(u128, u64)> = shard.ends.iter().map(|(h, o)| (*h, o.end)).collect();
                shard.due.rebuild(keys.into_iter());
            }
        }
    }

    /// Forgets `key` (after a refund it may be under its limit again).
    pub(crate) fn remove(&self, key: &str) {
        let hash = xxh3_128(key.as_bytes());
        lock(self.shard(hash)).ends.remove(&hash);
    }

    /// How many keys are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).ends.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::OverLimitCache;

    #[test]
    fn remembers_until_the_window_ends_and_stays_bounded() {
        assert!(OverLimitCache::new(0).is_none());
        let cache = OverLimitCache::new(super::ENTRY_BYTES * 16 * 4).expect("on");
        cache.insert("a", 5, 100, 10);
        assert!(cache.contains("a", 5, 99));
        assert!(!cache.contains("a", 5, 100));
        for i in 0..1_000 {
            cache.insert(&format!("k{i}"), 5, 100, 10);
        }
        assert!(cache.len() <= 64, "{}", cache.len());
        cache.insert("b", 5, 100, 10);
        cache.remove("b");
        assert!(!cache.contains("b", 5, 10));
    }

    #[test]
    fn a_key_over_a_limit_is_over_every_lower_one_and_not_a_higher_one() {
        let cache = OverLimitCache::new(super::ENTRY_BYTES * 64).expect("on");
        cache.insert("k", 1, 100, 10);
        assert!(cache.contains("k", 1, 20));
        assert!(
            !cache.contains("k", 100, 20),
            "a raised override is counted"
        );
        cache.insert("j", 50, 100, 10);
        assert!(cache.contains("j", 10, 20), "over 50 is over 10");
    }

    #[test]
    fn a_full_shard_drops_the_expired_then_the_earliest_ending() {
        let mut shard = super::Shard::default();
        let over = |end| super::Over { end, limit: 1 };
        for (hash, end) in [(1, 20), (2, 20), (3, 100), (4, 50)] {
            shard.ends.insert(hash, over(end));
            shard.due.note(hash, end);
        }
        shard.make_room(30);
        let mut left: Vec<u128> = shard.ends.keys().copied().collect();
        left.sort_unstable();
        assert_eq!(left, [3, 4], "the expired went, the live stayed");
        shard.make_room(30);
        assert_eq!(
            shard.ends.keys().copied().collect::<Vec<_>>(),
            [3],
            "then the earliest end"
        );
        // A stale entry (4 re-inserted with a later end) is skipped, not taken for the key.
        shard.ends.insert(4, over(200));
        shard.due.note(4, 200);
        shard.due.note(4, 40);
        shard.make_room(30);
        assert_eq!(shard.ends.get(&4), Some(&over(200)));
        assert!(!shard.ends.contains_key(&3));
    }
}
