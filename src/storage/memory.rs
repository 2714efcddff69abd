//! The in-process counter store (the embedded default, `BACKEND_TYPE=memory`). Keys are hashed
//! to 128 bits (xxh3) and kept in sharded maps, so memory per counter is small and fixed
//! whatever the descriptor values. The store is bounded: a shard that is full first drops its
//! expired windows, and if it is still full refuses new counters with
//! [`StorageError::Full`] rather than silently forgetting live ones.
//! A sweeper (see [`MemoryStore::sweep`]) drops expired windows in the background.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_128;

use super::{BucketAnswer, BucketStep, COUNT_CEILING, CounterStore, Gauge, Hit, Op, StorageError};
use crate::clock::Clock;

const SHARDS: usize = 64;

/// A counter, or a token bucket's TAT (the only value wider than 64 bits).
#[derive(Debug, Clone, Copy)]
struct Counter {
    value: u128,
    expires_at: u64,
}

/// The in-process counter store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<HashMap<u128, Counter>>]>,
    per_shard_cap: usize,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// A store holding at most about `max_keys` live counters.
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Self {
            shards,
            per_shard_cap: (max_keys / SHARDS).max(1),
            clock,
        }
    }

    /// Drops every expired counter; returns how many were dropped.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut map = lock(shard);
            let before = map.len();
            map.retain(|_, c| c.expires_at > now);
            dropped += before - map.len();
        }
        dropped
    }

    /// Sweeps every `period`, for as long as the returned future is polled.
    pub async fn sweep_every(self: std::sync::Arc<Self>, period: std::time::Duration) {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            self.sweep();
        }
    }

    /// How many counters are held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn apply(&self, hit: &Hit, now: u64) -> Result<u64, StorageError> {
        let hash = xxh3_128(hit.key.as_bytes());
        let mut map = lock(&self.shards[(hash as usize) % SHARDS]);
        let op = hit.op.bounded();
        if let Some(counter) = map.get_mut(&hash) {
            if counter.expires_at > now {
                let count = u64::try_from(counter.value).unwrap_or(u64::MAX);
                let count = match op {
                    Op::Add(n) => count.saturating_add(n).min(COUNT_CEILING),
                    Op::Sub(n) => count.saturating_sub(n),
                    Op::Lease(0) => return Ok(count),
                    Op::Lease(n) => {
                        counter.expires_at = hit.expires_at;
                        count.saturating_add(n).min(COUNT_CEILING)
                    }
                    Op::Release(n) => {
                        counter.expires_at = hit.expires_at;
                        count.saturating_sub(n)
                    }
                };
                counter.value = u128::from(count);
                return Ok(count);
            }
            map.remove(&hash);
        }
        let (Op::Add(n) | Op::Lease(n)) = op else {
            return Ok(0);
        };
        if n == 0 {
            return Ok(0);
        }
        self.insert(&mut map, hash, u128::from(n), hit.expires_at, now)?;
        Ok(n)
    }

    /// Creates an entry, making room among expired ones first; refuses when the shard is full.
    fn insert(
        &self,
        map: &mut HashMap<u128, Counter>,
        hash: u128,
        value: u128,
        expires_at: u64,
        now: u64,
    ) -> Result<(), StorageError> {
        if map.len() >= self.per_shard_cap {
            map.retain(|_, c| c.expires_at > now);
            if map.len() >= self.per_shard_cap {
                return Err(StorageError::Full(format!(
                    "memory store holds its maximum of {} live counters in this shard",
                    self.per_shard_cap
                )));
            }
        }
        map.insert(hash, Counter { value, expires_at });
        Ok(())
    }

    fn step(&self, step: &BucketStep, now: u64) -> Result<BucketAnswer, StorageError> {
        let hash = xxh3_128(step.key.as_bytes());
        let mut map = lock(&self.shards[(hash as usize) % SHARDS]);
        let stored = map
            .get(&hash)
            .filter(|c| c.expires_at > now)
            .map(|c| c.value);
        let (answer, write) = step.apply(stored);
        if let Some(tat) = write {
            let expires_at = step.expires_at(tat);
            match map.get_mut(&hash) {
                Some(counter) => {
                    *counter = Counter {
                        value: tat,
                        expires_at,
                    }
                }
                None => self.insert(&mut map, hash, tat, expires_at, now)?,
            }
        }
        Ok(answer)
    }
}

/// A poisoned shard only means another thread panicked mid-update of plain integers; the data
/// is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CounterStore for MemoryStore {
    async fn hit(&self, hits: &[Hit]) -> Result<Vec<u64>, StorageError> {
        let now = self.clock.now();
        hits.iter().map(|hit| self.apply(hit, now)).collect()
    }

    async fn bucket(&self, steps: &[BucketStep]) -> Result<Vec<BucketAnswer>, StorageError> {
        let now = self.clock.now();
        steps.iter().map(|step| self.step(step, now)).collect()
    }

    async fn ready(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn gauges(&self) -> Vec<Gauge> {
        vec![Gauge::MemoryCounters(
            u64::try_from(self.len()).unwrap_or(u64::MAX),
        )]
    }
}
