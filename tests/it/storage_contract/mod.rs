//! One behaviour suite for every `CounterStore`, run on the memory store (`memory`), memcached
//! with meta commands and with the classic `incr`/`add` fallback (`memcached`), Redis single,
//! cluster and Sentinel (`redis`) and PostgreSQL (`postgres`). Each case is its own test on each
//! backend ([`contract_cases!`]: `storage_contract::memcached::pipelined::token_buckets`), so a failure
//! names both.

/// One `#[tokio::test]` per case for one backend: `contract_cases!(name, fixture)` (every
/// case) or `contract_cases!(name, fixture, case, …)` makes a module `name` whose tests each
/// run `cases::<case>` on a fresh `fixture()` (an async fn returning `Option<Fixture<_>>`;
/// `None` when the backend's server is missing, which its start reports).
macro_rules! contract_cases {
    // Every case.
    ($backend:ident, $fixture:path) => {
        contract_cases!($backend, $fixture, counts, race, leases, token_buckets, saturation, past_2038);
    };
    ($backend:ident, $fixture:path, $($case:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(fixture) = $fixture().await {
                        crate::storage_contract::cases::$case(&fixture).await;
                    }
                }
            )+
        }
    };
}

mod edges;
mod memcached;
mod memory;
mod postgres;
mod redis;

use std::num::NonZeroU128;
use turnstile::clock::{Clock, ManualClock};
use turnstile::storage::{
    Change, CounterKey, CounterOp, CounterStore, MAX_KEY_LEN, Take, TokenStep,
};

use crate::support::unique;

/// A backend as the cases see it.
pub(super) struct Fixture<S> {
    /// Its stores: two where two replicas share one backend (for the races), else one.
    pub(super) stores: Vec<S>,
    pub(super) clock: ManualClock,
    /// Whether it keeps leases (classic memcached does not).
    pub(super) leases: bool,
    /// Whatever keeps its server running for the test.
    pub(super) _server: Box<dyn std::any::Any + Send>,
}

/// The cases, each over a [`Fixture`].
pub(super) mod cases {
    use turnstile::storage::CounterStore;

    use super::Fixture;

    pub(in crate::storage_contract) async fn counts<S: CounterStore>(f: &Fixture<S>) {
        super::counts(&f.stores[0], &f.clock).await;
    }

    pub(in crate::storage_contract) async fn race<S: CounterStore + Clone + 'static>(
        f: &Fixture<S>,
    ) {
        super::race(&f.stores, &f.clock).await;
    }

    pub(in crate::storage_contract) async fn leases<S: CounterStore>(f: &Fixture<S>) {
        super::leases(&f.stores[0], &f.clock).await;
    }

    pub(in crate::storage_contract) async fn token_buckets<S: CounterStore + Clone + 'static>(
        f: &Fixture<S>,
    ) {
        super::token_buckets(&f.stores, &f.clock).await;
    }

    pub(in crate::storage_contract) async fn saturation<S: CounterStore>(f: &Fixture<S>) {
        super::edges::saturation(&f.stores[0], &f.clock, f.leases).await;
    }

    pub(in crate::storage_contract) async fn past_2038<S: CounterStore>(f: &Fixture<S>) {
        super::edges::past_2038(&f.stores[0], &f.clock, f.leases).await;
    }
}

pub(super) fn hit(key: &str, change: Change, expires_at: u64) -> CounterOp {
    CounterOp {
        key: CounterKey::checked(key).expect("key"),
        change,
        expires_at,
    }
}

/// Reads, adds and refunds in one batch: counts after each hit, in order, floored at zero; a
/// read or refund creates nothing; the longest key counts.
/// The count after one operation on `key`.
pub(super) async fn one<S: CounterStore>(store: &S, key: &str, change: Change, end: u64) -> u64 {
    let counts = store.apply_ops(&[hit(key, change, end)]).await;
    let counts = counts.unwrap_or_else(|e| panic!("{change:?} on {key}: {e}"));
    assert_eq!(counts.len(), 1, "one count for one operation");
    counts[0]
}

pub(super) async fn counts<S: CounterStore>(store: &S, clock: &ManualClock) {
    let now = clock.now_secs();
    let end = now + 60;
    let (a, b) = (unique("a"), unique("b"));
    let read = one(store, &a, Change::READ, end).await;
    assert_eq!(read, 0, "read of a missing counter");
    let refund = one(store, &a, Change::Sub(3), end).await;
    assert_eq!(refund, 0, "refund of a missing counter");
    assert_eq!(
        one(store, &a, Change::READ, end).await,
        0,
        "neither created it"
    );
    let counts = store
        .apply_ops(&[
            hit(&a, Change::Add(1), end),
            hit(&b, Change::Add(5), end),
            hit(&a, Change::Add(2), end),
        ])
        .await
        .expect("batch");
    assert_eq!(counts, vec![1, 5, 3], "counts after each hit, in order");
    assert_eq!(one(store, &a, Change::Sub(2), end).await, 1, "refund");
    assert_eq!(
        one(store, &a, Change::Sub(9), end).await,
        0,
        "floors at zero"
    );
    let longest = "k".repeat(MAX_KEY_LEN);
    assert_eq!(
        one(store, &longest, Change::Add(7), end).await,
        7,
        "the longest key"
    );
}

/// Atomic under concurrency: 64 callers × 25 hits, over every store given, see every count from
/// 1 to 1600 exactly once.
pub(super) async fn race<S: CounterStore + Clone + 'static>(stores: &[S], clock: &ManualClock) {
    let end = clock.now_secs() + 60;
    let key = unique("race");
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (store, key) = (stores[i % stores.len()].clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..25 {
                seen.extend(
                    store
                        .apply_ops(&[hit(&key, Change::Add(1), end)])
                        .await
                        .expect("hit"),
                );
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

/// Leases (concurrency): add or subtract and move the expiry on every change.
pub(super) async fn leases<S: CounterStore>(store: &S, clock: &ManualClock) {
    let end = clock.now_secs() + 3_600;
    let key = unique("lease");
    let lease = |op| hit(&key, op, end);
    assert_eq!(
        store
            .apply_ops(&[lease(Change::Release(1))])
            .await
            .expect("release"),
        vec![0]
    );
    assert_eq!(
        store
            .apply_ops(&[lease(Change::Lease(0))])
            .await
            .expect("read"),
        vec![0],
        "not created"
    );
    let counts = store
        .apply_ops(&[
            lease(Change::Lease(2)),
            lease(Change::Lease(0)),
            lease(Change::Release(1)),
            lease(Change::Release(5)),
        ])
        .await
        .expect("leases");
    assert_eq!(counts, vec![2, 2, 1, 0], "in order, never below zero");
}

pub(super) fn step(key: &str, now: u128, take: Take) -> TokenStep {
    // One token per second, three at most; ticks are milliseconds.
    TokenStep {
        key: CounterKey::checked(key).expect("key"),
        now,
        interval: NonZeroU128::new(1_000).expect("nonzero"),
        capacity: NonZeroU128::new(3).expect("nonzero"),
        take,
        ticks_per_milli: NonZeroU128::MIN,
    }
}

/// Token-bucket steps: applied atomically, in order, and exactly once each under a race.
pub(super) async fn token_buckets<S: CounterStore + Clone + 'static>(
    stores: &[S],
    clock: &ManualClock,
) {
    let store = &stores[0];
    let now = u128::from(clock.now().millis());
    let key = unique("bucket");
    let steps: Vec<TokenStep> = [
        Take::Take(1),
        Take::Take(2),
        Take::Take(1),
        Take::Refund(1),
        Take::Take(0),
    ]
    .into_iter()
    .map(|take| step(&key, now, take))
    .collect();
    let answers = store.take_tokens(&steps).await.expect("steps");
    let admitted: Vec<bool> = answers.iter().map(|a| a.admitted).collect();
    assert_eq!(
        admitted,
        [true, true, false, true, true],
        "3 tokens: 1 + 2, then none; a refund gives one back; now {now}, answers {answers:?}"
    );
    assert_eq!(
        answers[1].tat,
        now + 3_000,
        "the bucket is full again 3 s later"
    );
    assert_eq!(answers[3].tat, now + 2_000);
    let later = store
        .take_tokens(&[
            step(&key, now + 1_000, Take::Take(3)),
            step(&key, now + 1_000, Take::Take(2)),
        ])
        .await
        .expect("steps");
    let admitted: Vec<bool> = later.iter().map(|a| a.admitted).collect();
    assert_eq!(
        admitted,
        [false, true],
        "1 left + 1 back after a second: 2 tokens, not 3"
    );

    // A race: 64 callers over every store given take one token each from a bucket of 20.
    let key = unique("bucket-race");
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = stores[i % stores.len()].clone();
        let mut step = step(&key, now, Take::Take(1));
        step.capacity = NonZeroU128::new(20).expect("nonzero");
        tasks.push(tokio::spawn(
            async move { store.take_tokens(&[step]).await },
        ));
    }
    let mut tats = Vec::new();
    for task in tasks {
        let answer = task
            .await
            .expect("task")
            .expect("no give-up at this contention")[0];
        if answer.admitted {
            tats.push(answer.tat);
        }
    }
    tats.sort_unstable();
    let expected: Vec<u128> = (1..=20).map(|k| now + k * 1_000).collect();
    assert_eq!(
        tats, expected,
        "exactly the capacity, each token taken once"
    );
}
