//! Sentinel failover under a running service.

use std::sync::Arc;

use turnstile::clock::{Clock, ManualClock, SystemClock};

use crate::redis_support::redis_store;
use crate::support::{Options, req1, start_with};

use super::RULES;

/// Failover under load: 8 callers keep calling while the master behind Sentinel is killed.
/// Every answer in the meantime is a timely UNAVAILABLE (never a hang, never a crash), counting
/// resumes on the promoted replica without a restart, and no READONLY sticks afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    use crate::redis_support::RedisSentinel;
    use std::time::{Duration, Instant};
    let Some(mut set) = RedisSentinel::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now());
    let store = redis_store(set.target(), &clock);
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
