//! A store that cannot answer, decided per descriptor by its mode (a rule's `on_store_failure`,
//! else `BACKEND_FAILURE_MODE`): `unavailable` fails the call, `open` answers OK uncounted, and
//! `local` counts the descriptor in this replica's memory with its share of the limit.
//!
//! The share is kept by counting every local hit N times (N: the replicas sharing the store,
//! `replicas`) against the whole limit, which is the same as counting it once against the limit
//! over N rounded down, for every algorithm: a fixed window admits `⌊limit/N⌋`, a sliding window
//! the same estimate over N, a token bucket `⌊capacity/N⌋` at once and its rate over N, a
//! concurrency limit `⌊limit/N⌋` held at once. So N replicas that all lost the store admit at
//! most the limit together; `limit_remaining` reads as this replica's estimate for the whole
//! fleet. The bound through flaps and partitions (limit + Σ ⌊(limit − C)/N⌋, C the count a
//! replica last got from the store) is stated in docs/store-outages.md.
//!
//! A replica's local counts for a window live as long as the window, through every outage of
//! it (a flap does not start a fresh share), and begin from the last count the store gave for
//! the key (`seen`): a key known over its limit stays over while the store is away. What a
//! replica counts locally it owes the store; `hand_back` pays it at most once.
//!
//! Must not touch: the algorithms' arithmetic, rules, protobuf; the stores' circuit breakers
//! (those are `storage`'s: an open breaker is an error here like any other).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::ops::{Destination, Operations};
use super::replicas::Replicas;
use crate::clock::Clock;
use crate::storage::memory::MemoryStore;
use crate::storage::{Change, CounterKey, CounterOp, StorageError};

/// Counters one lane's local store holds at most (it drops expired windows first when full).
const LOCAL_KEYS: usize = 1 << 18;

/// What one key owes the store.
#[derive(Debug, Clone, Copy)]
struct Owed {
    hits: u64,
    /// A concurrency lease (handed back as a lease, keeping its expiry).
    lease: bool,
    expires_at: u64,
}

/// What the local mode did, for `/metrics` and `/healthcheck`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutageReadings {
    /// Descriptors decided in this replica's memory.
    pub local_decisions: u64,
    /// Hits counted locally and handed back to the store.
    pub handed_back: u64,
    /// Hits counted locally whose hand-back failed with its outcome unknown (not resent).
    pub unknown: u64,
    /// The replica count the share divides by (`None`: not learned yet).
    pub replicas: Option<u64>,
    /// The stores deciding locally now, with the Unix millisecond they began.
    pub local_since: Vec<(Destination, u64)>,
}

/// The local mode's state: a memory store per destination, what each key owes, and readings.
#[derive(Debug)]
pub(crate) struct Outage {
    stores: [Mutex<Arc<MemoryStore>>; 3],
    owed: Mutex<HashMap<(Destination, CounterKey), Owed>>,
    /// Something is owed (read on every answered request: one load).
    owing: AtomicBool,
    /// Woken when something becomes owed (the hand-back task waits on it).
    owed_now: tokio::sync::Notify,
    /// Per destination: the Unix millisecond it began deciding locally (0: it does not).
    since_ms: [AtomicU64; 3],
    pub(crate) replicas: Replicas,
    /// A descriptor in the local mode was seen (the marks that learn N are then kept).
    wanted: AtomicBool,
    local_decisions: AtomicU64,
    handed_back: AtomicU64,
    /// Hits owed whose hand-back failed with its outcome unknown (not sent again).
    unknown: AtomicU64,
    clock: Arc<dyn Clock>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Outage {
    pub(crate) fn new(pinned: Option<NonZeroU64>, clock: Arc<dyn Clock>) -> Outage {
        let store = || Mutex::new(Arc::new(MemoryStore::new(LOCAL_KEYS, clock.clone())));
        Outage {
            stores: [store(), store(), store()],
            owed: Mutex::new(HashMap::new()),
            owing: AtomicBool::new(false),
            owed_now: tokio::sync::Notify::new(),
            since_ms: Default::default(),
            replicas: Replicas::new(pinned),
            wanted: AtomicBool::new(false),
            local_decisions: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
            clock,
        }
    }

    /// Notes that a descriptor in the local mode was seen.
    pub(crate) fn want(&self) {
        if !self.wanted.load(Ordering::Relaxed) {
            self.wanted.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a call's answers must be settled here: something is owed or decided locally, or
    /// the local mode is in use (its store counts are learned).
    pub(crate) fn settles(&self) -> bool {
        self.active() || self.wanted()
    }

    /// Whether a descriptor in the local mode was seen (the store's counts are then learned).
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    /// Whether the replica count must be learned (a local-mode descriptor was seen, N is not
    /// pinned).
    pub(crate) fn needs_marks(&self) -> bool {
        self.wanted.load(Ordering::Relaxed) && self.replicas.learns()
    }

    /// Whether anything is owed to a store, or a store decides locally (read on every
    /// answered request: one load in the common case).
    pub(crate) fn active(&self) -> bool {
        self.owing.load(Ordering::Acquire)
            || self.since_ms.iter().any(|s| s.load(Ordering::Acquire) != 0)
    }

    /// Counts the operations bound for `to` in this replica's memory, each `n` times, and
    /// notes what they owe the store; `decided` descriptors were decided so.
    pub(crate) async fn count(
        &self,
        ops: &mut Operations,
        to: Destination,
        n: NonZeroU64,
        decided: u64,
        why: &StorageError,
    ) -> Result<(), StorageError> {
        let store = lock(&self.stores[to.lane()]).clone();
        ops.apply_scaled(to, &store, n.get()).await?;
        self.note_owed(to, ops.hits(to));
        self.local_decisions.fetch_add(decided, Ordering::Relaxed);
        let now = self.clock.now().millis().max(1);
        let since = &self.since_ms[to.lane()];
        if since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!(
                store = ?to, replicas = n.get(), error = %why,
                "counter store failed; deciding locally with this replica's share of each limit"
            );
        }
        Ok(())
    }

    fn note_owed(&self, to: Destination, hits: &[CounterOp]) {
        let mut owed = lock(&self.owed);
        for op in hits {
            if op.change.amount() == 0 {
                continue;
            }
            let entry = owed.entry((to, op.key.clone())).or_insert(Owed {
                hits: 0,
                lease: false,
                expires_at: op.expires_at,
            });
            entry.expires_at = entry.expires_at.max(op.expires_at);
            match op.change.bounded() {
                Change::Add(k) => entry.hits = entry.hits.saturating_add(k),
                Change::Lease(k) => {
                    entry.lease = true;
                    entry.hits = entry.hits.saturating_add(k);
                }
                Change::Sub(k) | Change::Release(k) => entry.hits = entry.hits.saturating_sub(k),
            }
        }
        self.set_owing(&owed);
    }

    fn set_owing(&self, owed: &HashMap<(Destination, CounterKey), Owed>) {
        let owing = !owed.is_empty();
        if owing && !self.owing.swap(true, Ordering::AcqRel) {
            self.owed_now.notify_one();
        } else if !owing {
            self.owing.store(false, Ordering::Release);
        }
    }

    /// Whether `to` decides locally now.
    pub(crate) fn is_local(&self, to: Destination) -> bool {
        self.since_ms[to.lane()].load(Ordering::Acquire) != 0
    }

    /// Whether anything is owed to a store (one load).
    pub(crate) fn owing(&self) -> bool {
        self.owing.load(Ordering::Acquire)
    }

    /// Waits until something is owed.
    pub(crate) async fn until_owing(&self) {
        loop {
            let woken = self.owed_now.notified();
            if self.owing() {
                return;
            }
            woken.await;
        }
    }

    /// `to` answered a call: it decides in the store again (said once, with how long it did
    /// not); whether it was deciding locally until now.
    pub(crate) fn answered(&self, to: Destination) -> bool {
        if self.since_ms[to.lane()].load(Ordering::Acquire) == 0 {
            return false;
        }
        let since = self.since_ms[to.lane()].swap(0, Ordering::AcqRel);
        if since != 0 {
            let outage_ms = self.clock.now().millis().saturating_sub(since);
            tracing::warn!(
                store = ?to, outage_ms,
                "counter store answers again; the hits counted locally are handed back to it"
            );
        }
        since != 0
    }

    /// Learns the counts `to` gave for its operations `hits` (`counts` in the same order), so
    /// that local counting in a later outage begins from them: each window counter of this
    /// replica's memory is raised to the store's count (never lowered; leases are not).
    pub(crate) fn seen(&self, to: Destination, hits: &[CounterOp], counts: &[u64]) {
        let store = lock(&self.stores[to.lane()]).clone();
        for (op, &count) in hits.iter().zip(counts) {
            if matches!(op.change, Change::Add(_)) {
                // A full local store only loses the head start, never a count owed.
                let _ = store.raise(&op.key, count, op.expires_at);
            }
        }
    }

    /// Takes what `to` owes for `key` in a window still open at `now`, to be added to a call
    /// that goes to the store anyway (leases are left to the hand-back task).
    pub(crate) fn take_owed(&self, to: Destination, key: &CounterKey, now: u64) -> Option<u64> {
        let mut owed = lock(&self.owed);
        let entry = owed.get(&(to, key.clone()))?;
        if entry.lease {
            return None;
        }
        let taken = owed.remove(&(to, key.clone()))?;
        self.set_owing(&owed);
        (taken.expires_at > now && taken.hits > 0).then_some(taken.hits)
    }

    /// Takes up to `most` keys of what `to` owes in windows still open at `now` (Unix seconds),
    /// as one increment per key; the keys of closed windows are forgotten. What is taken is
    /// no longer owed: it is sent once, and given back only when certainly not applied.
    pub(crate) fn take_owed_chunk(&self, to: Destination, now: u64, most: usize) -> Vec<CounterOp> {
        let mut owed = lock(&self.owed);
        let taken = owed
            .extract_if(|(d, _), _| *d == to)
            .take(most)
            .filter(|(_, o)| o.expires_at > now && o.hits > 0)
            .map(|((_, key), o)| CounterOp {
                key,
                change: match o.lease {
                    true => Change::Lease(o.hits),
                    false => Change::Add(o.hits),
                },
                expires_at: o.expires_at,
            })
            .collect();
        self.set_owing(&owed);
        taken
    }

    /// Whether `to` owes anything.
    pub(crate) fn owes(&self, to: Destination) -> bool {
        self.owing() && lock(&self.owed).keys().any(|(d, _)| *d == to)
    }

    /// The store took `ops` (bound for `to`): their hits are paid.
    pub(crate) fn paid(&self, ops: &[CounterOp]) {
        let hits: u64 = ops.iter().map(|op| op.change.amount()).sum();
        self.handed_back.fetch_add(hits, Ordering::Relaxed);
    }

    /// Sending `ops` (what `to` was owed) failed: owed again when nothing reached the store,
    /// else given up (it may have been applied: a hand-back is never sent twice).
    pub(crate) fn unpaid(&self, to: Destination, ops: &[CounterOp], error: &StorageError) {
        if error.was_unsent() {
            return self.note_owed(to, ops);
        }
        let hits: u64 = ops.iter().map(|op| op.change.amount()).sum();
        self.unknown.fetch_add(hits, Ordering::Relaxed);
        tracing::warn!(
            store = ?to, keys = ops.len(), hits, error = %error,
            "handing local hits back failed with its outcome unknown; not sent again"
        );
    }

    pub(crate) fn readings(&self) -> OutageReadings {
        OutageReadings {
            local_decisions: self.local_decisions.load(Ordering::Relaxed),
            handed_back: self.handed_back.load(Ordering::Relaxed),
            unknown: self.unknown.load(Ordering::Relaxed),
            replicas: self.replicas.count().map(NonZeroU64::get),
            local_since: Destination::ALL
                .into_iter()
                .filter_map(
                    |to| match self.since_ms[to.lane()].load(Ordering::Acquire) {
                        0 => None,
                        since => Some((to, since)),
                    },
                )
                .collect(),
        }
    }
}
