//! The one way tests wait for something: poll a condition until it holds, and fail after a
//! limit saying what was awaited. Blocking for tests on plain threads, async for the rest; an
//! async probe may hand back what it found. Never a fixed sleep as synchronisation.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(20);

/// Blocks until `done()` holds; fails after `limit` with `what`.
pub fn blocking(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    blocking_some(limit, what, || done().then_some(()));
}

/// Blocks until `probe()` finds something, and returns it; fails after `limit` with `what`.
pub fn blocking_some<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} (waited {limit:?})");
        std::thread::sleep(POLL);
    }
}

/// Waits until `done()` holds; fails after `limit` with `what`.
pub async fn until(limit: Duration, what: &str, done: impl FnMut() -> bool) {
    until_polling_every(POLL, limit, what, done).await;
}

/// [`until`], polling every `poll` (for a probe whose own work, such as a scrape's connection
/// task, must have ended before the next one looks).
pub async fn until_polling_every(
    poll: Duration,
    limit: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) {
    let probe = || std::future::ready(done().then_some(()));
    polling(poll, limit, || what.to_owned(), probe).await;
}

/// Waits until the async `probe()` finds something, and returns it; fails after `limit` with
/// `what`.
pub async fn until_some<T, F, Fut>(limit: Duration, what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until_some_said(limit, || what.to_owned(), probe).await
}

/// [`until_some`], saying what was awaited with `what()` when it fails (the state seen then).
pub async fn until_some_said<T, F, Fut>(limit: Duration, what: impl Fn() -> String, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    polling(POLL, limit, what, probe).await
}

/// Polls the async `probe()` every `poll` until it finds something; fails after `limit`.
async fn polling<T, F, Fut>(
    poll: Duration,
    limit: Duration,
    what: impl Fn() -> String,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{} (waited {limit:?})", what());
        tokio::time::sleep(poll).await;
    }
}

/// Seconds left in the current wall-clock window of `unit` seconds (fixed windows start at
/// multiples of their unit since the Unix epoch, as the stores count them).
pub fn left_in_window(unit: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock");
    unit - now.as_secs() % unit
}

/// Waits until at least `needed` seconds are left in the current window of `unit` seconds, so
/// that a scenario counting in fixed windows never sees one end inside it. The condition
/// waited for is the clock itself.
pub async fn window_left(unit: u64, needed: u64) {
    let what = format!("{needed} s left in the {unit} s window");
    until(Duration::from_secs(needed + 1), &what, || {
        left_in_window(unit) >= needed
    })
    .await;
}
