//! The circuit breaker of one store server, shared by every remote backend: each memcached
//! server of the ring, the Redis server (or cluster, or Sentinel's master), PostgreSQL.
//!
//! Closed, every call goes out and its outcome is counted. It opens on `threshold` failures in
//! a row, or when at least half of the calls within one second failed (ten calls or more): a
//! failure is the server unreachable or late (`Unavailable`, `Timeout`); an answer of any kind
//! is a success, and Turnstile's own overload is neither. Open, calls fail at once (the
//! limiter then decides them by the failure mode) and one probe per backoff period (50 ms
//! doubling to 1 s, spread; `backoff`) asks the server again: a success closes it. Every time
//! it reads (the ratio's period, how long it has been open, the backoff) is on one clock,
//! tokio's, so a test on a paused runtime moves all of it.
//! [`Guarded`] puts a whole store behind one breaker (PostgreSQL) and probes with the store's
//! readiness check off the request path, so that no request waits for a server that is frozen;
//! memcached keeps a breaker per server of its ring, Redis one per server or cluster node.
//!
//! One log line when a breaker opens and one when it closes; its state, opens and probes are
//! readings ([`Gauge::Breaker`]).
//!
//! Must not touch: connections, commands, what an answer means, failure modes (the limiter's).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::remote::lock;
use super::{CounterOp, CounterStore, ErrorKind, Gauge, StorageError, TokenAnswer, TokenStep};

mod backoff;

pub(crate) use backoff::Backoff;

/// The period over which the failure ratio is taken, in milliseconds.
const RATIO_PERIOD_MS: u64 = 1_000;
/// The fewest calls in a period for its failure ratio to open the breaker.
const RATIO_MIN_CALLS: u32 = 10;

/// What a caller may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Closed: call.
    Call,
    /// Open, and this caller is the period's probe.
    Probe,
    /// Open: fail at once.
    Refuse,
}

/// One server's circuit breaker.
#[derive(Debug)]
pub struct Breaker {
    server: String,
    threshold: u32,
    backoff: Backoff,
    in_a_row: AtomicU32,
    /// Milliseconds on the backoff's clock at which the current ratio period began.
    period_start: AtomicU64,
    period_calls: AtomicU32,
    period_failures: AtomicU32,
    opens: AtomicU64,
    probes: AtomicU64,
    /// Milliseconds on the backoff's clock at which it opened (while open).
    opened_at: AtomicU64,
    last_error: Mutex<String>,
}

impl Breaker {
    /// The breaker of `server`, opened by `threshold` failures in a row (at least 1) or by
    /// the failure ratio.
    pub fn new(server: impl Into<String>, threshold: u32) -> Breaker {
        Breaker {
            server: server.into(),
            threshold: threshold.max(1),
            backoff: Backoff::default(),
            in_a_row: AtomicU32::new(0),
            period_start: AtomicU64::new(0),
            period_calls: AtomicU32::new(0),
            period_failures: AtomicU32::new(0),
            opens: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            last_error: Mutex::new(String::new()),
        }
    }

    /// Whether it is open (calls fail at once but for the probes).
    pub fn is_open(&self) -> bool {
        !self.backoff.is_up()
    }

    /// What a caller may do now.
    pub(crate) fn admit(&self) -> Admit {
        if self.backoff.is_up() {
            Admit::Call
        } else if self.backoff.admit() {
            self.probes.fetch_add(1, Ordering::Relaxed);
            Admit::Probe
        } else {
            Admit::Refuse
        }
    }

    /// Counts a call's outcome: a failure when the server was unreachable or late, nothing
    /// for Turnstile's own overload, a success otherwise.
    pub(crate) fn record<T>(&self, outcome: &Result<T, StorageError>) {
        match outcome {
            Ok(_) => self.record_success(),
            Err(e) if matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) => {
                self.record_failure(e.what());
            }
            Err(e) if e.kind() == ErrorKind::Overloaded => {}
            Err(_) => self.record_success(),
        }
    }

    /// A call was answered; closes the breaker when it was open (its probe succeeded).
    pub fn record_success(&self) {
        self.count_call(false);
        if self.in_a_row.load(Ordering::Relaxed) != 0 {
            self.in_a_row.store(0, Ordering::Relaxed);
        }
        if self.backoff.record_success() {
            let open_ms = self
                .now_ms()
                .saturating_sub(self.opened_at.load(Ordering::Acquire));
            tracing::warn!(
                server = %self.server, open_ms,
                "store server answers again; its circuit breaker closed"
            );
        }
    }

    /// A call found the server unreachable or late (`what`: in the store's words); opens the
    /// breaker at its threshold or ratio, and keeps an open one open longer (a failed probe).
    pub fn record_failure(&self, what: &str) {
        let in_a_row = self.in_a_row.fetch_add(1, Ordering::AcqRel) + 1;
        let (calls, failures) = self.count_call(true);
        *lock(&self.last_error) = what.to_owned();
        if self.is_open() {
            self.backoff.record_failure();
            return;
        }
        let ratio = calls >= RATIO_MIN_CALLS && failures * 2 >= calls;
        if in_a_row >= self.threshold || ratio {
            self.backoff.record_failure();
            self.opens.fetch_add(1, Ordering::Relaxed);
            self.opened_at.store(self.now_ms(), Ordering::Release);
            tracing::error!(
                server = %self.server, failures_in_a_row = in_a_row, error = what,
                "store server unreachable; its circuit breaker opened (calls fail at once, \
                 probes retry it)"
            );
        }
    }

    /// Counts one call in the current ratio period (a new period after one second); the
    /// period's calls and failures so far.
    fn count_call(&self, failed: bool) -> (u32, u32) {
        let now = self.now_ms();
        let start = self.period_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) >= RATIO_PERIOD_MS
            && self
                .period_start
                .compare_exchange(start, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.period_calls.store(0, Ordering::Relaxed);
            self.period_failures.store(0, Ordering::Relaxed);
        }
        let calls = self.period_calls.fetch_add(1, Ordering::Relaxed) + 1;
        let failures = match failed {
            true => self.period_failures.fetch_add(1, Ordering::Relaxed) + 1,
            false => self.period_failures.load(Ordering::Relaxed),
        };
        (calls, failures)
    }

    /// The error of a call refused while open: the server, for how long, and what it said.
    pub(crate) fn refusal(&self) -> StorageError {
        let open_ms = self
            .now_ms()
            .saturating_sub(self.opened_at.load(Ordering::Acquire));
        StorageError::unavailable(format!(
            "{}: circuit breaker open for {open_ms} ms (last: {}); a probe retries it",
            self.server,
            lock(&self.last_error)
        ))
        .unsent()
    }

    /// Its readings.
    pub fn gauge(&self) -> Gauge {
        Gauge::Breaker {
            server: self.server.clone(),
            open: self.is_open(),
            opens: self.opens.load(Ordering::Relaxed),
            probes: self.probes.load(Ordering::Relaxed),
        }
    }

    /// The one clock of failure handling (the backoff's: tokio's).
    fn now_ms(&self) -> u64 {
        self.backoff.now_ms()
    }
}

/// A whole store behind one breaker (PostgreSQL): while it is open, calls fail at once
/// and the period's probe is the store's readiness check, run off the request path.
#[derive(Debug, Clone)]
pub struct Guarded<S> {
    store: S,
    breaker: Arc<Breaker>,
}

/// Failures in a row that open a guarded store's breaker.
const GUARDED_THRESHOLD: u32 = 3;

impl<S: CounterStore + Clone> Guarded<S> {
    /// `store`, known as `server`, behind its breaker.
    pub fn new(store: S, server: impl Into<String>) -> Guarded<S> {
        Guarded {
            store,
            breaker: Arc::new(Breaker::new(server, GUARDED_THRESHOLD)),
        }
    }

    /// The store behind the breaker.
    pub fn inner(&self) -> &S {
        &self.store
    }

    /// Its breaker.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether a call may go out now, or the error of one refused at once (the period's
    /// probe then starts). Checked before the call rather than wrapping it: a call's future
    /// passed through would be moved whole.
    fn admit(&self) -> Result<(), StorageError> {
        match self.breaker.admit() {
            Admit::Call => Ok(()),
            Admit::Probe => {
                self.probe();
                Err(self.breaker.refusal())
            }
            Admit::Refuse => Err(self.breaker.refusal()),
        }
    }

    /// Asks the store's readiness check on the side; its answer closes the breaker or keeps
    /// it open.
    fn probe(&self) {
        let (store, breaker) = (self.store.clone(), self.breaker.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let outcome = store.ready().await;
                breaker.record(&outcome);
            });
        }
    }
}

impl<S: CounterStore + Clone> CounterStore for Guarded<S> {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        self.admit()?;
        let outcome = self.store.apply_ops(hits).await;
        self.breaker.record(&outcome);
        outcome
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        self.admit()?;
        let outcome = self.store.take_tokens(steps).await;
        self.breaker.record(&outcome);
        outcome
    }

    async fn ready(&self) -> Result<(), StorageError> {
        let outcome = self.store.ready().await;
        self.breaker.record(&outcome);
        outcome
    }

    fn gauges(&self) -> Vec<Gauge> {
        let mut gauges = self.store.gauges();
        gauges.push(self.breaker.gauge());
        gauges
    }

    fn durable(&self) -> bool {
        self.store.durable()
    }
}

#[cfg(test)]
mod tests;
