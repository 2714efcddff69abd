//! The edges of the contract, on every store: amounts a client can send up to 2^64 - 1 never
//! wrap a count (it saturates at `COUNT_CEILING`), and a counter whose window ends after
//! 2038-01-19 (memcached's last absolute expiry) still counts.

use turnstile::clock::{Clock, ManualClock};
use turnstile::storage::{COUNT_CEILING, Change, CounterStore, MAX_DELTA};

use super::hit;
use crate::support::unique;

/// Counts saturate at the ceiling and never wrap, whatever the amounts (leases too, where the
/// store has them).
pub(super) async fn saturation<S: CounterStore>(store: &S, clock: &ManualClock, leases: bool) {
    let end = clock.now_secs() + 3600;
    let key = unique("sat");
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::Add(11), end)])
            .await
            .expect("hit"),
        vec![11]
    );
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::Add(u64::MAX - 10), end)])
            .await
            .expect("a huge hit"),
        vec![11 + MAX_DELTA],
        "an amount counts as at most MAX_DELTA"
    );
    // Enough of the largest amounts, in batches, to pass the ceiling twice over.
    let batches = 2 * COUNT_CEILING / MAX_DELTA / 512;
    let mut last = 0;
    for _ in 0..batches {
        let counts = store
            .apply_ops(&vec![hit(&key, Change::Add(u64::MAX), end); 512])
            .await
            .expect("a batch of huge hits");
        for count in counts {
            assert!(
                (last..=COUNT_CEILING).contains(&count),
                "a count never wraps back down nor passes the ceiling: {last} then {count}"
            );
            last = count;
        }
    }
    assert_eq!(last, COUNT_CEILING, "it saturates");
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::Add(1), end)])
            .await
            .expect("hit"),
        vec![COUNT_CEILING],
        "and stays there"
    );
    assert_eq!(
        store
            .apply_ops(&[hit(&key, Change::Sub(1), end)])
            .await
            .expect("refund"),
        vec![COUNT_CEILING - 1],
        "a refund takes from the ceiling"
    );
    if !leases {
        return;
    }
    let lease = unique("sat-lease");
    store
        .apply_ops(&[hit(&lease, Change::Lease(u64::MAX), end)])
        .await
        .expect("lease");
    assert_eq!(
        store
            .apply_ops(&[hit(&lease, Change::Lease(0), end)])
            .await
            .expect("read"),
        vec![MAX_DELTA]
    );
}

/// A counter whose window ends after 2038-01-19 03:14:07 UTC counts for its whole window
/// (leases too, where the store has them).
pub(super) async fn past_2038<S: CounterStore>(store: &S, clock: &ManualClock, leases: bool) {
    let after_2038 = 2_147_483_648 + 10 * 365 * 86_400;
    let key = unique("y2038");
    for want in 1..=3 {
        assert_eq!(
            store
                .apply_ops(&[hit(&key, Change::Add(1), after_2038)])
                .await
                .expect("hit"),
            vec![want],
            "a window ending after 2038 keeps its count"
        );
    }
    assert!(clock.now_secs() < after_2038);
    if !leases {
        return;
    }
    let lease = unique("y2038-lease");
    for want in 1..=2 {
        assert_eq!(
            store
                .apply_ops(&[hit(&lease, Change::Lease(1), after_2038)])
                .await
                .expect("lease"),
            vec![want]
        );
    }
}
