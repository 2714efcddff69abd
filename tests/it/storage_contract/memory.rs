//! The suite on the in-process store, plus its expiry and sweeping.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock};
use turnstile::storage::memory::MemoryStore;
use turnstile::storage::{CounterStore, Op};

use super::{buckets, contract, hit, leases};
use crate::support::unique;

#[tokio::test]
async fn memory_store() {
    let clock = ManualClock::new(crate::support::T0);
    let store = Arc::new(MemoryStore::new(100_000, Arc::new(clock.clone())));
    contract(Arc::clone(&store), &clock).await;
    leases(&store, &clock).await;
    buckets(&[Arc::clone(&store)], &clock).await;
    super::edges::saturation(&store, &clock, true).await;
    super::edges::past_2038(&store, &clock, true).await;
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
    // A lease lives as long after its last change; a read does not move it.
    let key = unique("lease-exp");
    let at = |secs: u64| clock.now() + secs;
    store
        .hit(&[hit(&key, Op::Lease(1), at(2))])
        .await
        .expect("lease");
    clock.advance(1);
    store
        .hit(&[hit(&key, Op::Lease(1), at(2))])
        .await
        .expect("lease");
    store
        .hit(&[hit(&key, Op::Lease(0), at(60))])
        .await
        .expect("read");
    clock.advance(1);
    assert_eq!(
        store
            .hit(&[hit(&key, Op::Lease(0), at(2))])
            .await
            .expect("read"),
        vec![2]
    );
    clock.advance(1);
    assert_eq!(
        store
            .hit(&[hit(&key, Op::Lease(0), at(2))])
            .await
            .expect("read"),
        vec![0],
        "expired 2 s after the last lease"
    );
}
