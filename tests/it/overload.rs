//! Hardening regressions (issue 12): Turnstile's own overload is never reported as a dead
//! memcached. A busy runtime that cannot send or read in time fails that call (as overloaded or
//! late), but the server stays up and the next call is answered; only evidence about the server
//! (a refused connection, a failed probe) marks it down.

use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::{CounterStore, Gauge, Hit, Op, StorageError};

use crate::support::{Memcached, memcached_store, unique};

fn hit(key: &str, now: u64) -> Hit {
    Hit {
        key: key.to_owned(),
        op: Op::Add(1),
        expires_at: now + 60,
    }
}

fn up(gauges: &[Gauge]) -> bool {
    matches!(
        gauges.first(),
        Some(Gauge::MemcachedServer { up: true, .. })
    )
}

/// One runtime thread, blocked by another task for five deadlines while a call waits: before
/// the fix the deadline counted Turnstile's own stall against memcached and marked it down, so
/// the next calls failed at once with "is down (retrying with backoff)".
#[tokio::test(flavor = "current_thread")]
async fn a_stalled_turnstile_does_not_mark_a_healthy_memcached_down() {
    let Some(mc) = Memcached::start() else { return };
    let clock = ManualClock::new(SystemClock.now());
    let store = memcached_store(&[&mc], &clock, Duration::from_millis(10));
    let key = unique("stall");
    let now = clock.now();
    assert_eq!(store.hit(&[hit(&key, now)]).await, Ok(vec![1]));

    // The stall: the only runtime thread is blocked for 50 ms right after the call queues.
    tokio::spawn(async { std::thread::sleep(Duration::from_millis(50)) });
    match store.hit(&[hit(&key, now)]).await {
        Err(StorageError::Overloaded(_) | StorageError::Timeout(_)) => {}
        other => {
            panic!("a 50 ms stall against a 10 ms deadline is overload or lateness, not {other:?}")
        }
    }
    assert!(
        up(&store.gauges()),
        "the server is not marked down by a stall"
    );
    // The stalled call's hit counts if it was sent (late) and not if it never left Turnstile;
    // from here on every call is answered and counts one more.
    let mut counts = Vec::new();
    for i in 0..5 {
        let count = store
            .hit(&[hit(&key, now)])
            .await
            .unwrap_or_else(|e| panic!("call {i} after the stall: {e}"));
        counts.push(count[0]);
    }
    assert!(counts[0] == 2 || counts[0] == 3, "{counts:?}");
    assert!(counts.windows(2).all(|w| w[1] == w[0] + 1), "{counts:?}");
    assert!(up(&store.gauges()));
}

/// Evidence about the server still counts: a killed memcached is reported unavailable and
/// marked down at once.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_connection_still_marks_memcached_down() {
    let Some(mut mc) = Memcached::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = memcached_store(&[&mc], &clock, Duration::from_millis(100));
    mc.kill();
    let err = store
        .hit(&[hit(&unique("dead"), clock.now())])
        .await
        .expect_err("memcached is gone");
    assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
    assert!(
        !up(&store.gauges()),
        "a refused connection marks the server down"
    );
}
