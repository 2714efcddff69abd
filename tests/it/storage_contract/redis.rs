//! The suite on Redis: one server, a 3-master cluster, and through Sentinel (with a failover).

use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::{Change, CounterStore};

use turnstile::storage::redis::{RedisStore, RedisTarget};

use super::{Fixture, hit};
use crate::support::redis_server::{RedisCluster, RedisProcess, RedisSentinel, redis_store};
use crate::support::unique;

/// Redis: the same cases on one server, on a 3-master cluster, and through Sentinel; plus the
/// reference's TTL rule (every counter has a TTL, set when it is created) and a failover.
fn fixture(target: RedisTarget, server: Box<dyn std::any::Any + Send>) -> Fixture<RedisStore> {
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(target, &clock);
    Fixture {
        stores: vec![store.clone(), store],
        clock,
        leases: true,
        _server: server,
    }
}

async fn single() -> Option<Fixture<RedisStore>> {
    let redis = RedisProcess::start()?;
    Some(fixture(RedisTarget::Tcp(redis.addr()), Box::new(redis)))
}

async fn cluster() -> Option<Fixture<RedisStore>> {
    let cluster = RedisCluster::start()?;
    Some(fixture(
        RedisTarget::Cluster(cluster.seeds()),
        Box::new(cluster),
    ))
}

async fn sentinel() -> Option<Fixture<RedisStore>> {
    let set = RedisSentinel::start()?;
    Some(fixture(set.target(), Box::new(set)))
}

contract_cases!(single, super::single);
contract_cases!(cluster, super::cluster);
contract_cases!(sentinel, super::sentinel);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_single_ttl_is_set_at_creation() {
    use crate::support::redis_server::cli;
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    // A counter is created with its TTL, and the TTL is not pushed back by later hits.
    let key = unique("ttl");
    store
        .apply_ops(&[hit(&key, Change::Add(1), clock.now_secs() + 60)])
        .await
        .expect("hit");
    let ttl = |k: &str| cli(redis.port, &["TTL", k]).and_then(|t| t.trim().parse::<i64>().ok());
    let first = ttl(&key).expect("ttl");
    assert!((59..=62).contains(&first), "TTL {first}");
    store
        .apply_ops(&[hit(&key, Change::Add(1), clock.now_secs() + 600)])
        .await
        .expect("hit");
    assert!(
        ttl(&key).expect("ttl") <= first,
        "later hits do not move a window's TTL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_failover() {
    use crate::support::redis_server::cli;
    let Some(mut set) = RedisSentinel::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(set.target(), &clock);
    // Failover: the master dies, Sentinel promotes the replica, and the same store finds the
    // new master without a restart (calls fail meanwhile; none is answered wrongly).
    let key = unique("failover");
    let end = clock.now_secs() + 600;
    store
        .apply_ops(&[hit(&key, Change::Add(1), end)])
        .await
        .expect("before failover");
    set.master.kill();
    let count =
        crate::support::wait::until_some(Duration::from_secs(30), "a new master", || async {
            store
                .apply_ops(&[hit(&key, Change::READ, end)])
                .await
                .ok()
                .map(|counts| counts[0])
        })
        .await;
    assert!(
        cli(set.replica.port, &["ROLE"]).is_some_and(|r| r.starts_with("master")),
        "the replica was promoted"
    );
    assert!(
        count <= 1,
        "the replica holds what it had replicated: {count}"
    );
    let after = store
        .apply_ops(&[hit(&key, Change::Add(1), end)])
        .await
        .expect("after failover");
    assert_eq!(after, vec![count + 1], "counting goes on on the new master");
}
