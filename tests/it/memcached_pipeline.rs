//! One pipelined memcached connection at its edges: a burst of 20,000 calls queued at once on a
//! healthy memcached is all answered and all counted (the writer's batches and the reader's
//! runs of buffered answers at their largest), on a runtime of one thread, where the writer,
//! the reader and every caller take turns; and a connection that the server closes with
//! answers awaited fails its calls saying so.

use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore};
use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore, ErrorKind};

use crate::support::{Memcached, unique};

/// A store on one pipelined connection to `server`.
fn one_connection(server: String, clock: &ManualClock) -> MemcachedStore {
    let options = MemcachedOptions {
        servers: vec![server],
        client: turnstile::storage::memcached::MemcachedClient {
            transport: Default::default(),
            pool_size: 4,
            pipelined_connections: Some(std::num::NonZeroUsize::new(1).expect("1")),
            timeout: Duration::from_secs(10),
            jitter_max_seconds: 0,
        },
        tls: None,
    };
    MemcachedStore::new(options, Arc::new(clock.clone())).expect("store")
}

async fn burst(calls: usize) -> Vec<String> {
    let Some(mc) = Memcached::start() else {
        return Vec::new();
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = one_connection(mc.addr(), &clock);
    let prefix = unique("burst");
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let (store, now) = (store.clone(), clock.now_secs());
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
            change: Change::READ,
            expires_at: clock.now_secs() + 60,
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

/// A server that reads each connection's first command line and closes the connection without
/// answering (a memcached that goes away with answers owed): the call is `UNAVAILABLE` and
/// says the server closed the connection with answers awaited, not only that it closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_with_answers_awaited_says_so() {
    use std::io::BufRead;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut line = String::new();
            // Read the whole line first: closing with unread bytes would be a reset instead.
            let _ = std::io::BufReader::new(&stream).read_line(&mut line);
        }
    });
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = one_connection(addr.to_string(), &clock);
    let hit = CounterOp {
        key: CounterKey::checked(unique("owed")).expect("key"),
        change: Change::Add(1),
        expires_at: clock.now_secs() + 60,
    };
    let error = store.apply_ops(&[hit]).await.expect_err("no answer came");
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(
        error
            .what()
            .contains("memcached closed the connection with answers awaited"),
        "says why: {error}"
    );
}
