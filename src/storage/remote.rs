//! What every remote counter store (memcached, Redis) does alike, written once so that each
//! backend module does only its protocol: the spread of counter lifetimes
//! (`EXPIRATION_JITTER_MAX_SECONDS`), the order operations on keys run in (distinct keys at
//! once, a repeated key in order), and what a passed deadline means (the store's lateness, or
//! Turnstile's own overload when its runtime was too busy to read the answer).
//!
//! Must not touch: connections, commands, scripts, keys' bytes, what an answer means.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::try_join_all;

use super::StorageError;
use super::lateness::{SchedulingDelay, saturated_runtime};

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
