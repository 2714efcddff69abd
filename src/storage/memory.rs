//! The in-process counter store (the embedded default, `BACKEND_TYPE=memory`). Keys are hashed
//! to 128 bits (xxh3) and kept in sharded maps, so memory per counter is small and fixed
//! whatever the descriptor values. The store is bounded: a shard that is full first drops its
//! expired windows, and if it is still full refuses new counters with a [`StorageError`] of
//! kind [`ErrorKind::Full`](super::ErrorKind::Full) rather than silently forgetting live ones.
//! Each shard indexes its counters by expiry second (`expiry`), so dropping expired ones costs
//! O(1) each and a full shard with nothing expired refuses at once, never scanning its live
//! counters under the lock.
//! A sweeper (see [`MemoryStore::sweep`]) drops expired windows in the background.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_128;

use super::expiry::DueIndex;
use super::remote::lock;
use super::{
    COUNT_CEILING, Change, CounterOp, CounterStore, Gauge, StorageError, TokenAnswer, TokenStep,
};
use crate::clock::Clock;

const SHARDS: usize = 64;

/// A counter, or a token bucket's TAT (the only value wider than 64 bits).
#[derive(Debug, Clone, Copy)]
struct Counter {
    value: u128,
    expires_at: u64,
}

/// One shard: its counters, and when each falls due.
#[derive(Debug, Default)]
struct Shard {
    map: HashMap<u128, Counter>,
    due: DueIndex,
}

impl Shard {
    /// Drops every counter expired at `now` (only those: O(1) each, nothing when none is due);
    /// returns how many.
    fn drop_expired(&mut self, now: u64) -> usize {
        let mut dropped = 0;
        for hash in self.due.take_due(now) {
            // A stale entry: the counter's expiry moved (it was noted again) or it is gone.
            if self.map.get(&hash).is_some_and(|c| c.expires_at <= now) {
                self.map.remove(&hash);
                dropped += 1;
            }
        }
        dropped
    }

    /// Notes a counter's (new) expiry.
    fn note(&mut self, hash: u128, expires_at: u64) {
        self.due.note(hash, expires_at);
        if self.due.needs_rebuild(self.map.len()) {
            let keys = self.map.iter().map(|(h, c)| (*h, c.expires_at));
            self.due.rebuild(keys);
        }
    }
}

/// The in-process counter store.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    per_shard_cap: usize,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// A store holding at most about `max_keys` live counters.
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Self {
            shards,
            per_shard_cap: (max_keys / SHARDS).max(1),
            clock,
        }
    }

    /// Drops every expired counter; returns how many were dropped.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now_secs();
        self.shards
            .iter()
            .map(|shard| lock(shard).drop_expired(now))
            .sum()
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
        self.shards.iter().map(|s| lock(s).map.len()).sum()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Raises the counter under `key` to at least `count`, creating it with `expires_at` when
    /// it is missing or expired (the local mode learning the count another store gave). A
    /// count already higher is kept; a full shard refuses as an add would.
    pub(crate) fn raise(
        &self,
        key: &crate::storage::CounterKey,
        count: u64,
        expires_at: u64,
    ) -> Result<(), StorageError> {
        let now = self.clock.now_secs();
        let count = count.min(COUNT_CEILING);
        let hash = xxh3_128(key.as_bytes());
        let mut shard = self.shard(hash);
        match shard.map.get_mut(&hash) {
            Some(counter) if counter.expires_at > now => {
                counter.value = counter.value.max(u128::from(count));
                Ok(())
            }
            _ if count == 0 => Ok(()),
            _ => {
                shard.map.remove(&hash);
                self.insert(&mut shard, hash, u128::from(count), expires_at, now)
            }
        }
    }

    fn shard(&self, hash: u128) -> std::sync::MutexGuard<'_, Shard> {
        lock(&self.shards[(hash as usize) % SHARDS])
    }

    fn apply(&self, hit: &CounterOp, now: u64) -> Result<u64, StorageError> {
        let hash = xxh3_128(hit.key.as_bytes());
        let mut shard = self.shard(hash);
        let op = hit.change.bounded();
        if let Some(counter) = shard.map.get_mut(&hash) {
            if counter.expires_at > now {
                let count = u64::try_from(counter.value).unwrap_or(u64::MAX);
                let (count, moved) = match op {
                    Change::Add(n) => (count.saturating_add(n).min(COUNT_CEILING), false),
                    Change::Sub(n) => (count.saturating_sub(n), false),
                    Change::Lease(0) => return Ok(count),
                    Change::Lease(n) => (count.saturating_add(n).min(COUNT_CEILING), true),
                    Change::Release(n) => (count.saturating_sub(n), true),
                };
                counter.value = u128::from(count);
                if moved && counter.expires_at != hit.expires_at {
                    counter.expires_at = hit.expires_at;
                    shard.note(hash, hit.expires_at);
                }
                return Ok(count);
            }
            shard.map.remove(&hash);
        }
        let (Change::Add(n) | Change::Lease(n)) = op else {
            return Ok(0);
        };
        if n == 0 {
            return Ok(0);
        }
        self.insert(&mut shard, hash, u128::from(n), hit.expires_at, now)?;
        Ok(n)
    }

    /// Creates an entry, dropping the shard's expired ones first when it is full (only those:
    /// never a scan of the live ones); refuses when it is still full.
    fn insert(
        &self,
        shard: &mut Shard,
        hash: u128,
        value: u128,
        expires_at: u64,
        now: u64,
    ) -> Result<(), StorageError> {
        if shard.map.len() >= self.per_shard_cap {
            shard.drop_expired(now);
            if shard.map.len() >= self.per_shard_cap {
                return Err(StorageError::full(format!(
                    "memory store holds its maximum of {} live counters in this shard",
                    self.per_shard_cap
                )));
            }
        }
        shard.map.insert(hash, Counter { value, expires_at });
        shard.note(hash, expires_at);
        Ok(())
    }

    fn step(&self, step: &TokenStep, now: u64) -> Result<TokenAnswer, StorageError> {
        let hash = xxh3_128(step.key.as_bytes());
        let mut shard = self.shard(hash);
        let stored = shard
            .map
            .get(&hash)
            .filter(|c| c.expires_at > now)
            .map(|c| c.value);
        let (answer, write) = step.apply(stored);
        if let Some(tat) = write {
            let expires_at = step.expires_at(tat);
            match shard.map.get_mut(&hash) {
                Some(counter) => {
                    let moved = counter.expires_at != expires_at;
                    *counter = Counter {
                        value: tat,
                        expires_at,
                    };
                    if moved {
                        shard.note(hash, expires_at);
                    }
                }
                None => self.insert(&mut shard, hash, tat, expires_at, now)?,
            }
        }
        Ok(answer)
    }
}

impl CounterStore for MemoryStore {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let now = self.clock.now_secs();
        hits.iter().map(|hit| self.apply(hit, now)).collect()
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        let now = self.clock.now_secs();
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
