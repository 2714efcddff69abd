//! One behaviour suite for every `CounterStore`: the memory store, memcached with meta
//! commands, and memcached with the classic `incr`/`add` fallback.

use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memory::MemoryStore;
use turnstile::storage::{BucketStep, CounterStore, Hit, MAX_KEY_LEN, Op, StorageError, Take};

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

/// Leases (concurrency): add or subtract and move the expiry on every change.
async fn leases<S: CounterStore>(store: &S, clock: &ManualClock) {
    let end = clock.now() + 3_600;
    let key = unique("lease");
    let lease = |op| hit(&key, op, end);
    assert_eq!(
        store.hit(&[lease(Op::Release(1))]).await.expect("release"),
        vec![0]
    );
    assert_eq!(
        store.hit(&[lease(Op::Lease(0))]).await.expect("read"),
        vec![0],
        "not created"
    );
    let counts = store
        .hit(&[
            lease(Op::Lease(2)),
            lease(Op::Lease(0)),
            lease(Op::Release(1)),
            lease(Op::Release(5)),
        ])
        .await
        .expect("leases");
    assert_eq!(counts, vec![2, 2, 1, 0], "in order, never below zero");
}

fn step(key: &str, now: u128, take: Take) -> BucketStep {
    // One token per second, three at most; ticks are milliseconds.
    BucketStep {
        key: key.to_owned(),
        now,
        interval: 1_000,
        capacity: 3,
        take,
        ticks_per_milli: 1,
    }
}

/// Token-bucket steps: applied atomically, in order, and exactly once each under a race.
async fn buckets<S: CounterStore + Clone>(stores: &[S], clock: &ManualClock) {
    let store = &stores[0];
    let now = u128::from(clock.now_millis());
    let key = unique("bucket");
    let steps: Vec<BucketStep> = [
        Take::Take(1),
        Take::Take(2),
        Take::Take(1),
        Take::Refund(1),
        Take::Take(0),
    ]
    .into_iter()
    .map(|take| step(&key, now, take))
    .collect();
    let answers = store.bucket(&steps).await.expect("steps");
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
        .bucket(&[
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
        step.capacity = 20;
        tasks.push(tokio::spawn(async move { store.bucket(&[step]).await }));
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

#[tokio::test]
async fn memory_store() {
    let clock = ManualClock::new(crate::support::T0);
    let store = Arc::new(MemoryStore::new(100_000, Arc::new(clock.clone())));
    contract(Arc::clone(&store), &clock).await;
    leases(&store, &clock).await;
    buckets(&[Arc::clone(&store)], &clock).await;
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

async fn memcached(transport: MemcachedTransport) {
    let Some(mc) = Memcached::start() else { return };
    let clock = ManualClock::new(SystemClock.now());
    let store = memcached_store_with(transport, &[&mc], &clock, Duration::from_millis(500));
    contract(store.clone(), &clock).await;
    if transport == MemcachedTransport::Classic {
        classic_refuses_what_it_cannot_do_atomically(&store, &clock).await;
    } else {
        leases(&store, &clock).await;
        // Two stores on one memcached: two Turnstile processes racing on one bucket.
        let other = memcached_store_with(transport, &[&mc], &clock, Duration::from_millis(500));
        buckets(&[store.clone(), other], &clock).await;
        lease_expiry_moves(&store, &clock).await;
    }
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

/// The classic protocol (memcached < 1.6) has no TTL update or compare-and-swap here: leases
/// and buckets get a clear error, never a wrong count.
async fn classic_refuses_what_it_cannot_do_atomically<S: CounterStore>(
    store: &S,
    clock: &ManualClock,
) {
    let key = unique("classic");
    let err = store
        .hit(&[hit(&key, Op::Lease(1), clock.now() + 60)])
        .await
        .expect_err("lease");
    assert!(
        matches!(&err, StorageError::Protocol(m) if m.contains("meta commands")),
        "{err}"
    );
    let now = u128::from(clock.now_millis());
    let err = store
        .bucket(&[step(&key, now, Take::Take(1))])
        .await
        .expect_err("bucket");
    assert!(
        matches!(&err, StorageError::Protocol(m) if m.contains("meta commands")),
        "{err}"
    );
}

/// On memcached a lease's TTL moves with every change: a lease first set to live 2 s and then
/// renewed for an hour outlives a control counter that was given the same 2 s.
async fn lease_expiry_moves<S: CounterStore>(store: &S, clock: &ManualClock) {
    let (key, control) = (unique("lease-ttl"), unique("control"));
    let soon = clock.now() + 1;
    store
        .hit(&[
            hit(&key, Op::Lease(1), soon),
            hit(&control, Op::Lease(1), soon),
        ])
        .await
        .expect("leases");
    store
        .hit(&[hit(&key, Op::Lease(1), clock.now() + 3_600)])
        .await
        .expect("renew");
    // memcached's own clock decides: poll the control counter until it is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store
        .hit(&[hit(&control, Op::Lease(0), soon)])
        .await
        .expect("read")
        != vec![0]
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the control lease did not expire"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        store
            .hit(&[hit(&key, Op::Lease(0), soon)])
            .await
            .expect("read"),
        vec![2]
    );
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

/// Redis: the same suite on one server, on a 3-master cluster, and through Sentinel; plus the
/// reference's TTL rule (every counter has a TTL, set when it is created).
async fn redis_suite(store: turnstile::storage::redis::RedisStore, clock: &ManualClock) {
    contract(store.clone(), &clock.clone()).await;
    leases(&store, clock).await;
    let other = store.clone();
    buckets(&[store.clone(), other], clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_store() {
    use crate::redis_support::{RedisProcess, cli, redis_store};
    use turnstile::storage::redis::RedisTarget;
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    redis_suite(store.clone(), &clock).await;
    // A counter is created with its TTL, and the TTL is not pushed back by later hits.
    let key = unique("ttl");
    store
        .hit(&[hit(&key, Op::Add(1), clock.now() + 60)])
        .await
        .expect("hit");
    let ttl = |k: &str| cli(redis.port, &["TTL", k]).and_then(|t| t.trim().parse::<i64>().ok());
    let first = ttl(&key).expect("ttl");
    assert!((59..=62).contains(&first), "TTL {first}");
    store
        .hit(&[hit(&key, Op::Add(1), clock.now() + 600)])
        .await
        .expect("hit");
    assert!(
        ttl(&key).expect("ttl") <= first,
        "later hits do not move a window's TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_store() {
    use crate::redis_support::{RedisCluster, redis_store};
    use turnstile::storage::redis::RedisTarget;
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Cluster(cluster.seeds()), &clock);
    redis_suite(store, &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_store() {
    use crate::redis_support::{RedisSentinel, SENTINEL_MASTER, cli, redis_store};
    use turnstile::storage::redis::RedisTarget;
    let Some(mut set) = RedisSentinel::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let target = RedisTarget::Sentinel {
        master: SENTINEL_MASTER.into(),
        sentinels: vec![set.sentinel.addr()],
        sentinel_username: None,
        sentinel_password: None,
    };
    let store = redis_store(target, &clock);
    redis_suite(store.clone(), &clock).await;
    // Failover: the master dies, Sentinel promotes the replica, and the same store finds the
    // new master without a restart (calls fail meanwhile; none is answered wrongly).
    let key = unique("failover");
    let end = clock.now() + 600;
    store
        .hit(&[hit(&key, Op::Add(1), end)])
        .await
        .expect("before failover");
    set.master.kill();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let count = loop {
        match store.hit(&[hit(&key, Op::Add(0), end)]).await {
            Ok(counts) => break counts[0],
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no new master within 30 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(
        cli(set.replica.port, &["ROLE"]).is_some_and(|r| r.starts_with("master")),
        "the replica was promoted"
    );
    assert!(
        count <= 1,
        "the replica holds what it had replicated: {count}"
    );
    let after = store
        .hit(&[hit(&key, Op::Add(1), end)])
        .await
        .expect("after failover");
    assert_eq!(after, vec![count + 1], "counting goes on on the new master");
}
