//! The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`): counter keys known to be over
//! their limit, until their window ends. A descriptor whose key is here is answered OVER_LIMIT
//! without a counter-store round trip and without counting (the reference's semantics). The
//! cache is bounded by its byte budget; when full it drops expired entries, then arbitrary ones
//! (a dropped entry only costs a store round trip, never correctness).

use std::collections::HashMap;
use std::sync::Mutex;

use xxhash_rust::xxh3::xxh3_128;

const SHARDS: usize = 16;
/// Approximate bytes per entry (hash, expiry, map overhead).
const ENTRY_BYTES: u64 = 48;

/// Keys over their limit, with the end of their window.
#[derive(Debug)]
pub(crate) struct OverLimitCache {
    shards: Vec<Mutex<HashMap<u128, u64>>>,
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
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard,
        })
    }

    fn shard(&self, hash: u128) -> &Mutex<HashMap<u128, u64>> {
        &self.shards[(hash as usize) % SHARDS]
    }

    /// Whether `key` is known to be over its limit at `now`.
    pub(crate) fn contains(&self, key: &str, now: u64) -> bool {
        let hash = xxh3_128(key.as_bytes());
        lock(self.shard(hash))
            .get(&hash)
            .is_some_and(|&end| end > now)
    }

    /// Remembers that `key` is over its limit until `expires_at`.
    pub(crate) fn insert(&self, key: &str, expires_at: u64, now: u64) {
        let hash = xxh3_128(key.as_bytes());
        let mut map = lock(self.shard(hash));
        if map.len() >= self.per_shard && !map.contains_key(&hash) {
            map.retain(|_, end| *end > now);
            if let Some(victim) = map
                .keys()
                .next()
                .copied()
                .filter(|_| map.len() >= self.per_shard)
            {
                map.remove(&victim);
            }
        }
        map.insert(hash, expires_at);
    }

    /// Forgets `key` (after a refund it may be under its limit again).
    pub(crate) fn remove(&self, key: &str) {
        let hash = xxh3_128(key.as_bytes());
        lock(self.shard(hash)).remove(&hash);
    }

    /// How many keys are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::OverLimitCache;

    #[test]
    fn remembers_until_the_window_ends_and_stays_bounded() {
        assert!(OverLimitCache::new(0).is_none());
        let cache = OverLimitCache::new(48 * 16 * 4).expect("on");
        cache.insert("a", 100, 10);
        assert!(cache.contains("a", 99));
        assert!(!cache.contains("a", 100));
        for i in 0..1_000 {
            cache.insert(&format!("k{i}"), 100, 10);
        }
        assert!(cache.len() <= 64, "{}", cache.len());
        cache.insert("b", 100, 10);
        cache.remove("b");
        assert!(!cache.contains("b", 10));
    }
}
