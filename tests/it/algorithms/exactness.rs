//! Exactness under concurrency for every algorithm: 64 concurrent callers over two Turnstile
//! servers (separate stores, connections and coalescers) sharing two memcached servers, a
//! 3-master Redis Cluster, or one PostgreSQL, admit
//! exactly what the model admits. The clock is frozen (and moved by hand) so the expected
//! numbers are exact: a token bucket gives its capacity at once and then the refill; a sliding
//! window gives the limit, then what the previous window's weight leaves; a concurrency limit
//! never has more than the limit in flight and returns to 0 when every request has ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tonic::transport::Channel;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::support::{
    Memcached, Options, TestServer, desc, memcached_store, req, start_with, unique,
};

const RULES: &str = r#"
domain: exact
descriptors:
  - key: fw
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 50, algorithm: sliding_window }
  - key: tb
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 40 }
  - key: cc
    rate_limit: { unit: hour, requests_per_unit: 5, algorithm: concurrency }
"#;

const CALLERS: usize = 64;
const KEYS: usize = 8;

/// The store two Turnstile servers share.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shared {
    /// Two memcached servers on a ring.
    Memcached,
    /// A 3-master Redis Cluster.
    RedisCluster,
    /// One PostgreSQL (both replicas in one schema).
    Postgres,
}

type Replicas = (
    TestServer,
    TestServer,
    ManualClock,
    Box<dyn std::any::Any + Send>,
);

/// Two servers over one shared store, frozen at the start of a minute.
async fn replicas(shared: Shared) -> Option<Replicas> {
    let now = SystemClock.now_secs();
    let clock = ManualClock::new(now - now % 60 + 60);
    let files = [("exact.yaml", RULES)];
    match shared {
        Shared::Memcached => {
            let (Some(mc1), Some(mc2)) = (Memcached::start(), Memcached::start()) else {
                return None;
            };
            let store_a = memcached_store(&[&mc1, &mc2], &clock, Duration::from_secs(2));
            let store_b = memcached_store(&[&mc2, &mc1], &clock, Duration::from_secs(2));
            let a = start_with(store_a, clock.clone(), &files, Options::default()).await;
            let b = start_with(store_b, clock.clone(), &files, Options::default()).await;
            Some((a, b, clock, Box::new([mc1, mc2])))
        }
        Shared::RedisCluster => {
            let cluster = crate::support::redis_server::RedisCluster::start()?;
            let target = turnstile::storage::redis::RedisTarget::Cluster(cluster.seeds());
            let store_a = crate::support::redis_server::redis_store(target.clone(), &clock);
            let store_b = crate::support::redis_server::redis_store(target, &clock);
            let a = start_with(store_a, clock.clone(), &files, Options::default()).await;
            let b = start_with(store_b, clock.clone(), &files, Options::default()).await;
            Some((a, b, clock, Box::new(cluster)))
        }
        Shared::Postgres => {
            let pg = crate::support::postgres_server::Postgres::start()?;
            let shared: Arc<dyn Clock> = Arc::new(clock.clone());
            let (store_a, schema) = pg.store(&shared);
            let store_b =
                turnstile::storage::postgres::PostgresStore::new(pg.options(&schema), shared)
                    .expect("second replica's store");
            let a = start_with(store_a, clock.clone(), &files, Options::default()).await;
            let b = start_with(store_b, clock.clone(), &files, Options::default()).await;
            Some((a, b, clock, Box::new(pg)))
        }
    }
}

async fn one(
    client: &mut RateLimitServiceClient<Channel>,
    key: &str,
    value: &str,
    hits: u64,
    refund: bool,
) -> Code {
    let mut d = desc(&[(key, value)]);
    d.hits_addend = Some(hits);
    d.is_negative_hits = refund;
    let response = client
        .should_rate_limit(req("exact", vec![d]))
        .await
        .expect("call")
        .into_inner();
    response.overall_code()
}

/// Every caller (half on each server) makes `rounds` attempts spread over the keys; returns
/// the admitted count per key.
async fn burst(
    a: &TestServer,
    b: &TestServer,
    key: &'static str,
    values: &[String],
    rounds: usize,
) -> Vec<u32> {
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let mut client = if caller % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        let values = values.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut admitted = vec![0u32; values.len()];
            for round in 0..rounds {
                let k = (caller + round) % values.len();
                if one(&mut client, key, &values[k], 1, false).await == Code::Ok {
                    admitted[k] += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = vec![0u32; values.len()];
    for task in tasks {
        for (total, n) in admitted.iter_mut().zip(task.await.expect("caller")) {
            *total += n;
        }
    }
    admitted
}

fn values(tag: &str) -> Vec<String> {
    (0..KEYS).map(|i| unique(&format!("{tag}{i}"))).collect()
}

/// Two bursts of 80 attempts per key over both replicas, `advance` seconds apart: every key
/// admits `admitted.0` in the first and `admitted.1` in the second (each burst said as `said`).
async fn two_bursts(
    shared: Shared,
    tag: &'static str,
    advance: u64,
    admitted: (u32, u32),
    said: [&str; 2],
) {
    let Some((a, b, clock, _store)) = replicas(shared).await else {
        return;
    };
    let users = values(tag);
    let first = burst(&a, &b, tag, &users, 10).await;
    eprintln!("{shared:?}: {}, 80 attempts per key: {first:?}", said[0]);
    assert!(first.iter().all(|&n| n == admitted.0), "{first:?}");
    clock.advance(advance);
    let next = burst(&a, &b, tag, &users, 10).await;
    eprintln!("{shared:?}: {}, 80 attempts per key: {next:?}", said[1]);
    assert!(next.iter().all(|&n| n == admitted.1), "{next:?}");
}

async fn token_bucket_admits_capacity_then_the_refill(shared: Shared) {
    let said = [
        "token bucket (capacity 50) at one instant",
        "token bucket one second later (10 per second)",
    ];
    two_bursts(shared, "tb", 1, (50, 10), said).await;
}

async fn sliding_window_admits_the_limit_then_what_the_estimate_leaves(shared: Shared) {
    // Half-way into the next minute the previous one (80 counted) still weighs 40.
    let said = [
        "sliding window (50 per minute), fresh keys",
        "sliding window half-way into the next minute",
    ];
    two_bursts(shared, "sw", 90, (50, 10), said).await;
}

async fn concurrency_never_exceeds_the_limit_and_returns_to_zero(shared: Shared) {
    let Some((a, b, _clock, _store)) = replicas(shared).await else {
        return;
    };
    let route = unique("cc");
    let in_flight = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let mut client = if caller % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        let (route, in_flight, peak) = (route.clone(), Arc::clone(&in_flight), Arc::clone(&peak));
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u32;
            for _ in 0..10 {
                if one(&mut client, "cc", &route, 1, false).await == Code::Ok {
                    admitted += 1;
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                // Every request ends with a release, refused ones included (as Envoy does).
                one(&mut client, "cc", &route, 1, true).await;
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("caller");
    }
    let mut client = a.client.clone();
    let mut d = desc(&[("cc", &route)]);
    d.hits_addend = Some(0);
    let check = client
        .should_rate_limit(req("exact", vec![d]))
        .await
        .expect("check")
        .into_inner();
    let peak = peak.load(Ordering::SeqCst);
    eprintln!(
        "concurrency (limit 5): 640 requests, {admitted} admitted, peak in flight {peak}, remaining after all ended {}",
        check.statuses[0].limit_remaining
    );
    assert!(peak <= 5, "never more than the limit in flight: {peak}");
    assert!(admitted >= 5, "the limit was used: {admitted}");
    assert_eq!(
        check.statuses[0].limit_remaining, 5,
        "0 in flight once every request has ended"
    );
}

async fn concurrency_admits_exactly_the_limit_in_each_wave(shared: Shared) {
    let Some((a, b, _clock, _store)) = replicas(shared).await else {
        return;
    };
    let route = unique("waves");
    const WAVES: usize = 3;
    // Every caller acquires, all wait, every caller releases, all wait: a wave of 64 requests
    // in flight at once, then all ended.
    let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
    let mut tasks = Vec::new();
    for caller in 0..CALLERS {
        let mut client = if caller % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        let (route, barrier) = (route.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            let mut admitted = [0u32; WAVES];
            for wave in admitted.iter_mut() {
                *wave = u32::from(one(&mut client, "cc", &route, 1, false).await == Code::Ok);
                barrier.wait().await;
                one(&mut client, "cc", &route, 1, true).await;
                barrier.wait().await;
            }
            admitted
        }));
    }
    let mut per_wave = [0u32; WAVES];
    for task in tasks {
        for (total, n) in per_wave.iter_mut().zip(task.await.expect("caller")) {
            *total += n;
        }
    }
    eprintln!(
        "{shared:?}: concurrency (limit 5): admitted per wave of 64 simultaneous requests: {per_wave:?}"
    );
    assert_eq!(per_wave, [5; WAVES]);
}

async fn fixed_window_admits_exactly_the_limit(shared: Shared) {
    let Some((a, b, _clock, _store)) = replicas(shared).await else {
        return;
    };
    let admitted = burst(&a, &b, "fw", &values("fw"), 10).await;
    eprintln!("{shared:?}: fixed window (50 per minute), 80 attempts per key: {admitted:?}");
    assert!(admitted.iter().all(|&n| n == 50), "{admitted:?}");
}

macro_rules! on_shared_stores {
    ($($scenario:ident),* $(,)?) => {
        mod over_memcached {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Shared::Memcached).await })*
        }
        mod over_a_redis_cluster {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Shared::RedisCluster).await })*
        }
        mod over_postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() { super::$scenario(super::Shared::Postgres).await })*
        }
    };
}

on_shared_stores!(
    fixed_window_admits_exactly_the_limit,
    token_bucket_admits_capacity_then_the_refill,
    sliding_window_admits_the_limit_then_what_the_estimate_leaves,
    concurrency_never_exceeds_the_limit_and_returns_to_zero,
    concurrency_admits_exactly_the_limit_in_each_wave,
);
