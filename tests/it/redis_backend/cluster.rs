//! A Redis cluster under a running service: a master killed and restarted, and a slot moved
//! between masters while calls keep coming.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::limiter::{KeyLayout, LimiterSettings};
use turnstile::storage::redis::RedisTarget;

use crate::support::redis_server::{cli, redis_store};
use crate::support::{Options, TestServer, req1, start_with, unique};

use super::RULES;

/// A cluster node killed and restarted under load: keys on the other nodes keep counting,
/// keys on the dead node get timely UNAVAILABLE, and once the node is back (it rejoins with its
/// `nodes.conf`) every key counts again, without a restart of Turnstile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_node_killed_and_restarted() {
    use crate::support::redis_server::RedisCluster;
    use std::time::Instant;
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(RedisTarget::Cluster(cluster.seeds()), &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let users: Vec<String> = (0..24).map(|i| unique(&format!("node{i}"))).collect();
    for user in &users {
        s.call(req1("cut", &[("user", user)])).await;
    }
    let killed = Instant::now();
    cluster.nodes[1].kill();
    let (mut ok, mut unavailable, mut slowest) = (0, 0, Duration::ZERO);
    // Each call with the deadline a caller gives it: an answer past it is no answer.
    let deadline = Duration::from_millis(2_500);
    for user in &users {
        let t = Instant::now();
        let answer = tokio::time::timeout(deadline, s.try_call(req1("cut", &[("user", user)])))
            .await
            .unwrap_or_else(|_| panic!("no answer within the caller's {deadline:?} deadline"));
        match answer {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                unavailable += 1;
            }
        }
        slowest = slowest.max(t.elapsed());
    }
    assert!(ok > 0, "keys on the live nodes keep counting");
    assert!(
        unavailable > 0,
        "keys on the dead node are refused, not admitted uncounted"
    );
    cluster.nodes[1].restart();
    crate::support::wait::until_some(
        Duration::from_secs(30),
        "every key counting after the restart",
        || async {
            let mut every = true;
            for user in &users {
                every &= s.try_call(req1("cut", &[("user", user)])).await.is_ok();
            }
            every.then_some(())
        },
    )
    .await;
    eprintln!(
        "cluster node down: {ok} of {} keys still counted, {unavailable} UNAVAILABLE, slowest answer \
         {slowest:?}; every key counting again {:?} after the kill",
        users.len(),
        killed.elapsed()
    );
}

/// Whether the node on `port` owns `slot` (a range of its own line in `CLUSTER NODES` holds it).
fn owns(port: u16, slot: &str) -> bool {
    let n: u32 = slot.parse().unwrap_or(u32::MAX);
    let holds = |range: &str| match range.split_once('-') {
        Some((a, b)) => {
            a.parse().is_ok_and(|a: u32| a <= n) && b.parse().is_ok_and(|b: u32| n <= b)
        }
        None => range.parse() == Ok(n),
    };
    cli(port, &["CLUSTER", "COUNTKEYSINSLOT", slot]).is_some()
        && cli(port, &["CLUSTER", "NODES"]).is_some_and(|nodes| {
            nodes
                .lines()
                .any(|l| l.contains("myself") && l.split_whitespace().skip(8).any(holds))
        })
}

/// Calls for `user` one after another until `stop`, counting the answered ones in `ok`; the
/// failures' messages.
async fn keep_calling(
    s: Arc<TestServer>,
    user: String,
    ok: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let mut failed = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match s.try_call(req1("cut", &[("user", &user)])).await {
            Ok(_) => {
                ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    failed
}

/// The cluster node id of the node on `port`.
fn node_id(port: u16) -> String {
    let id = cli(port, &["CLUSTER", "MYID"]).expect("id");
    id.trim().to_owned()
}

/// Moves every key of `slot` from the node on `from` to the node on `to` (`MIGRATE`).
fn migrate_keys(from: u16, to: u16, slot: &str) {
    let keys = cli(from, &["CLUSTER", "GETKEYSINSLOT", slot, "100"]).expect("keys");
    let to = to.to_string();
    for k in keys.lines().map(str::trim).filter(|k| !k.is_empty()) {
        cli(from, &["MIGRATE", "127.0.0.1", &to, k, "0", "5000"]).expect("migrate");
    }
}

/// Waits until `n` more calls than now have been answered (`ok` counts them).
async fn answered_more(ok: &AtomicU64, n: u64) {
    let target = ok.load(Ordering::Relaxed) + n;
    crate::support::until(Duration::from_secs(20), "calls go on", || {
        ok.load(Ordering::Relaxed) >= target
    })
    .await;
}

/// A slot moves between cluster masters under load (the steps `redis-cli --cluster reshard`
/// takes: IMPORTING / MIGRATING, MIGRATE of its keys, then SETSLOT NODE on the destination, the
/// source and the third master), so calls meet ASK while it migrates and MOVED after: every
/// call is answered OK and the count stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slot_migration_under_load_loses_nothing() {
    use crate::support::redis_server::RedisCluster;
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let now = SystemClock.now_secs();
    let clock = ManualClock::new(now);
    let rules = "domain: cut\ndescriptors:\n  - key: user\n    rate_limit: { unit: day, requests_per_unit: 1000000 }\n";
    let options = Options {
        limiter: LimiterSettings {
            key_layout: KeyLayout::Reference,
            ..Default::default()
        },
        ..Default::default()
    };
    let store = redis_store(RedisTarget::Cluster(cluster.seeds()), &clock);
    let s = Arc::new(start_with(store, clock, &[("cut.yaml", rules)], options).await);
    let user = unique("moving");
    let key = format!("cut_user_{user}_{}", now - now % 86_400);
    let port = |i: usize| cluster.nodes[i].port;
    let slot = cli(port(0), &["CLUSTER", "KEYSLOT", &key]).expect("keyslot");
    let slot = slot.trim().to_owned();
    // Who owns the slot, and who gets it.
    let ids: Vec<String> = (0..3).map(|i| node_id(port(i))).collect();
    let from = (0..3).find(|&i| owns(port(i), &slot)).expect("an owner");
    let to = (from + 1) % 3;
    let (ok, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let load = tokio::spawn(keep_calling(
        Arc::clone(&s),
        user.clone(),
        Arc::clone(&ok),
        Arc::clone(&stop),
    ));
    // Each step waits for 20 more answered calls, so calls meet every state of the slot.
    answered_more(&ok, 20).await;
    cli(
        port(to),
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &ids[from]],
    )
    .expect("importing");
    cli(
        port(from),
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &ids[to]],
    )
    .expect("migrating");
    answered_more(&ok, 20).await;
    migrate_keys(port(from), port(to), &slot);
    answered_more(&ok, 20).await;
    // The slot is given to the destination first, then the source, then the third node, as
    // Redis's own resharding does: an importing node answers a command without ASKING with a
    // MOVED back to the source, so a source told first would send every call to the destination
    // and the destination back to it (the cluster itself answers nothing for that slot until
    // the destination is told; no client can follow it).
    let third = 3 - from - to;
    for i in [to, from, third] {
        cli(port(i), &["CLUSTER", "SETSLOT", &slot, "NODE", &ids[to]]).expect("node");
    }
    answered_more(&ok, 50).await;
    stop.store(true, Ordering::Relaxed);
    let failed = load.await.expect("load");
    assert!(failed.is_empty(), "every call answered: {failed:?}");
    let counted = cli(port(to), &["GET", &key]).expect("get");
    assert_eq!(
        counted.trim().parse::<u64>().ok(),
        Some(ok.load(Ordering::Relaxed)),
        "the moved counter holds every answered call"
    );
    eprintln!(
        "slot {slot} moved from node {from} to node {to} under load: {} calls, none failed",
        ok.load(Ordering::Relaxed)
    );
}
