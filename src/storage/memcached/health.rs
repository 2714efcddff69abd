//! One memcached server: its transport and its health. Only evidence about the server marks it
//! down: a connection that cannot be made or breaks, or a failed probe. A late answer to
//! commands that were written is not such evidence by itself (Turnstile may have been too busy
//! to read it), so it starts one probe on the side, and the probe's failure marks the server
//! down. A down server is retried with an exponential backoff (50 ms doubling to 1 s); while it
//! is down, its operations fail at once instead of each waiting for a deadline, and one
//! operation per backoff period is let through. A success clears the failure count.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use super::transport::Transport;

const BACKOFF_START_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 1_000;

/// A server, the transport that reaches it, and its health.
#[derive(Debug)]
pub(super) struct Server {
    pub(super) name: String,
    pub(super) transport: Box<dyn Transport>,
    failures: AtomicU32,
    /// The server has answered at least once (until then readiness asks it).
    answered: AtomicBool,
    /// A probe after a late answer is under way.
    probing: AtomicBool,
    /// Milliseconds since `epoch` until which the server counts as down.
    down_until_ms: AtomicU64,
    epoch: Instant,
}

impl Server {
    /// A server reached through `transport`, healthy until it fails.
    pub(super) fn new(name: String, transport: Box<dyn Transport>) -> Server {
        Server {
            name,
            transport,
            failures: AtomicU32::new(0),
            answered: AtomicBool::new(false),
            probing: AtomicBool::new(false),
            down_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether an operation may go to this server now. While down, only the caller that claims
    /// the next probe slot is let through.
    pub(super) fn admit(&self) -> bool {
        if self.failures.load(Ordering::Acquire) == 0 {
            return true;
        }
        let now = self.now_ms();
        let until = self.down_until_ms.load(Ordering::Acquire);
        now >= until
            && self
                .down_until_ms
                .compare_exchange(
                    until,
                    now + self.backoff_ms(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Whether the server is currently considered reachable.
    pub(super) fn is_up(&self) -> bool {
        self.failures.load(Ordering::Acquire) == 0
    }

    fn backoff_ms(&self) -> u64 {
        let failures = self.failures.load(Ordering::Acquire).min(16);
        (BACKOFF_START_MS << failures.saturating_sub(1)).min(BACKOFF_MAX_MS)
    }

    /// Whether the server is up and has answered since it was added: only then does
    /// readiness take it as reachable without asking it.
    pub(super) fn known_up(&self) -> bool {
        self.is_up() && self.answered.load(Ordering::Acquire)
    }

    pub(super) fn record_success(&self) {
        self.answered.store(true, Ordering::Release);
        if self.failures.swap(0, Ordering::AcqRel) != 0 {
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
        if self.failures.fetch_add(1, Ordering::AcqRel) == 0 {
            tracing::error!(server = %self.name, "memcached server unreachable; retrying with backoff");
        }
        let until = self.now_ms() + self.backoff_ms();
        self.down_until_ms.store(until, Ordering::Release);
    }
}
