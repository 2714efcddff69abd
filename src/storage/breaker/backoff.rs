//! The backoff of a server that failed: while it is down, callers are refused at once instead
//! of each waiting for a deadline, and one caller per period is let through to try again (50 ms
//! doubling to 1 s, `backoff::Schedule`, each wait spread by up to a quarter either way so that
//! replicas that lost a server together do not retry it in step). Its clock is the one clock of
//! failure handling: tokio's, so that a test on a paused runtime moves the backoff, the
//! breaker's failure ratio and the lateness of answers together. The breaker (`super`) is built
//! on it; so is a connector's gate on connection attempts (`redis::connect`).
//!
//! Must not touch: what a failure is (the breaker decides), connections.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::backoff::{Schedule, spread};
use crate::clock::millis_of;

/// The waits of a store that failed: 50 ms after the first failure, doubling with each further
/// one, at most 1 s; each spread by up to a quarter either way.
const SCHEDULE: Schedule = Schedule::new(Duration::from_millis(50), Duration::from_secs(1), 2.0);
const SPREAD: f64 = 0.25;

/// The health of one remote server (or one connection target): up until it fails; while down,
/// callers are refused at once instead of each waiting for a deadline, and one caller per
/// backoff period is let through to try again. Lock-free: read on every call. Its clock is
/// tokio's, so a test on a paused runtime moves it.
#[derive(Debug)]
pub(crate) struct Backoff {
    failures: AtomicU32,
    /// Time since `epoch` until which the server counts as down, in milliseconds.
    down_until_ms: AtomicU64,
    epoch: tokio::time::Instant,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            failures: AtomicU32::new(0),
            down_until_ms: AtomicU64::new(0),
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Backoff {
    /// Whether no failure is recorded since the last success.
    pub(crate) fn is_up(&self) -> bool {
        self.failures.load(Ordering::Acquire) == 0
    }

    /// Whether a call may go out now: always while up; while down, only for the one caller
    /// that claims the next attempt once the wait has passed.
    pub(crate) fn admit(&self) -> bool {
        if self.is_up() {
            return true;
        }
        let now = self.now_ms();
        let until = self.down_until_ms.load(Ordering::Acquire);
        now >= until
            && self
                .down_until_ms
                .compare_exchange(
                    until,
                    now + millis_of(self.wait()),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Records a failure; `true` for the first one (the server just went down).
    pub(crate) fn record_failure(&self) -> bool {
        let first = self.failures.fetch_add(1, Ordering::AcqRel) == 0;
        let until = self.now_ms() + millis_of(self.wait());
        self.down_until_ms.store(until, Ordering::Release);
        first
    }

    /// Records a success; `true` when it ends a run of failures (the server is back).
    pub(crate) fn record_success(&self) -> bool {
        self.failures.swap(0, Ordering::AcqRel) != 0
    }

    /// Milliseconds on the failure-handling clock since this backoff was made.
    pub(crate) fn now_ms(&self) -> u64 {
        millis_of(self.epoch.elapsed())
    }

    /// The wait after the current run of failures: [`Backoff::base`], spread.
    fn wait(&self) -> Duration {
        spread(self.base(), SPREAD)
    }

    /// The wait before spreading.
    fn base(&self) -> Duration {
        SCHEDULE.after(self.failures.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_50ms_to_1s_and_ends_with_a_success() {
        let b = Backoff::default();
        assert!(b.is_up() && b.admit());
        assert!(
            b.record_failure(),
            "the first failure takes the server down"
        );
        assert_eq!(b.base(), Duration::from_millis(50));
        assert!(!b.record_failure());
        assert_eq!(b.base(), Duration::from_millis(100));
        for _ in 0..10 {
            b.record_failure();
        }
        assert_eq!(b.base(), Duration::from_secs(1));
        assert!(b.record_success(), "a success ends the run");
        assert!(b.is_up() && b.admit());
        assert!(!b.record_success());
    }

    /// On a paused clock: refused until the spread wait has passed (37.5 to 62.5 ms),
    /// then exactly one caller is let through, and the next waits a new period.
    #[tokio::test(start_paused = true)]
    async fn one_caller_is_let_through_once_the_wait_has_passed() {
        let b = Backoff::default();
        b.record_failure();
        assert!(!b.admit(), "refused at once while the wait runs");
        tokio::time::advance(Duration::from_millis(36)).await;
        assert!(!b.admit(), "still refused below the shortest spread wait");
        tokio::time::advance(Duration::from_millis(27)).await;
        assert!(b.admit(), "past the longest spread wait, one caller goes");
        assert!(!b.admit(), "and only one");
        tokio::time::advance(Duration::from_millis(63)).await;
        assert!(b.admit(), "the next period lets the next one through");
    }
}
