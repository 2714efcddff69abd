//! A store outage under `BACKEND_FAILURE_MODE=local` (issue 40), on real stores taken down
//! under load and brought back: two replicas learn N = 2 from their marks, the store goes down
//! (memcached and Redis killed, PostgreSQL frozen with SIGSTOP), and each replica admits exactly
//! its half of the limit with no call failing, ready and saying it is degraded, while a
//! replica in the default mode answers `UNAVAILABLE`. The store comes back: each replica hands
//! its hits back by itself, with no call (issue 51: the first call after recovery was decided
//! before the other replica's hits were in; now it answers OVER_LIMIT everywhere) and a fresh key is
//! counted by the store again (60 of 80 admitted, not the local 30). Three replicas learn
//! N = 3; one stopped, the others learn N = 2.
//!
//! Every call's latency after the breaker opened is printed (RELIABILITY.md's outage table,
//! `cargo test --test it outage -- --nocapture`); nothing here asserts a duration.

mod hand_back;
mod modes;

use std::time::{Duration, Instant};

use tonic::Code as Status;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::support::process::{Process, http_get, metric, rules_root};
use crate::support::wait::until;
use crate::support::{req1, unique};

const RULES: &str =
    "domain: o\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 60 }\n";

/// The store under test: its settings, and how it is taken down and brought back.
struct Store<'a> {
    name: &'static str,
    env: Vec<(&'static str, String)>,
    down: Box<dyn FnMut() + 'a>,
    up: Box<dyn FnMut() + 'a>,
}

/// One call for `key`: its overall code, or the gRPC status it failed with.
async fn call(p: &Process, key: &str) -> Result<Code, Status> {
    let mut client = p.client().await;
    client
        .should_rate_limit(req1("o", &[("k", key)]))
        .await
        .map(|r| r.into_inner().overall_code())
        .map_err(|s| s.code())
}

fn reading(p: &Process, series: &str) -> Option<u64> {
    metric(&p.metrics(), series)
}

/// Replicas of `env` in the local mode.
fn replicas(n: usize, env: &[(&'static str, String)]) -> Vec<Process> {
    let root = rules_root(RULES);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("BACKEND_FAILURE_MODE", "local"));
    (0..n).map(|_| Process::start(&root, &env)).collect()
}

async fn learn(replicas: &[Process], n: u64) {
    let what = format!("every replica learns that {n} share the store");
    until(Duration::from_secs(15), &what, || {
        replicas
            .iter()
            .all(|p| reading(p, "turnstile_store_replicas{") == Some(n))
    })
    .await;
}

/// The whole outage scenario on `store`.
async fn outage(mut store: Store<'_>) {
    let pair = replicas(2, &store.env);
    let strict_env: Vec<(&str, &str)> = store.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let strict = Process::start(&rules_root(RULES), &strict_env);
    learn(&pair, 2).await;
    let key = unique("outage");
    (store.down)();
    let (mut admitted, mut failed) = ([0u32; 2], 0);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        for (i, p) in pair.iter().enumerate() {
            let open = reading(p, "turnstile_store_breaker_open{") == Some(1);
            let started = Instant::now();
            match call(p, &key).await {
                Ok(Code::Ok) => admitted[i] += 1,
                Ok(_) => {}
                Err(_) => failed += 1,
            }
            match open {
                true => after.push(started.elapsed()),
                false => before.push(started.elapsed()),
            }
        }
    }
    assert_eq!(failed, 0, "{}: no call fails in the local mode", store.name);
    assert_eq!(admitted, [30, 30], "{}: each replica its half", store.name);
    for p in &pair {
        let local = reading(p, "turnstile_local_decisions_total{");
        assert_eq!(
            local,
            Some(40),
            "{}: every call decided locally",
            store.name
        );
        let (status, body) = http_get(p.http, "/healthcheck").expect("healthcheck");
        assert_eq!(status, 200, "{}: still ready: {body}", store.name);
    }
    let what = format!("{}: /healthcheck says degraded", store.name);
    until(Duration::from_secs(10), &what, || {
        http_get(pair[0].http, "/healthcheck").is_some_and(|(_, b)| b.contains("degraded"))
    })
    .await;
    let (_, body) = http_get(pair[0].http, "/healthcheck").expect("healthcheck");
    assert!(
        body.contains("deciding locally with this replica's share of each limit (1/2)"),
        "{}: says how it decides: {body}",
        store.name
    );
    assert!(
        !body.contains("  "),
        "{}: one space between words: {body:?}",
        store.name
    );
    let refused = call(&strict, &key).await;
    assert_eq!(
        refused,
        Err(Status::Unavailable),
        "{}: default mode",
        store.name
    );
    print_latencies(store.name, "before its breaker opened", &mut before);
    print_latencies(store.name, "after its breaker opened", &mut after);

    (store.up)();
    after_the_store_returns(&pair, &key, store.name).await;
}

/// The store is back: both replicas hand their hits back by themselves, the first call on `key`
/// sees all 80 of them, and a fresh key is counted by the store again.
async fn after_the_store_returns(pair: &[Process], key: &str, name: &str) {
    let back = Instant::now();
    let what = format!("{name}: both replicas hand their hits back");
    until_handed_back(pair, 40, &what).await;
    let handed = pair
        .iter()
        .map(|p| reading(p, "turnstile_local_hits_handed_back_total{").unwrap_or(0))
        .collect::<Vec<_>>();
    eprintln!(
        "outage on {name}: handed back {handed:?} hits {:?} after the store returned",
        back.elapsed()
    );
    for p in pair {
        let code = call(p, key).await;
        assert_eq!(
            code,
            Ok(Code::OverLimit),
            "{name}: the first call after the store returned sees its 80 hits"
        );
    }
    let fresh = unique("fresh");
    let mut ok = 0;
    for _ in 0..80 {
        if call(&pair[0], &fresh).await == Ok(Code::Ok) {
            ok += 1;
        }
    }
    assert_eq!(ok, 60, "{name}: the store counts again (not the local 30)");
}

/// Waits, without a call, until both replicas decide in the store again, having handed back
/// at least `at_least` hits each (the outage's 40, and any decided locally after): the
/// hand-back runs in the background, so the first call after it is decided with every
/// replica's hits in the store.
async fn until_handed_back(pair: &[Process], at_least: u64, what: &str) {
    let seen = || {
        let local = |p: &Process| {
            let text = p.metrics();
            text.lines()
                .filter(|l| l.starts_with("turnstile_local") || l.starts_with("turnstile_store_"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        format!(
            "{what}: {}",
            pair.iter().map(local).collect::<Vec<_>>().join(" | ")
        )
    };
    let paid = || {
        pair.iter().all(|p| {
            let text = p.metrics();
            metric(&text, "turnstile_store_deciding_locally{") == Some(0)
                && metric(&text, "turnstile_local_hits_handed_back_total{") >= Some(at_least)
        })
    };
    let probe = || std::future::ready(paid().then_some(()));
    crate::support::wait::until_some_said(Duration::from_secs(15), seen, probe).await;
}

fn print_latencies(store: &str, when: &str, latencies: &mut [Duration]) {
    if latencies.is_empty() {
        return eprintln!("outage on {store}: no call {when}");
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    eprintln!(
        "outage on {store}, {when}: {} calls, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_killed() {
    let Some(memcached) = crate::support::memcached::Memcached::start() else {
        return;
    };
    let memcached = std::cell::RefCell::new(memcached);
    let env = vec![
        ("BACKEND_TYPE", "memcache".to_owned()),
        ("MEMCACHE_HOST_PORT", memcached.borrow().addr()),
    ];
    outage(Store {
        name: "memcached",
        env,
        down: Box::new(|| memcached.borrow_mut().kill()),
        up: Box::new(|| memcached.borrow_mut().restart()),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed() {
    let Some(redis) = crate::support::redis_server::RedisProcess::start() else {
        return;
    };
    let redis = std::cell::RefCell::new(redis);
    let env = vec![
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", redis.borrow().addr()),
    ];
    outage(Store {
        name: "redis",
        env,
        down: Box::new(|| redis.borrow_mut().kill()),
        up: Box::new(|| redis.borrow_mut().restart()),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_frozen() {
    let Some(pg) = crate::support::postgres_server::Postgres::start() else {
        return;
    };
    let env = vec![
        ("BACKEND_TYPE", "postgres".to_owned()),
        ("POSTGRES_URL", pg.url()),
        ("POSTGRES_SCHEMA", unique("outage").replace('-', "_")),
        ("POSTGRES_TIMEOUT", "200ms".to_owned()),
    ];
    outage(Store {
        name: "postgres",
        env,
        down: Box::new(|| pg.signal_all("STOP")),
        up: Box::new(|| pg.signal_all("CONT")),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_learn_how_many_share_the_store() {
    let Some(memcached) = crate::support::memcached::Memcached::start() else {
        return;
    };
    let env = vec![
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", &memcached.addr()),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect::<Vec<_>>();
    let mut three = replicas(3, &env);
    learn(&three, 3).await;
    let stopped = three.pop().expect("a third replica");
    stopped.stop().expect("stops");
    learn(&three, 2).await;
}

/// A Redis cluster with one master killed: only the keys of that node's slots go local (each
/// replica admits its share of them), the others are counted by the live masters as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_master_killed() {
    let Some(mut cluster) = crate::support::redis_server::RedisCluster::start() else {
        return;
    };
    let env = [
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_TYPE", "cluster".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", cluster.seeds().join(",")),
    ];
    let root = rules_root(
        "domain: o\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n",
    );
    let mut local_env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    local_env.push(("BACKEND_FAILURE_MODE", "local"));
    let pair: Vec<Process> = (0..2).map(|_| Process::start(&root, &local_env)).collect();
    learn(&pair, 2).await;
    let dead = cluster.nodes[0].port;
    cluster.nodes[0].kill();
    let keys: Vec<String> = (0..12).map(|i| unique(&format!("c{i}"))).collect();
    let mut local_keys = Vec::new();
    for key in &keys {
        let mut admitted = 0;
        for _ in 0..3 {
            for p in &pair {
                let code = call(p, key).await;
                assert!(code.is_ok(), "no call fails: {code:?}");
                admitted += u32::from(code == Ok(Code::Ok));
            }
        }
        // Counted by a live master: 3 of 6 (the limit); decided locally: 1 + 1 (3 / 2 each).
        let live = cluster.nodes[1..].iter().any(|n| {
            crate::support::redis_server::count_keys(n.port, &format!("*{key}*")) > Some(0)
        });
        match live {
            true => assert_eq!(admitted, 3, "{key} on a live master: the store's count"),
            false => {
                assert_eq!(admitted, 2, "{key} on the killed master ({dead}): local");
                local_keys.push(key);
            }
        }
    }
    let local = pair
        .iter()
        .map(|p| reading(p, "turnstile_local_decisions_total{").unwrap_or(0))
        .sum::<u64>();
    assert!(
        local > 0 && local < 72,
        "only the killed master's keys go local: {local} of 72"
    );
    cluster.nodes[0].restart();
    let what = "the replicas hand the killed master's keys back";
    until_handed_back(&pair, 3, what).await;
    for key in local_keys {
        let code = call(&pair[0], key).await;
        assert_eq!(
            code,
            Ok(Code::OverLimit),
            "{key}: its 6 hits are in the store"
        );
    }
}
