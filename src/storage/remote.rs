//! What every remote counter store (memcached, Redis) does alike, written once so that each
//! backend module does only its protocol: the backoff of a store that failed (one caller let
//! through per period, 50 ms doubling to 1 s, each wait spread by up to a quarter either way so
//! that replicas that lost a store together do not retry it in step), the spread of counter lifetimes
//! (`EXPIRATION_JITTER_MAX_SECONDS`), the order operations on keys run in (distinct keys at
//! once, a repeated key in order), and what a passed deadline means (the store's lateness, or
//! Turnstile's own overload when its runtime was too busy to read the answer).
//!
//! Must not touch: connections, commands, scripts, keys' bytes, what an answer means.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;

use super::StorageError;
use super::lateness::{SchedulingDelay, saturated_runtime};
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

    fn now_ms(&self) -> u64 {
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

/// Extra seconds of life for the counter `key` (`EXPIRATION_JITTER_MAX_SECONDS`), below
/// `max`: spread by the key's hash so that counters of one window do not all expire at once,
/// and the same for every replica.
pub(crate) fn jitter_seconds(key: &str, max: u64) -> u64 {
    match max {
        0 => 0,
        max => xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % max,
    }
}

/// Runs `call` for every item and returns the answers in the items' order: all at once when no
/// key comes twice, otherwise one after another, so that each answer to a repeated key is the
/// state after exactly the operations before it.
pub(crate) async fn in_key_order<'a, I, T, E, F, Fut>(
    items: &'a [I],
    key: impl Fn(&I) -> &str,
    call: F,
) -> Result<Vec<T>, E>
where
    F: Fn(&'a I) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let distinct = items
        .iter()
        .enumerate()
        .all(|(i, item)| items[..i].iter().all(|o| key(o) != key(item)));
    if distinct {
        return try_join_all(items.iter().map(call)).await;
    }
    let mut answers = Vec::with_capacity(items.len());
    for item in items {
        answers.push(call(item).await?);
    }
    Ok(answers)
}

/// What a call to `store` that started at `started` and passed its `deadline` means:
/// Turnstile's overload when the runtime was saturated (the answer may have waited unread),
/// the store's lateness otherwise.
pub(crate) fn late(
    store: &str,
    started: Instant,
    deadline: Duration,
    scheduling: &Arc<SchedulingDelay>,
) -> StorageError {
    match saturated_runtime(started, deadline, scheduling) {
        Some(late) => StorageError::overloaded(format!(
            "the answer of {store} was not read within {deadline:?}: Turnstile's runtime ran \
             {late:?} late"
        )),
        None => StorageError::timeout(format!("{store} did not answer within {deadline:?}")),
    }
}

/// The guard of a mutex whose holder panicked: the stores keep only plain numbers and queues
/// under their locks, which stay usable after a panic elsewhere.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

    #[test]
    fn jitter_is_below_its_bound_and_spread_by_key() {
        assert_eq!(jitter_seconds("k", 0), 0);
        assert!(jitter_seconds("k", 7) < 7);
        // Spread over the range by key: 200 keys take many different values, all in range.
        let spread: std::collections::BTreeSet<u64> = (0..200)
            .map(|i| jitter_seconds(&format!("key-{i}"), 300))
            .collect();
        assert!(spread.iter().all(|s| *s < 300), "{spread:?}");
        assert!(spread.len() > 100, "not spread: {} values", spread.len());
    }

    #[tokio::test]
    async fn repeated_keys_run_in_order_and_answers_keep_the_items_order() {
        let seen = Mutex::new(Vec::new());
        let items = ["a", "b", "a"];
        let answers: Result<Vec<usize>, ()> = in_key_order(
            &items,
            |k| k,
            |k| {
                let mut seen = lock(&seen);
                seen.push(*k);
                let n = seen.len();
                async move { Ok(n) }
            },
        )
        .await;
        assert_eq!(answers, Ok(vec![1, 2, 3]));
        assert_eq!(*lock(&seen), ["a", "b", "a"]);
    }
}
