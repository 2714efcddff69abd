//! One memcached server: its transport, its health, and the deadline every call to it is held
//! to.
//!
//! Only evidence about the server marks it down: a connection that cannot be made or breaks,
//! or a failed probe. A late answer to commands that were written is not such evidence by
//! itself (Turnstile may have been too busy to read it), so it starts one probe on the side,
//! and the probe's failure marks the server down. Time spent before the write is Turnstile's
//! own overload, never a dead server: a call never written, or written with less than half its
//! deadline left, is not the server's lateness. The server's circuit breaker
//! (`storage::breaker`) opens on the first such evidence: while it is open, its operations fail
//! at once instead of each waiting for a deadline, and one operation per backoff period (50 ms
//! doubling to 1 s, ±25 %) is let through as its probe. A success closes it.
//!
//! Must not touch: what the commands are (counters, token-bucket states), the ring.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::FutureExt;
use futures_util::future::Either;

use super::PROBE_DEADLINE;
use super::kind::ServerTransport;
use super::transport::{Sent, Transport, TransportError};
use crate::storage::ErrorKind;
use crate::storage::StorageError;
use crate::storage::breaker::{Admit, Breaker};
use crate::storage::lateness::SchedulingDelay;
use crate::storage::remote::late;

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

/// What every call to a server is held to: the operation's deadline (`MEMCACHE_TIMEOUT`) and
/// the runtime's scheduling delay (to tell Turnstile's overload from a late server).
#[derive(Debug)]
pub(super) struct Deadline {
    pub(super) timeout: Duration,
    pub(super) scheduling: Arc<SchedulingDelay>,
}

impl Server {
    /// Runs `call` (which sets `sent` once its commands are written) under the operation
    /// deadline and this server's health tracking: a server in backoff is not asked; time
    /// spent before the write is Turnstile's overload; a late answer is checked by a probe
    /// before the server is called down; connection faults mark it down at once.
    ///
    /// Decided when called (admission, the deadline's start), to be awaited at once. A
    /// combinator rather than an `async fn`: an `async fn` keeps its argument `call` and the
    /// deadline that wraps it side by side, twice the transport's future in every call's.
    pub(super) fn guarded<'a, T: 'a>(
        self: &'a Arc<Self>,
        deadline: &'a Deadline,
        sent: &'a Sent,
        call: impl Future<Output = Result<T, TransportError>> + 'a,
    ) -> impl Future<Output = Result<T, StorageError>> + 'a {
        if let Err(down) = self.admitted() {
            return Either::Left(std::future::ready(Err(down)));
        }
        // One clock read serves both the deadline and the lateness measure.
        let started = Instant::now();
        let timed = tokio::time::timeout_at(started + deadline.timeout, call);
        Either::Right(timed.map(move |outcome| match outcome {
            // A connection fault before the commands were written sent nothing.
            Ok(answer) => self.judge(answer).map_err(|e| match sent.at() {
                None if e.kind() == ErrorKind::Unavailable => e.unsent(),
                _ => e,
            }),
            Err(_) => Err(self.too_late(deadline, sent.at(), started)),
        }))
    }

    /// Whether an operation may go to this server now: an error while it is in backoff (and
    /// this caller is not the one let through).
    pub(super) fn admitted(&self) -> Result<(), StorageError> {
        if self.admit() {
            Ok(())
        } else {
            Err(StorageError::unavailable(format!(
                "memcached {} is down (retrying with backoff)",
                self.name
            ))
            .unsent())
        }
    }

    /// What a server's answer in time says about it.
    pub(super) fn judge<T>(&self, answer: Result<T, TransportError>) -> Result<T, StorageError> {
        let error = match answer {
            Ok(answer) => {
                self.record_success();
                return Ok(answer);
            }
            Err(error) => error,
        };
        if let TransportError::Overloaded(why) = error {
            return Err(StorageError::overloaded(why));
        }
        if error.is_connection_fault() {
            self.record_failure(&error.to_string());
            self.transport.reset();
            Err(StorageError::unavailable(format!(
                "memcached {}: {error}",
                self.name
            )))
        } else {
            self.record_success();
            Err(StorageError::protocol(format!(
                "memcached {}: {error}",
                self.name
            )))
        }
    }

    /// The error for a call its deadline ended (its commands written at `sent_at`, if they
    /// were): Turnstile's own overload when the commands
    /// were never written, or written so late that the server had less than half the deadline
    /// to answer; otherwise late, with a probe on the side before the server is called down
    /// (Turnstile may have been too busy to read the answer).
    pub(super) fn too_late(
        self: &Arc<Self>,
        deadline: &Deadline,
        sent_at: Option<Instant>,
        started: Instant,
    ) -> StorageError {
        match lateness(started, sent_at, deadline.timeout) {
            Lateness::NeverSent => StorageError::overloaded(format!(
                "commands for memcached {} waited {:?} in Turnstile without being sent",
                self.name, deadline.timeout
            )),
            Lateness::SentLate(queued) => StorageError::overloaded(format!(
                "commands for memcached {} waited {queued:?} in Turnstile before they were \
                 written, of a {:?} deadline",
                self.name, deadline.timeout
            )),
            Lateness::Server(queued) => {
                self.probe_later();
                let store = format!(
                    "memcached {} (its commands written {queued:?} after the call began)",
                    self.name
                );
                late(&store, started, deadline.timeout, &deadline.scheduling)
            }
        }
    }

    /// Probes this server in the background (one probe at a time); a probe that fails within
    /// [`PROBE_DEADLINE`] marks it down.
    fn probe_later(self: &Arc<Self>) {
        if !self.start_probe() {
            return;
        }
        let server = Arc::clone(self);
        tokio::spawn(async move {
            let answered = matches!(
                tokio::time::timeout(PROBE_DEADLINE, server.transport.probe()).await,
                Ok(Ok(()))
            );
            if !answered {
                server.transport.reset();
            }
            server.probe_done(answered);
        });
    }
}

/// Whose time a call's deadline ran out in.
#[derive(Debug, PartialEq, Eq)]
enum Lateness {
    /// The commands were never written: all of it was Turnstile's.
    NeverSent,
    /// Written after waiting this long in Turnstile, half the deadline or more: the server had
    /// less than half of it to answer, too little to judge it by.
    SentLate(Duration),
    /// Written in time, after waiting this long in Turnstile: the server's lateness, unless
    /// Turnstile's runtime was too busy to read the answer (`late` decides).
    Server(Duration),
}

/// Whose time a call that `started` ran out in, given when its commands were written.
fn lateness(started: Instant, sent_at: Option<Instant>, timeout: Duration) -> Lateness {
    let Some(at) = sent_at else {
        return Lateness::NeverSent;
    };
    match at.saturating_duration_since(started) {
        queued if queued >= timeout / 2 => Lateness::SentLate(queued),
        queued => Lateness::Server(queued),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Lateness, lateness};

    #[test]
    fn the_server_is_judged_only_on_the_time_it_had() {
        let started = Instant::now();
        let timeout = Duration::from_millis(100);
        let after = |ms| Some(started + Duration::from_millis(ms));
        assert_eq!(lateness(started, None, timeout), Lateness::NeverSent);
        let server = |ms| Lateness::Server(Duration::from_millis(ms));
        assert_eq!(lateness(started, after(0), timeout), server(0));
        assert_eq!(lateness(started, after(49), timeout), server(49));
        assert_eq!(
            lateness(started, after(50), timeout),
            Lateness::SentLate(Duration::from_millis(50))
        );
        assert_eq!(
            lateness(started, after(95), timeout),
            Lateness::SentLate(Duration::from_millis(95))
        );
    }
}
