//! A burst on one pipelined connection: 20,000 calls queued at once on a healthy memcached are
//! all answered and all counted (the writer's batches and the reader's runs of buffered
//! answers at their largest), on a runtime of one thread, where the writer, the reader and
//! every caller take turns.

use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore};
use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore};

use crate::support::{Memcached, unique};

async fn burst(calls: usize) -> Vec<String> {
    let Some(mc) = Memcached::start() else {
        return Vec::new();
    };
    let clock = ManualClock::new(SystemClock.now());
    let options = MemcachedOptions {
        servers: vec![mc.addr()],
        pool_size: 4,
        pipelined_connections: std::num::NonZeroUsize::new(1).expect("1"),
        timeout: Duration::from_secs(10),
        jitter_max_seconds: 0,
        transport: Default::default(),
    };
    let store = MemcachedStore::new(options, Arc::new(clock.clone())).expect("store");
    let prefix = unique("burst");
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let (store, now) = (store.clone(), clock.now());
            let key = CounterKey::checked(format!("{prefix}_{}", i % 50)).expect("key");
            tokio::spawn(async move {
                let hit = CounterOp {
                    key,
                    change: Change::Add(1),
                    expires_at: now + 60,
                };
                store.apply_ops(&[hit]).await.map(|_| ())
            })
        })
        .collect();
    let mut failed = Vec::new();
    for task in tasks {
        if let Err(e) = task.await.expect("task") {
            failed.push(e.to_string());
        }
    }
    // Every answered hit is in its counter: the 50 counters hold 20,000 less the failures.
    let mut counted = 0;
    for i in 0..50 {
        let key = CounterKey::checked(format!("{prefix}_{i}")).expect("key");
        let read = CounterOp {
            key,
            change: Change::Add(0),
            expires_at: clock.now() + 60,
        };
        counted += store.apply_ops(&[read]).await.expect("read")[0];
    }
    assert_eq!(
        counted,
        u64::try_from(calls - failed.len()).expect("a count"),
        "every answered hit counted once"
    );
    failed
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_on_one_connection_is_answered_in_full() {
    let failed = burst(20_000).await;
    assert!(
        failed.is_empty(),
        "{} of 20,000 calls failed on a healthy memcached, first: {:?}",
        failed.len(),
        failed.first()
    );
}
