//! The suite on the in-process store, plus its expiry and sweeping.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock};
use turnstile::storage::memory::MemoryStore;
use turnstile::storage::{Change, CounterStore, ErrorKind};

use super::{Fixture, hit, one};
use crate::support::unique;

async fn fixture() -> Option<Fixture<Arc<MemoryStore>>> {
    let clock = ManualClock::new(crate::support::T0);
    let store = Arc::new(MemoryStore::new(100_000, Arc::new(clock.clone())));
    Some(Fixture {
        stores: vec![store],
        clock,
        leases: true,
        _server: Box::new(()),
    })
}

contract_cases!(memory, super::fixture);

#[tokio::test]
async fn memory_store_expiry_and_sweeping() {
    let clock = ManualClock::new(crate::support::T0);
    let store = Arc::new(MemoryStore::new(100_000, Arc::new(clock.clone())));
    // Expiry: a counter is gone once its window has ended, and the sweeper drops it.
    let key = unique("exp");
    let end = clock.now_secs() + 2;
    assert_eq!(one(&*store, &key, Change::Add(1), end).await, 1, "hit");
    clock.advance(2);
    let live = store.len();
    assert_eq!(store.sweep(), 1, "only the ended window is dropped");
    assert_eq!(store.len(), live - 1);
    assert_eq!(one(&*store, &key, Change::READ, end).await, 0, "read");
    // A lease lives as long after its last change; a read does not move it.
    let key = unique("lease-exp");
    let at = |secs: u64| clock.now_secs() + secs;
    store
        .apply_ops(&[hit(&key, Change::Lease(1), at(2))])
        .await
        .expect("lease");
    clock.advance(1);
    store
        .apply_ops(&[hit(&key, Change::Lease(1), at(2))])
        .await
        .expect("lease");
    store
        .apply_ops(&[hit(&key, Change::Lease(0), at(60))])
        .await
        .expect("read");
    clock.advance(1);
    assert_eq!(one(&*store, &key, Change::Lease(0), at(2)).await, 2, "read");
    clock.advance(1);
    assert_eq!(
        one(&*store, &key, Change::Lease(0), at(2)).await,
        0,
        "expired 2 s after the last lease"
    );
}

/// A full store refuses new counters without touching live ones, takes them again as soon as
/// windows end (expired counters make room, live ones never do), and a lease whose expiry moved
/// later is kept past its first expiry.
#[tokio::test]
async fn a_full_memory_store_makes_room_only_from_expired_counters() {
    let clock = ManualClock::new(crate::support::T0);
    // 64 shards of one counter each.
    let store = MemoryStore::new(64, Arc::new(clock.clone()));
    let now = clock.now_secs();
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..1_000 {
        let key = unique(&format!("full{i}"));
        match store
            .apply_ops(&[hit(&key, Change::Add(1), now + 10)])
            .await
        {
            Ok(_) => held.push(key),
            Err(e) if e.kind() == ErrorKind::Full => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(held.len(), 64, "one counter per shard");
    assert_eq!(refused, 1_000 - 64);
    for key in &held {
        assert_eq!(
            one(&store, key, Change::Add(1), now + 10).await,
            2,
            "a refused insert dropped no live counter"
        );
    }
    // One lease whose expiry moves later; the other counters' windows end.
    let lease = held[0].clone();
    clock.advance(5);
    store
        .apply_ops(&[hit(&lease, Change::Lease(1), clock.now_secs() + 100)])
        .await
        .expect("lease moved");
    clock.advance(6);
    let mut taken = 0;
    for i in 0..1_000 {
        let key = unique(&format!("again{i}"));
        if store
            .apply_ops(&[hit(&key, Change::Add(1), clock.now_secs() + 10)])
            .await
            .is_ok()
        {
            taken += 1;
        }
    }
    assert_eq!(taken, 63, "every shard but the lease's made room");
    assert_eq!(
        one(&store, &lease, Change::Lease(0), clock.now_secs() + 100).await,
        3,
        "the lease (2 hits, then a lease of 1) outlived its first expiry"
    );
    clock.advance(11);
    assert_eq!(
        store.sweep(),
        63,
        "the sweeper drops exactly the expired counters"
    );
}
