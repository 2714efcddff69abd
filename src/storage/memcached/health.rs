//! One memcached server: its transport and its health. Only evidence about the server marks it
//! down: a connection that cannot be made or breaks, or a failed probe. A late answer to
//! commands that were written is not such evidence by itself (Turnstile may have been too busy
//! to read it), so it starts one probe on the side, and the probe's failure marks the server
//! down. The server's circuit breaker (`storage::breaker`) opens on the first such evidence:
//! while it is open, its operations fail at once instead of each waiting for a deadline, and
//! one operation per backoff period (50 ms doubling to 1 s, ±25 %) is let through as its probe.
//! A success closes it.

use std::sync::atomic::{AtomicBool, Ordering};

use super::dispatch::ServerTransport;
use crate::storage::breaker::{Admit, Breaker};

/// A server, the transport that reaches it, and its health.
#[derive(Debug)]
pub(super) struct Server {
    pub(super) name: String,
    pub(super) transport: ServerTransport,
    health: Breaker,
    /// The server has answered at least once (until then readiness asks it).
    answered: AtomicBool,
    /// A probe after a late answer is under way.
    probing: AtomicBool,
}

impl Server {
    /// A server reached through `transport`, healthy until it fails.
    pub(super) fn new(name: String, transport: ServerTransport) -> Server {
        Server {
            health: Breaker::new(format!("memcached {name}"), 1),
            name,
            transport,
            answered: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        }
    }

    /// Whether an operation may go to this server now. While down, only the caller that claims
    /// the next attempt is let through.
    pub(super) fn admit(&self) -> bool {
        self.health.admit() != Admit::Refuse
    }

    /// Whether the server is currently considered reachable.
    pub(super) fn is_up(&self) -> bool {
        !self.health.is_open()
    }

    /// Its circuit breaker's readings.
    pub(super) fn breaker(&self) -> crate::storage::Gauge {
        self.health.gauge()
    }

    /// Whether the server is up and has answered since it was added: only then does
    /// readiness take it as reachable without asking it.
    pub(super) fn known_up(&self) -> bool {
        self.is_up() && self.answered.load(Ordering::Acquire)
    }

    pub(super) fn record_success(&self) {
        self.answered.store(true, Ordering::Release);
        self.health.record_success();
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
            self.record_failure("no answer to a probe after a late answer");
        }
        self.probing.store(false, Ordering::Release);
    }

    /// Records evidence that the server is unreachable (`what`: in its words).
    pub(super) fn record_failure(&self, what: &str) {
        self.health.record_failure(what);
    }
}
