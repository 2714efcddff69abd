//! One memcached server: its transport and its health. Only evidence about the server marks it
//! down: a connection that cannot be made or breaks, or a failed probe. A late answer to
//! commands that were written is not such evidence by itself (Turnstile may have been too busy
//! to read it), so it starts one probe on the side, and the probe's failure marks the server
//! down. A down server is retried with an exponential backoff (50 ms doubling to 1 s, ±25 %); while it
//! is down, its operations fail at once instead of each waiting for a deadline, and one
//! operation per backoff period is let through (`storage::remote::Backoff`). A success clears
//! the failure count.

use std::sync::atomic::{AtomicBool, Ordering};

use super::dispatch::ServerTransport;
use crate::storage::remote::Backoff;

/// A server, the transport that reaches it, and its health.
#[derive(Debug)]
pub(super) struct Server {
    pub(super) name: String,
    pub(super) transport: ServerTransport,
    health: Backoff,
    /// The server has answered at least once (until then readiness asks it).
    answered: AtomicBool,
    /// A probe after a late answer is under way.
    probing: AtomicBool,
}

impl Server {
    /// A server reached through `transport`, healthy until it fails.
    pub(super) fn new(name: String, transport: ServerTransport) -> Server {
        Server {
            name,
            transport,
            health: Backoff::default(),
            answered: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        }
    }

    /// Whether an operation may go to this server now. While down, only the caller that claims
    /// the next attempt is let through.
    pub(super) fn admit(&self) -> bool {
        self.health.admit()
    }

    /// Whether the server is currently considered reachable.
    pub(super) fn is_up(&self) -> bool {
        self.health.is_up()
    }

    /// Whether the server is up and has answered since it was added: only then does
    /// readiness take it as reachable without asking it.
    pub(super) fn known_up(&self) -> bool {
        self.is_up() && self.answered.load(Ordering::Acquire)
    }

    pub(super) fn record_success(&self) {
        self.answered.store(true, Ordering::Release);
        if self.health.record_success() {
            tracing::warn!(server = %self.name, "memcached server is reachable again");
        }
    }

    /// Claims the one probe that a late answer may start; false while one is under way.
    pub(super) fn start_probe(&self) -> bool {
        !self.probing.swap(true, Ordering::AcqRel)
    }

    /// Records a probe's outcome and lets the next late answer start another.
    pub(super) fn probe_done(&self, answered: bool) {
        if answered {
            self.record_success();
        } else {
            self.record_failure();
        }
        self.probing.store(false, Ordering::Release);
    }

    pub(super) fn record_failure(&self) {
        if self.health.record_failure() {
            tracing::error!(server = %self.name, "memcached server unreachable; retrying with backoff");
        }
    }
}
