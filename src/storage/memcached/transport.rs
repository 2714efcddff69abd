//! How commands reach one memcached server: the [`Transport`] trait and what it carries
//! (commands, token-token-bucket states, errors, bytes sent). Two transports implement it:
//! [`Pipelined`](super::pipelined::Pipelined) (our own meta-protocol connections shared by every
//! caller, one write per batch; the default) and [`Pooled`](super::pooled::Pooled)
//! (async-memcached connections in a bb8 pool, one command in flight each; meta commands, or the
//! classic `incr`/`add` family for memcached < 1.6). The trait carries what every transport
//! does alike (token-token-bucket states, probes, connections); counter batches, the hot path, go each
//! transport's own way: a pipelined call's parts are gathered in place across its servers
//! (`pipelined::gather`), a pooled call runs one command per connection (`Pooled::apply`).
//! This file sits below the two clients and names neither; the configured kind that names
//! them is `kind::ServerTransport`, above them.
//!
//! Must not touch: rules, limiter, the store's grouping of hits by server, health.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::storage::Change;

/// One counter command for a server.
#[derive(Debug, Clone, Copy)]
pub(super) struct Command<'a> {
    /// The counter key (sent base64-encoded by meta transports).
    pub(super) key: &'a str,
    /// Add (`Change::READ` only reads) or refund.
    pub(super) change: Change,
    /// memcached's exptime for a counter this command creates.
    pub(super) exptime: u64,
}

/// A token bucket's state as stored: its value (the TAT) and the CAS token to replace it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StoredState {
    pub(super) value: u128,
    pub(super) cas: u64,
}

/// A token bucket's state to write with TTL `exptime`: in place of the item whose CAS token is
/// `cas`, or as a new item when `cas` is `None`.
#[derive(Debug, Clone, Copy)]
pub(super) struct StateWrite<'a> {
    pub(super) key: &'a str,
    pub(super) value: u128,
    pub(super) cas: Option<u64>,
    pub(super) exptime: u64,
}

/// A transport's answer, or why there was none.
pub(super) type Answer<T> = Result<T, TransportError>;

/// Why a transport could not answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum TransportError {
    /// No connection could be made.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// The connection broke while the commands were out.
    #[error("connection failed: {0}")]
    Io(std::io::Error),
    /// The server answered something we cannot use; it is reachable.
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// The commands could not even be queued (Turnstile's own queue is full); nothing was sent.
    #[error("{0}")]
    Overloaded(String),
}

impl TransportError {
    /// Whether the error is evidence that the server is unreachable (it is then marked down),
    /// as opposed to a bad answer from a live server or Turnstile's own overload.
    pub(super) fn is_connection_fault(&self) -> bool {
        matches!(self, TransportError::Connect(_) | TransportError::Io(_))
    }
}

/// When a batch's commands left Turnstile (written to the socket), set by the transport: what
/// separates Turnstile's own queueing from the server's response time. Shared by the caller
/// and the transport (a pipelined connection's writer marks it).
#[derive(Debug, Clone)]
pub(super) struct Sent(Arc<AtomicU64>);

/// The moment `Sent` counts from (nanoseconds after it; 0 is "not sent").
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Default for Sent {
    fn default() -> Self {
        // The epoch is set before any mark, so every mark is after it.
        epoch();
        Sent(Arc::new(AtomicU64::new(0)))
    }
}

impl Sent {
    /// The commands were written at `at`.
    pub(super) fn mark(&self, at: Instant) {
        let nanos = at.saturating_duration_since(epoch()).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX - 1);
        self.0.store(nanos + 1, Ordering::Release);
    }

    /// When the commands were written; `None` while they have not been.
    pub(super) fn at(&self) -> Option<Instant> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(epoch() + Duration::from_nanos(nanos - 1)),
        }
    }
}

/// Connections a transport holds to its server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Connections {
    /// Connections open to the server.
    pub(super) open: u64,
    /// Open and not carrying a command now (pooled transports; pipelined ones part
    /// connections and report 0).
    pub(super) idle: u64,
}

/// A way of carrying counter commands to one server.
pub(super) trait Transport: Send + Sync + fmt::Debug {
    /// Reads a token-bucket state and its CAS token (`None` when missing).
    fn read_state<'a>(
        &'a self,
        key: &'a str,
        sent: &'a Sent,
    ) -> impl Future<Output = Answer<Option<StoredState>>> + Send + 'a;

    /// Writes a token-bucket state; `false` when another writer got there first.
    fn write_state<'a>(
        &'a self,
        write: StateWrite<'a>,
        sent: &'a Sent,
    ) -> impl Future<Output = Answer<bool>> + Send + 'a;

    /// One cheap round trip that proves the server answers.
    fn probe(&self) -> impl Future<Output = Result<(), TransportError>> + Send + '_;

    /// Forgets the current connections after a failure, so the next use reconnects.
    fn reset(&self);

    /// The connections held now.
    fn connections(&self) -> Connections;
}
