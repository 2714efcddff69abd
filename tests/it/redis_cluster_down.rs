//! A Redis cluster with a master down answers at once: keys on the live masters keep counting
//! until the cluster declares itself down, then every call is `UNAVAILABLE` naming the
//! cluster's state (CLUSTERDOWN), or for a key of the dead master its node's open circuit
//! breaker, none of them held for the whole `REDIS_TIMEOUT`.

use std::time::{Duration, Instant};

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::redis::{RedisOptions, RedisStore, RedisTarget};

use crate::support::redis_server::{RedisCluster, cli};
use crate::support::{Options, missing, req1, start_with, unique, until};

/// A caller's deadline: a quarter of the store's `REDIS_TIMEOUT` (10 s).
const CALLER_DEADLINE: Duration = Duration::from_millis(2_500);

const RULES: &str = "\
domain: down
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_down_is_answered_with_the_clusters_state_not_after_the_timeout() {
    let Some(mut cluster) = RedisCluster::start_full_coverage("1000") else {
        return missing("redis-server");
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    // The reference's default deadline: nothing below must wait for it.
    let timeout = Duration::from_secs(10);
    let options = RedisOptions {
        target: RedisTarget::Cluster(cluster.seeds()),
        auth: None,
        timeout,
        jitter_max_seconds: 0,
        tls: None,
    };
    let store = RedisStore::new(options, std::sync::Arc::new(clock.clone()));
    let s = start_with(store, clock, &[("down.yaml", RULES)], Options::default()).await;
    let users: Vec<String> = (0..24).map(|i| unique(&format!("down{i}"))).collect();
    for user in &users {
        s.call(req1("down", &[("user", user)])).await;
    }
    cluster.nodes[1].kill();
    let (live, dead) = (cluster.nodes[0].port, cluster.nodes[1].port);
    let dead = format!("redis node 127.0.0.1:{dead}: circuit breaker open");
    // While the cluster still counts itself whole, then once it has declared itself down.
    let before = round(&s, &users, &dead).await;
    until(
        Duration::from_secs(20),
        "the cluster declares itself down",
        || cli(live, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:fail")),
    )
    .await;
    let after = round(&s, &users, &dead).await;
    eprintln!(
        "cluster master down: before the cluster declared itself down {} OK, {} UNAVAILABLE; \
         after, {} OK, {} UNAVAILABLE ({} naming CLUSTERDOWN); slowest answer {:?} \
         (REDIS_TIMEOUT {timeout:?})",
        before.ok,
        before.unavailable,
        after.ok,
        after.unavailable,
        after.named_down,
        before.slowest.max(after.slowest)
    );
    let cluster_down = after.named_down;
    let ok = before.ok;
    assert_eq!(
        (cluster_down, after.named_dead_node),
        (users.len() - before.unavailable, before.unavailable),
        "every call names the cluster's state, or the dead master's open breaker for its keys"
    );
    assert!(
        ok > 0,
        "keys on the live masters counted before the cluster was down"
    );
    assert_eq!(
        before.late + after.late,
        0,
        "no call waits for REDIS_TIMEOUT: each is answered within its caller's {CALLER_DEADLINE:?}"
    );
}

/// What one call per user was answered.
#[derive(Debug, Default)]
struct Tally {
    ok: usize,
    unavailable: usize,
    named_down: usize,
    /// Refused by the dead master's open circuit breaker (its keys).
    named_dead_node: usize,
    /// Calls not answered within [`CALLER_DEADLINE`].
    late: usize,
    slowest: Duration,
}

async fn round(s: &crate::support::TestServer, users: &[String], dead: &str) -> Tally {
    let mut tally = Tally::default();
    for user in users {
        let started = Instant::now();
        let call = s.try_call(req1("down", &[("user", user)]));
        let Ok(answer) = tokio::time::timeout(CALLER_DEADLINE, call).await else {
            tally.late += 1;
            continue;
        };
        match answer {
            Ok(_) => tally.ok += 1,
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                tally.unavailable += 1;
                if e.message().contains("CLUSTERDOWN") {
                    tally.named_down += 1;
                } else if e.message().contains(dead) {
                    tally.named_dead_node += 1;
                }
            }
        }
        tally.slowest = tally.slowest.max(started.elapsed());
    }
    tally
}
