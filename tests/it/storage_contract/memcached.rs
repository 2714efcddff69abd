//! The suite on memcached: meta commands (pipelined and pooled) and the classic protocol.

use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memcached::{MemcachedStore, MemcachedTransport};
use turnstile::storage::{Change, CounterStore, ErrorKind, Take};

use super::{Fixture, hit, one, step};
use crate::support::{Memcached, memcached_store_with, unique};

/// Two stores on one memcached: two Turnstile processes racing on one counter or bucket.
async fn fixture(transport: MemcachedTransport) -> Option<Fixture<MemcachedStore>> {
    let mc = Memcached::start()?;
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = |clock: &ManualClock| {
        memcached_store_with(transport, &[&mc], clock, Duration::from_millis(500))
    };
    Some(Fixture {
        stores: vec![store(&clock), store(&clock)],
        leases: transport != MemcachedTransport::Classic,
        clock,
        _server: Box::new(mc),
    })
}

async fn pipelined() -> Option<Fixture<MemcachedStore>> {
    fixture(MemcachedTransport::Pipelined).await
}

async fn pooled() -> Option<Fixture<MemcachedStore>> {
    fixture(MemcachedTransport::Pool).await
}

async fn classic() -> Option<Fixture<MemcachedStore>> {
    fixture(MemcachedTransport::Classic).await
}

contract_cases!(pipelined, super::pipelined);
contract_cases!(pooled, super::pooled);
// No leases or token buckets on the classic protocol: `classic_store` checks they are refused.
contract_cases!(classic, super::classic, counts, race, saturation, past_2038);

/// What only memcached does: a lease's expiry moves (meta commands), leases and token buckets are
/// refused in words (classic), and counters expire in real time.
async fn memcached(transport: MemcachedTransport) {
    let Some(mc) = Memcached::start() else { return };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = memcached_store_with(transport, &[&mc], &clock, Duration::from_millis(500));
    if transport == MemcachedTransport::Classic {
        classic_refuses_what_it_cannot_do_atomically(&store, &clock).await;
    } else {
        lease_expiry_moves(&store, &clock).await;
    }
    // Expiry in real time: the TTL is the end of the window + 1 s (memcached may expire up to a
    // second early, never later than asked).
    let key = unique("exp");
    let end = clock.now_secs() + 1;
    assert_eq!(one(&store, &key, Change::Add(1), end).await, 1, "hit");
    // memcached's own clock decides: poll until the counter is gone, at the latest 1 s after
    // the TTL (window end + 1 s) plus memcached's 1 s clock granularity.
    crate::support::wait::until_some(Duration::from_secs(4), "the counter expired", || async {
        let read = store
            .apply_ops(&[hit(&key, Change::READ, end)])
            .await
            .expect("read");
        if read != vec![0] {
            assert_eq!(read, vec![1], "unexpired, the counter still holds its hit");
        }
        (read == vec![0]).then_some(())
    })
    .await;
}

/// The classic protocol (memcached < 1.6) has no TTL update or compare-and-swap here: leases
/// and token buckets get a clear error, never a wrong count.
async fn classic_refuses_what_it_cannot_do_atomically<S: CounterStore>(
    store: &S,
    clock: &ManualClock,
) {
    let key = unique("classic");
    let err = store
        .apply_ops(&[hit(&key, Change::Lease(1), clock.now_secs() + 60)])
        .await
        .expect_err("lease");
    assert!(
        err.kind() == ErrorKind::Protocol && err.what().contains("meta commands"),
        "{err}"
    );
    let now = u128::from(clock.now().millis());
    let err = store
        .take_tokens(&[step(&key, now, Take::Take(1))])
        .await
        .expect_err("bucket");
    assert!(
        err.kind() == ErrorKind::Protocol && err.what().contains("meta commands"),
        "{err}"
    );
}

/// On memcached a lease's TTL moves with every change: a lease first set to live 2 s and then
/// renewed for an hour outlives a control counter that was given the same 2 s.
async fn lease_expiry_moves<S: CounterStore>(store: &S, clock: &ManualClock) {
    let (key, control) = (unique("lease-ttl"), unique("control"));
    let soon = clock.now_secs() + 1;
    store
        .apply_ops(&[
            hit(&key, Change::Lease(1), soon),
            hit(&control, Change::Lease(1), soon),
        ])
        .await
        .expect("leases");
    store
        .apply_ops(&[hit(&key, Change::Lease(1), clock.now_secs() + 3_600)])
        .await
        .expect("renew");
    // memcached's own clock decides: poll the control counter until it is gone.
    crate::support::wait::until_some(
        Duration::from_secs(5),
        "the control lease expired",
        || async {
            let read = store
                .apply_ops(&[hit(&control, Change::Lease(0), soon)])
                .await
                .expect("read");
            (read == vec![0]).then_some(())
        },
    )
    .await;
    assert_eq!(one(store, &key, Change::Lease(0), soon).await, 2, "read");
}

#[tokio::test]
async fn memcached_pipelined_lease_expiry_and_real_time_expiry() {
    memcached(MemcachedTransport::Pipelined).await;
}

#[tokio::test]
async fn memcached_pooled_lease_expiry_and_real_time_expiry() {
    memcached(MemcachedTransport::Pool).await;
}

#[tokio::test]
async fn memcached_classic_refusals_and_real_time_expiry() {
    memcached(MemcachedTransport::Classic).await;
}
