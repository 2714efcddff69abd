//! Counters: the [`CounterStore`] trait and its implementations, the in-process [`memory`]
//! store (the embedded default), [`memcached`], [`redis`] and [`postgres`] (durable); `expiry`
//! (when a shard's keys fall due), `lateness` (a late answer on a busy runtime is overload)
//! and `breaker` (each remote server's circuit breaker) serve them, and every store fails with a [`StorageError`] (a kind, the store's words and the
//! cause). A store knows
//! keys, deltas and expiry times; it knows nothing about rules, limits or protobuf, and only the
//! limiter calls it.
//!
//! The trait is batch-shaped: one call per request carries every descriptor's hit, so a remote
//! store can spend one round trip per server per request. The answer is the count *after* each
//! hit, taken atomically with the hit itself; the decision is made from it, never from a read
//! taken before the write. That is what makes counting exact under concurrency.

pub mod breaker;
mod error;
pub(crate) mod expiry;
mod key;
mod lateness;
pub mod memcached;
pub mod memory;
mod pipelined;
pub mod postgres;
pub mod redis;
mod remote;
pub mod tls;
pub mod token_bucket;

pub use breaker::{Breaker, Guarded};
pub use error::{ErrorKind, StorageError};
pub use key::{
    CounterKey, KeyError, KeyWriter, MAX_KEY_LEN, MAX_REFERENCE_KEY_LEN, Separator, Tag,
};
pub use token_bucket::{Take, TokenAnswer, TokenStep};

use std::future::Future;

/// What to do to one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Add this many hits (0 = read only; a missing counter then reads 0 and is not created).
    Add(u64),
    /// Refund this many hits; the counter never goes below zero and is not created.
    Sub(u64),
    /// Add this many (0 = read only, nothing created or touched) and set the counter's expiry
    /// to the hit's `expires_at`, whether it is created or already exists (a lease that lives
    /// as long after its last change).
    Lease(u64),
    /// Subtract this many, never below zero, and set the expiry of an existing counter to the
    /// hit's `expires_at`; a missing counter stays missing.
    Release(u64),
}

/// The most one operation adds or takes away: a larger amount counts as this much. It is far
/// above any limit a rule can state (requests per unit are 32-bit; token-bucket capacities stay
/// under 2^33), so every answer is the same as with the amount asked, and it keeps every count
/// far from 2^64, where memcached's arithmetic wraps.
pub const MAX_DELTA: u64 = 1 << 40;

/// Counts saturate here on every store: a count never reads above it, and an add that would
/// pass it leaves the count at it (2^52: a count up to one [`MAX_DELTA`] above it is still
/// exact in the doubles of a Redis script, which compares it with the ceiling).
pub const COUNT_CEILING: u64 = 1 << 52;

impl Change {
    /// A read: the count as it is, nothing created or touched (an add of nothing, which every
    /// store answers so; matched as a pattern too).
    pub const READ: Change = Change::Add(0);

    /// The operation as every store applies it: its amount at most [`MAX_DELTA`].
    pub fn bounded(self) -> Change {
        match self {
            Change::Add(n) => Change::Add(n.min(MAX_DELTA)),
            Change::Sub(n) => Change::Sub(n.min(MAX_DELTA)),
            Change::Lease(n) => Change::Lease(n.min(MAX_DELTA)),
            Change::Release(n) => Change::Release(n.min(MAX_DELTA)),
        }
    }

    /// How many the operation adds or takes away.
    pub fn amount(self) -> u64 {
        match self {
            Change::Add(n) | Change::Sub(n) | Change::Lease(n) | Change::Release(n) => n,
        }
    }
}

/// One counter operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterOp {
    /// The counter key.
    pub key: CounterKey,
    /// Add (0 = read only) or refund, and by how much.
    pub change: Change,
    /// Unix second at which the counter may be dropped (the end of its window).
    pub expires_at: u64,
}

/// A point-in-time reading of a store's state. Typed, so that the store says what it knows and
/// only `metrics` decides names, labels and format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gauge {
    /// Live counters held by the in-process store.
    MemoryCounters(u64),
    /// One memcached server as the client sees it.
    MemcachedServer {
        /// `host:port`.
        server: String,
        /// Not in backoff after failures.
        up: bool,
        /// Connections open.
        connections: u64,
        /// Connections open and idle (pooled transports; pipelined connections are shared).
        idle_connections: u64,
    },
    /// One store server's circuit breaker.
    Breaker {
        /// The server as its store names it (`memcached 10.0.0.1:11211`, `redis …`).
        server: String,
        /// Open: calls fail at once but for the probes.
        open: bool,
        /// Times it opened.
        opens: u64,
        /// Probes sent while open.
        probes: u64,
    },
    /// The PostgreSQL connection pool.
    PostgresPool {
        /// Connections open.
        connections: u64,
        /// Connections open and idle.
        idle: u64,
    },
}

/// A shared counter store.
pub trait CounterStore: Send + Sync + 'static {
    /// Applies every hit and returns the count after each, in order. Either all answers come
    /// back or an error does. Every store applies [`Change::bounded`] and saturates counts at
    /// [`COUNT_CEILING`], so that no amount a client can send wraps a count.
    fn apply_ops(
        &self,
        hits: &[CounterOp],
    ) -> impl Future<Output = Result<Vec<u64>, StorageError>> + Send;

    /// Applies every token-bucket step atomically (each as [`TokenStep::apply`] says) and
    /// returns each answer, in order. Either all answers come back or an error does; a store
    /// that gives up (contention) says so with an error, never with an answer it did not take.
    fn take_tokens(
        &self,
        steps: &[TokenStep],
    ) -> impl Future<Output = Result<Vec<TokenAnswer>, StorageError>> + Send;

    /// Whether the store can currently serve (for readiness), and if not, why (the error
    /// names the server and what it said). Must not block for long.
    fn ready(&self) -> impl Future<Output = Result<(), StorageError>> + Send;

    /// Point-in-time readings of the store; `metrics` names and renders them.
    fn gauges(&self) -> Vec<Gauge> {
        Vec::new()
    }

    /// Whether an answered operation is on disk, surviving a restart of the store and of
    /// Turnstile (PostgreSQL); said per limit in `/rlconfig`.
    fn durable(&self) -> bool {
        false
    }
}

impl<T: CounterStore> CounterStore for std::sync::Arc<T> {
    fn apply_ops(
        &self,
        hits: &[CounterOp],
    ) -> impl Future<Output = Result<Vec<u64>, StorageError>> + Send {
        (**self).apply_ops(hits)
    }

    fn take_tokens(
        &self,
        steps: &[TokenStep],
    ) -> impl Future<Output = Result<Vec<TokenAnswer>, StorageError>> + Send {
        (**self).take_tokens(steps)
    }

    fn ready(&self) -> impl Future<Output = Result<(), StorageError>> + Send {
        (**self).ready()
    }

    fn gauges(&self) -> Vec<Gauge> {
        (**self).gauges()
    }

    fn durable(&self) -> bool {
        (**self).durable()
    }
}
