//! One behaviour suite for every `CounterStore`: the memory store, memcached with meta
//! commands, and memcached with the classic `incr`/`add` fallback.

use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memory::MemoryStore;
use turnstile::storage::{CounterStore, Hit, MAX_KEY_LEN, Op};

use crate::support::{Memcached, memcached_store_with, unique};
use turnstile::storage::memcached::MemcachedTransport;

fn hit(key: &str, op: Op, expires_at: u64) -> Hit {
    Hit {
        key: key.to_owned(),
        op,
        expires_at,
    }
}

async fn contract<S: CounterStore + Clone>(store: S, clock: &ManualClock) {
    let now = clock.now();
    let end = now + 60;
    let (a, b) = (unique("a"), unique("b"));
    assert_eq!(
        store.hit(&[hit(&a, Op::Add(0), end)]).await.expect("read"),
        vec![0],
        "read of a missing counter"
    );
    assert_eq!(
        store
            .hit(&[hit(&a, Op::Sub(3), end)])
            .await
            .expect("refund"),
        vec![0],
        "refund of a missing counter"
    );
    assert_eq!(
        store.hit(&[hit(&a, Op::Add(0), end)]).await.expect("read"),
        vec![0],
        "neither created it"
    );
    let counts = store
        .hit(&[
            hit(&a, Op::Add(1), end),
            hit(&b, Op::Add(5), end),
            hit(&a, Op::Add(2), end),
        ])
        .await
        .expect("batch");
    assert_eq!(counts, vec![1, 5, 3], "counts after each hit, in order");
    assert_eq!(
        store
            .hit(&[hit(&a, Op::Sub(2), end)])
            .await
            .expect("refund"),
        vec![1]
    );
    assert_eq!(
        store
            .hit(&[hit(&a, Op::Sub(9), end)])
            .await
            .expect("refund"),
        vec![0],
        "floors at zero"
    );
    let longest = "k".repeat(MAX_KEY_LEN);
    assert_eq!(
        store
            .hit(&[hit(&longest, Op::Add(7), end)])
            .await
            .expect("long key"),
        vec![7]
    );

    // Atomic under concurrency: 64 callers × 25 hits see every count from 1 to 1600 exactly once.
    let key = unique("race");
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..25 {
                seen.extend(store.hit(&[hit(&key, Op::Add(1), end)]).await.expect("hit"));
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    all.sort_unstable();
    assert_eq!(all, (1..=1600).collect::<Vec<u64>>());
}

#[tokio::test]
async fn memory_store() {
    let clock = ManualClock::new(crate::support::T0);
    let store = Arc::new(MemoryStore::new(100_000, Arc::new(clock.clone())));
    contract(Arc::clone(&store), &clock).await;
    // Expiry: a counter is gone once its window has ended, and the sweeper drops it.
    let key = unique("exp");
    let end = clock.now() + 2;
    assert_eq!(
        store.hit(&[hit(&key, Op::Add(1), end)]).await.expect("hit"),
        vec![1]
    );
    clock.advance(2);
    let live = store.len();
    assert_eq!(store.sweep(), 1, "only the ended window is dropped");
    assert_eq!(store.len(), live - 1);
    assert_eq!(
        store
            .hit(&[hit(&key, Op::Add(0), end)])
            .await
            .expect("read"),
        vec![0]
    );
}

async fn memcached(transport: MemcachedTransport) {
    let Some(mc) = Memcached::start() else { return };
    let clock = ManualClock::new(SystemClock.now());
    let store = memcached_store_with(transport, &[&mc], &clock, Duration::from_millis(500));
    contract(store.clone(), &clock).await;
    // Expiry in real time: the TTL is the end of the window + 1 s (memcached may expire up to a
    // second early, never later than asked).
    let key = unique("exp");
    let end = clock.now() + 1;
    assert_eq!(
        store.hit(&[hit(&key, Op::Add(1), end)]).await.expect("hit"),
        vec![1]
    );
    // memcached's own clock decides: poll until the counter is gone, at the latest 1 s after
    // the TTL (window end + 1 s) plus memcached's 1 s clock granularity.
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    loop {
        let read = store
            .hit(&[hit(&key, Op::Add(0), end)])
            .await
            .expect("read");
        if read == vec![0] {
            break;
        }
        assert_eq!(read, vec![1], "unexpired, the counter still holds its hit");
        assert!(
            std::time::Instant::now() < deadline,
            "the counter did not expire"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn memcached_pipelined_meta_store() {
    memcached(MemcachedTransport::Pipelined).await;
}

#[tokio::test]
async fn memcached_pooled_meta_store() {
    memcached(MemcachedTransport::Pool).await;
}

#[tokio::test]
async fn memcached_classic_store() {
    memcached(MemcachedTransport::Classic).await;
}
