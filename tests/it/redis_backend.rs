//! The Redis backend as a service: a cut-over from envoyproxy/ratelimit on one Redis, starting
//! without Redis, and Redis dying and coming back under a running service.
//!
//! A cut-over: with the default key layout Turnstile
//! counts fixed-window hits in the reference's key (`domain_key_value_<window start>`, the value
//! an INCRBY'd decimal, a TTL on every key), so hits counted by the reference (replayed here
//! with the commands it sends: INCRBY then EXPIRE) and by Turnstile are one count.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::limiter::{KeyLayout, LimiterSettings};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::storage::redis::RedisTarget;

use crate::redis_support::{RedisProcess, cli, redis_store};
use crate::support::{Options, req1, start_with, unique};

const RULES: &str = "domain: cut\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_and_turnstile_share_one_count() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let options = Options::from(LimiterSettings {
        key_prefix: "rl_".into(),
        key_layout: KeyLayout::Reference,
        ..Default::default()
    });
    let s = start_with(store, clock.clone(), &[("cut.yaml", RULES)], options).await;
    let user = unique("u");
    let request = req1("cut", &[("user", &user)]);
    assert_eq!(s.call(request.clone()).await.statuses[0].limit_remaining, 4);

    // The reference's key for this window, and the reference's own commands for 3 more hits.
    let now = clock.now();
    let key = format!("rl_cut_user_{user}_{}", now - now % 60);
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("1".into())
    );
    let ttl: i64 = cli(redis.port, &["TTL", &key])
        .and_then(|t| t.trim().parse().ok())
        .expect("ttl");
    assert!(
        ttl > 0 && ttl <= 61,
        "the counter has its window's TTL: {ttl}"
    );
    cli(redis.port, &["INCRBY", &key, "3"]).expect("incrby");
    cli(redis.port, &["EXPIRE", &key, "60"]).expect("expire");

    let response = s.call(request.clone()).await;
    assert_eq!(
        response.statuses[0].limit_remaining, 0,
        "1 + 3 by the reference + this one = 5"
    );
    assert_eq!(s.call(request).await.overall_code(), Code::OverLimit);
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("6".into())
    );
}

/// Redis absent at start: the service starts anyway (no crash loop), reports not ready and
/// answers UNAVAILABLE naming Redis; once Redis appears it connects, turns ready and counts,
/// without a restart.
#[test]
fn starts_without_redis_and_connects_when_it_appears() {
    use crate::process::{Process, http_get, rules_root};
    let port = crate::support::free_port();
    let url = format!("127.0.0.1:{port}");
    let root = rules_root(RULES);
    let env = [
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_TIMEOUT", "200ms"),
    ];
    let p = Process::spawn(&root, &env);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let call = || {
        runtime.block_on(async {
            crate::support::connect(p.grpc)
                .await
                .should_rate_limit(req1("cut", &[("user", "early")]))
                .await
        })
    };
    let refused = call().expect_err("no Redis yet");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("redis"), "{}", refused.message());
    let status = http_get(p.http, "/healthcheck").map(|r| r.0);
    assert_ne!(status, Some(200), "not ready without Redis");

    let _redis = RedisProcess::start_on(port).expect("redis-server");
    crate::wait::blocking(
        std::time::Duration::from_secs(20),
        "ready once Redis is up",
        || http_get(p.http, "/healthcheck").map(|r| r.0) == Some(200),
    );
    let answered = call().expect("answered once Redis is up").into_inner();
    assert_eq!(answered.statuses[0].limit_remaining, 4);
    drop(runtime);
    p.stop().expect("stops cleanly");
}

/// Redis killed under a running service: calls fail with UNAVAILABLE naming Redis (never an OK
/// that was not counted), readiness drops, and when Redis is back on its address the same
/// service counts again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_redis_dying_and_coming_back() {
    let Some(mut redis) = RedisProcess::start() else {
        return;
    };
    let port = redis.port;
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let request = req1("cut", &[("user", &unique("fault"))]);
    assert_eq!(s.call(request.clone()).await.statuses[0].limit_remaining, 4);
    redis.kill();
    let refused = s
        .try_call(request.clone())
        .await
        .expect_err("Redis is down");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(refused.message().contains("redis"), "{}", refused.message());
    let _back = RedisProcess::start_on(port).expect("redis-server again");
    let answered = crate::wait::until_some(
        std::time::Duration::from_secs(20),
        "recovery once Redis is back",
        || async {
            match s.try_call(request.clone()).await {
                Ok(response) => Some(response),
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                    None
                }
            }
        },
    )
    .await;
    // A fresh Redis (no persistence here): the count starts again, and goes on.
    assert_eq!(answered.statuses[0].limit_remaining, 4);
    assert_eq!(s.call(request).await.statuses[0].limit_remaining, 3);
}

/// Failover under load: 8 callers keep calling while the master behind Sentinel is killed.
/// Every answer in the meantime is a timely UNAVAILABLE (never a hang, never a crash), counting
/// resumes on the promoted replica without a restart, and no READONLY sticks afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    use crate::redis_support::{RedisSentinel, SENTINEL_MASTER};
    use std::time::{Duration, Instant};
    let Some(mut set) = RedisSentinel::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let target = RedisTarget::Sentinel {
        master: SENTINEL_MASTER.into(),
        sentinels: vec![set.sentinel.addr()],
        sentinel_auth: None,
    };
    let store = redis_store(target, &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Answers counted so far, per caller: the test moves on when calls were answered, not
    // after a fixed time.
    let answered: Arc<Vec<std::sync::atomic::AtomicU64>> = Arc::new(
        (0..8)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect(),
    );
    let answered_so_far = || -> Vec<u64> {
        answered
            .iter()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    };
    // Every caller answered at least `more` times since `since`.
    let each_answered = |since: &[u64], more: u64| {
        answered_so_far()
            .iter()
            .zip(since)
            .all(|(now, then)| *now >= then + more)
    };
    let started = Instant::now();
    let mut callers = Vec::new();
    for i in 0..8 {
        let (mut client, stop) = (s.client.clone(), Arc::clone(&stop));
        let answered = Arc::clone(&answered);
        callers.push(tokio::spawn(async move {
            // (ms since start, ok, latency ms)
            let mut log = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let result = client
                    .should_rate_limit(req1("cut", &[("user", &format!("load{i}"))]))
                    .await;
                let latency = t.elapsed().as_millis();
                match result {
                    Ok(_) => {
                        log.push((started.elapsed().as_millis(), true, latency));
                        answered[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => {
                        assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                        log.push((started.elapsed().as_millis(), false, latency));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            log
        }));
    }
    // Under load first: every caller has been answered a few times.
    let none = vec![0; 8];
    crate::support::until(
        Duration::from_secs(20),
        "every caller answered before the kill",
        || each_answered(&none, 5),
    )
    .await;
    let killed_at = started.elapsed().as_millis();
    set.master.kill();
    // Until every caller has succeeded again after the kill (or 30 s).
    let probe = req1("cut", &[("user", "probe")]);
    let recovered_at = crate::wait::until_some(Duration::from_secs(30), "a new master", || async {
        s.try_call(probe.clone())
            .await
            .is_ok()
            .then(|| started.elapsed().as_millis())
    })
    .await;
    // Load after the failover too: every caller answered a few times more.
    let at_recovery = answered_so_far();
    crate::support::until(
        Duration::from_secs(20),
        "every caller answered after the failover",
        || each_answered(&at_recovery, 5),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut per_caller = Vec::new();
    for caller in callers {
        per_caller.push(caller.await.expect("caller"));
    }
    let logs: Vec<_> = per_caller.iter().flatten().copied().collect();
    let during: Vec<_> = logs
        .iter()
        .filter(|(t, _, _)| *t >= killed_at && *t <= recovered_at)
        .collect();
    let errors = during.iter().filter(|(_, ok, _)| !ok).count();
    let slowest = during.iter().map(|(_, _, l)| *l).max().unwrap_or(0);
    let after_ok = logs
        .iter()
        .filter(|(t, ok, _)| *t > recovered_at && *ok)
        .count();
    // Once a caller has been answered after the failover, no error follows for it.
    let after_err: usize = per_caller
        .iter()
        .map(|log| {
            log.iter()
                .skip_while(|(t, ok, _)| *t <= recovered_at || !ok)
                .filter(|(_, ok, _)| !ok)
                .count()
        })
        .sum();
    let callers_back = per_caller
        .iter()
        .filter(|log| log.iter().any(|(t, ok, _)| *t > recovered_at && *ok))
        .count();
    eprintln!(
        "sentinel failover under load: master killed at {killed_at} ms, counting again at {recovered_at} ms \
         ({} ms), {} calls meanwhile ({errors} UNAVAILABLE), slowest answer {slowest} ms, \
         after: {after_ok} OK, {after_err} errors",
        recovered_at - killed_at,
        during.len()
    );
    assert!(
        slowest < 2_500,
        "answers stayed timely (REDIS_TIMEOUT 2 s): {slowest} ms"
    );
    assert!(
        callers_back == 8 && after_err == 0,
        "every caller answered after the failover ({callers_back} of 8), and no READONLY or \
         error after that ({after_err})"
    );
}

/// A cluster node killed and restarted under load: keys on the other nodes keep counting,
/// keys on the dead node get timely UNAVAILABLE, and once the node is back (it rejoins with its
/// `nodes.conf`) every key counts again, without a restart of Turnstile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_node_killed_and_restarted() {
    use crate::redis_support::RedisCluster;
    use std::time::{Duration, Instant};
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(RedisTarget::Cluster(cluster.seeds()), &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let users: Vec<String> = (0..24).map(|i| unique(&format!("node{i}"))).collect();
    for user in &users {
        s.call(req1("cut", &[("user", user)])).await;
    }
    let killed = Instant::now();
    cluster.nodes[1].kill();
    let (mut ok, mut unavailable, mut slowest) = (0, 0, Duration::ZERO);
    for user in &users {
        let t = Instant::now();
        match s.try_call(req1("cut", &[("user", user)])).await {
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
    crate::wait::until_some(
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
    assert!(
        slowest < Duration::from_millis(2_500),
        "timely: {slowest:?}"
    );
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` on Redis, the reference's scenario: once
/// `key3` (10 an hour) would go over, only `key3` is incremented, so `key2` (20 a minute) in the
/// same request stays at 10 remaining. `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_when_over_limit_spares_the_other_descriptors() {
    use crate::process::{Process, rules_root};
    use crate::support::{desc, req};
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let root = rules_root(
        "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: { unit: minute, requests_per_unit: 20 }\n  - key: key3\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    );
    let url = redis.addr();
    let p = Process::start(
        &root,
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", url.as_str()),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
        ],
    );
    let mut client = p.client().await;
    let value = unique("r2");
    for i in 0..15u32 {
        let call = req(
            "another",
            vec![desc(&[("key2", &value)]), desc(&[("key3", &value)])],
        );
        let r = client
            .should_rate_limit(call)
            .await
            .expect("answer")
            .into_inner();
        let (key2, key3) = (&r.statuses[0], &r.statuses[1]);
        assert_eq!(key2.code, Code::Ok as i32, "call {i}");
        assert_eq!(
            key2.limit_remaining,
            if i < 10 { 19 - i } else { 10 },
            "call {i}"
        );
        if i < 10 {
            assert_eq!((key3.code, key3.limit_remaining), (Code::Ok as i32, 9 - i));
        } else {
            assert_eq!(
                (key3.code, key3.limit_remaining),
                (Code::OverLimit as i32, 0)
            );
            assert_eq!(r.overall_code, Code::OverLimit as i32);
        }
    }
    // The frozen counter holds 10 hits in Redis: key2 was not incremented past the stop.
    let keys = cli(redis.port, &["KEYS", &format!("another_key2_{value}_*")]).expect("keys");
    let key = keys
        .lines()
        .next()
        .expect("the key2 counter")
        .trim()
        .to_owned();
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("10".into())
    );
}

/// With the local over-limit cache as well: once `key3` is over and cached, a request that the
/// cache refuses increments nothing at all, so `key2` stays where the stop left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_with_the_local_cache_increments_nothing() {
    use crate::support::{desc, req};
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = ManualClock::new(crate::support::T0);
    let rules = "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: { unit: minute, requests_per_unit: 20 }\n  - key: key3\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    let options = Options {
        limiter: LimiterSettings {
            key_layout: KeyLayout::Reference,
            local_cache_bytes: 1_000_000,
            stop_increment_when_over_limit: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    let s = start_with(store, clock, &[("another.yaml", rules)], options).await;
    let value = unique("r3");
    let call = || {
        req(
            "another",
            vec![desc(&[("key2", &value)]), desc(&[("key3", &value)])],
        )
    };
    let remaining: Vec<(u32, u32)> = {
        let mut out = Vec::new();
        for _ in 0..5 {
            let r = s.call(call()).await;
            out.push((r.statuses[0].limit_remaining, r.statuses[1].limit_remaining));
        }
        out
    };
    // Two fit; the third takes key3 over (and into the local cache) while key2 is only read;
    // afterwards the cache refuses key3 and key2 is read, never incremented.
    assert_eq!(remaining, vec![(19, 1), (18, 0), (18, 0), (18, 0), (18, 0)]);
    let keys = cli(redis.port, &["KEYS", &format!("another_key3_{value}_*")]).expect("keys");
    let key = keys
        .lines()
        .next()
        .expect("the key3 counter")
        .trim()
        .to_owned();
    assert_eq!(
        cli(redis.port, &["GET", &key]).map(|v| v.trim().to_owned()),
        Some("3".into()),
        "key3 counted up to the hit that took it over, then the cache answered"
    );
}

/// `REDIS_PERSECOND=true`: SECOND limits count in the second Redis, the others in the main one,
/// from one request; readiness needs both.
#[test]
fn per_second_limits_count_in_the_second_redis() {
    use crate::process::{Process, http_get, rules_root};
    let (Some(main), Some(mut second)) = (RedisProcess::start(), RedisProcess::start()) else {
        return;
    };
    let root = rules_root(
        "domain: split\ndescriptors:\n  - key: burst\n    rate_limit: { unit: second, requests_per_unit: 100 }\n  - key: daily\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n",
    );
    let (main_url, second_url) = (main.addr(), second.addr());
    let mut env = crate::redis_support::per_second_env(&main_url, &second_url);
    env.extend([
        ("REDIS_TIMEOUT", "300ms"),
        ("REDIS_PERSECOND_TIMEOUT", "300ms"),
    ]);
    let p = Process::start(&root, &env);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let value = unique("v");
    let answer = runtime.block_on(async {
        let call = crate::support::req(
            "split",
            vec![
                crate::support::desc(&[("burst", &value)]),
                crate::support::desc(&[("daily", &value)]),
            ],
        );
        p.client().await.should_rate_limit(call).await
    });
    let answer = answer.expect("answer").into_inner();
    assert_eq!(
        (
            answer.statuses[0].limit_remaining,
            answer.statuses[1].limit_remaining
        ),
        (99, 99)
    );
    let keys = |port: u16, key: &str| {
        cli(port, &["KEYS", &format!("split_{key}_{value}_*")])
            .map(|k| k.lines().filter(|l| !l.trim().is_empty()).count())
    };
    assert_eq!(
        keys(second.port, "burst"),
        Some(1),
        "the SECOND counter is in the second Redis"
    );
    assert_eq!(keys(main.port, "burst"), Some(0));
    assert_eq!(
        keys(main.port, "daily"),
        Some(1),
        "the MINUTE counter is in the main Redis"
    );
    assert_eq!(keys(second.port, "daily"), Some(0));
    // Readiness needs both: without the per-second Redis the service is not ready.
    second.kill();
    crate::envoy_e2e::wait_for("not ready without the per-second Redis", || {
        http_get(p.http, "/healthcheck").map(|r| r.0) != Some(200)
    });
}

/// A slot moves between cluster masters under load (the steps `redis-cli --cluster reshard`
/// takes: IMPORTING / MIGRATING, MIGRATE of its keys, then SETSLOT NODE), so calls meet ASK
/// while it migrates and MOVED after: every call is answered OK and the count stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slot_migration_under_load_loses_nothing() {
    use crate::redis_support::RedisCluster;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let now = SystemClock.now();
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
    let ids: Vec<String> = (0..3)
        .map(|i| {
            cli(port(i), &["CLUSTER", "MYID"])
                .expect("id")
                .trim()
                .to_owned()
        })
        .collect();
    let owns = |i: usize| {
        cli(port(i), &["CLUSTER", "COUNTKEYSINSLOT", &slot]).is_some()
            && cli(port(i), &["CLUSTER", "NODES"]).is_some_and(|nodes| {
                nodes.lines().any(|l| {
                    l.contains("myself")
                        && l.split_whitespace().skip(8).any(|range| {
                            let n: u32 = slot.parse().unwrap_or(u32::MAX);
                            match range.split_once('-') {
                                Some((a, b)) => {
                                    a.parse().is_ok_and(|a: u32| a <= n)
                                        && b.parse().is_ok_and(|b: u32| n <= b)
                                }
                                None => range.parse() == Ok(n),
                            }
                        })
                })
            })
    };
    let from = (0..3).find(|&i| owns(i)).expect("an owner");
    let to = (from + 1) % 3;
    let (ok, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let load = {
        let (s, ok, stop, user) = (
            Arc::clone(&s),
            Arc::clone(&ok),
            Arc::clone(&stop),
            user.clone(),
        );
        tokio::spawn(async move {
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
        })
    };
    // Each step waits for 20 more answered calls, so calls meet every state of the slot.
    let calls_pass = |n: u64| {
        let ok = Arc::clone(&ok);
        async move {
            let target = ok.load(Ordering::Relaxed) + n;
            crate::support::until(Duration::from_secs(20), "calls go on", || {
                ok.load(Ordering::Relaxed) >= target
            })
            .await;
        }
    };
    calls_pass(20).await;
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
    calls_pass(20).await;
    let keys = cli(port(from), &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).expect("keys");
    for k in keys.lines().map(str::trim).filter(|k| !k.is_empty()) {
        let target_port = port(to).to_string();
        cli(
            port(from),
            &["MIGRATE", "127.0.0.1", &target_port, k, "0", "5000"],
        )
        .expect("migrate");
    }
    calls_pass(20).await;
    // The slot is given to the destination first, then the source, then the third node, as
    // Redis's own resharding does: an importing node answers a command without ASKING with a
    // MOVED back to the source, so a source told first would send every call to the destination
    // and the destination back to it (the cluster itself answers nothing for that slot until
    // the destination is told; no client can follow it).
    let third = 3 - from - to;
    for i in [to, from, third] {
        cli(port(i), &["CLUSTER", "SETSLOT", &slot, "NODE", &ids[to]]).expect("node");
    }
    calls_pass(50).await;
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
