//! A store that cannot answer, decided per descriptor by its mode (a rule's `on_store_failure`,
//! else `BACKEND_FAILURE_MODE`): `unavailable` fails the call, `open` answers OK uncounted, and
//! `local` counts the descriptor in this replica's memory with its share of the limit.
//!
//! The share is kept by counting every local hit N times (N: the replicas sharing the store,
//! `replicas`) against the whole limit, which is the same as counting it once against the limit
//! over N rounded down, for every algorithm: a fixed window admits `⌊limit/N⌋`, a sliding window
//! the same estimate over N, a token bucket `⌊capacity/N⌋` at once and its rate over N, a
//! concurrency limit `⌊limit/N⌋` held at once. So N replicas together never admit more than the
//! limit; `limit_remaining` reads as this replica's estimate for the whole fleet.
//!
//! What a replica counts locally it owes the store: when the store answers again, each key of a
//! window still open gets one increment with the hits counted here (a lease keeps its expiry),
//! and counting is the store's again. Token buckets are not handed back (the store's bucket
//! refilled meanwhile; the bound holds within the outage).
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
    handing_back: AtomicBool,
    /// Per destination: the Unix millisecond it began deciding locally (0: it does not).
    since_ms: [AtomicU64; 3],
    pub(crate) replicas: Replicas,
    /// A descriptor in the local mode was seen (the marks that learn N are then kept).
    wanted: AtomicBool,
    local_decisions: AtomicU64,
    handed_back: AtomicU64,
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
            handing_back: AtomicBool::new(false),
            since_ms: Default::default(),
            replicas: Replicas::new(pinned),
            wanted: AtomicBool::new(false),
            local_decisions: AtomicU64::new(0),
            handed_back: AtomicU64::new(0),
            clock,
        }
    }

    /// Notes that a descriptor in the local mode was seen.
    pub(crate) fn want(&self) {
        if !self.wanted.load(Ordering::Relaxed) {
            self.wanted.store(true, Ordering::Relaxed);
        }
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
        self.owing.store(!owed.is_empty(), Ordering::Release);
    }

    /// Whether `to` decides locally now.
    pub(crate) fn is_local(&self, to: Destination) -> bool {
        self.since_ms[to.lane()].load(Ordering::Acquire) != 0
    }

    /// Claims the hand-back (one at a time); `None` when another is under way.
    pub(crate) fn claim(&self) -> Option<HandBack<'_>> {
        self.handing_back
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| HandBack { outage: self })
    }

    /// What `to` owes in windows still open at `now` (Unix seconds), as one increment per key;
    /// the keys of closed windows are forgotten.
    pub(crate) fn owed_by(&self, to: Destination, now: u64) -> Vec<CounterOp> {
        let mut owed = lock(&self.owed);
        owed.retain(|(_, _), o| o.expires_at > now && o.hits > 0);
        self.owing.store(!owed.is_empty(), Ordering::Release);
        owed.iter()
            .filter(|((d, _), _)| *d == to)
            .map(|((_, key), o)| CounterOp {
                key: key.clone(),
                change: match o.lease {
                    true => Change::Lease(o.hits),
                    false => Change::Add(o.hits),
                },
                expires_at: o.expires_at,
            })
            .collect()
    }

    /// `to` took `paid` back: those hits are settled, its local counts start again empty, and it
    /// decides in the store again.
    pub(crate) fn settled(&self, to: Destination, paid: &[CounterOp]) {
        let mut hits = 0;
        {
            let mut owed = lock(&self.owed);
            for op in paid {
                let (Change::Add(k) | Change::Lease(k)) = op.change else {
                    continue;
                };
                hits += k;
                if let Some(o) = owed.get_mut(&(to, op.key.clone())) {
                    o.hits = o.hits.saturating_sub(k);
                    if o.hits == 0 {
                        owed.remove(&(to, op.key.clone()));
                    }
                }
            }
            self.owing.store(!owed.is_empty(), Ordering::Release);
        }
        *lock(&self.stores[to.lane()]) = Arc::new(MemoryStore::new(LOCAL_KEYS, self.clock.clone()));
        self.handed_back.fetch_add(hits, Ordering::Relaxed);
        let since = self.since_ms[to.lane()].swap(0, Ordering::AcqRel);
        let outage_ms = self.clock.now().millis().saturating_sub(since);
        tracing::warn!(
            store = ?to, keys = paid.len(), hits, outage_ms,
            "counter store answers again; the hits counted locally are handed back to it"
        );
    }

    pub(crate) fn readings(&self) -> OutageReadings {
        OutageReadings {
            local_decisions: self.local_decisions.load(Ordering::Relaxed),
            handed_back: self.handed_back.load(Ordering::Relaxed),
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

/// The one hand-back under way; released when dropped.
pub(crate) struct HandBack<'a> {
    outage: &'a Outage,
}

impl Drop for HandBack<'_> {
    fn drop(&mut self) {
        self.outage.handing_back.store(false, Ordering::Release);
    }
}
