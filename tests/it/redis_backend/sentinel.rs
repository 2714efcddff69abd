//! Sentinel failover under a running service.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::support::redis_server::redis_store;
use crate::support::{Options, req1, start_with};

use super::RULES;

/// A caller's deadline: Turnstile's `REDIS_TIMEOUT` (2 s) and a margin.
const CALLER_DEADLINE: Duration = Duration::from_millis(2_500);

/// One caller's calls: (ms since the test started, answered OK, latency in ms) each.
type CallLog = Vec<(u128, bool, u128)>;

/// Caller `i`: calls until `stop`, counting its answers in `answered[i]`; every call must be
/// answered within [`CALLER_DEADLINE`], and every failure must be `UNAVAILABLE` (and is
/// followed by a 20 ms pause, as a client backs off).
async fn keep_calling(
    mut client: RateLimitServiceClient<Channel>,
    i: usize,
    started: Instant,
    stop: Arc<AtomicBool>,
    answered: Arc<Vec<AtomicU64>>,
) -> CallLog {
    let mut log = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let call = client.should_rate_limit(req1("cut", &[("user", &format!("load{i}"))]));
        // A caller's deadline: every call answered, OK or UNAVAILABLE, within it.
        let result = tokio::time::timeout(CALLER_DEADLINE, call)
            .await
            .unwrap_or_else(|_| panic!("caller {i}: no answer within {CALLER_DEADLINE:?}"));
        let latency = t.elapsed().as_millis();
        match result {
            Ok(_) => {
                log.push((started.elapsed().as_millis(), true, latency));
                answered[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
                log.push((started.elapsed().as_millis(), false, latency));
                tokio::time::sleep(Duration::from_millis(20)).await; // pacing: a caller's retry
            }
        }
    }
    log
}

/// What the callers saw between the kill and the first answer after it, and after that.
struct Outcome {
    /// Calls made between the kill and the recovery, the failed ones, and the slowest (ms).
    during: usize,
    errors: usize,
    slowest: u128,
    /// Calls answered after the recovery, and errors after a caller's first answer there.
    after_ok: usize,
    after_err: usize,
    /// Callers answered after the recovery.
    callers_back: usize,
}

impl Outcome {
    fn of(per_caller: &[CallLog], killed_at: u128, recovered_at: u128) -> Outcome {
        let logs: Vec<_> = per_caller.iter().flatten().copied().collect();
        let during: Vec<_> = logs
            .iter()
            .filter(|(t, _, _)| *t >= killed_at && *t <= recovered_at)
            .collect();
        // Once a caller has been answered after the failover, no error follows for it.
        let after_err = per_caller
            .iter()
            .map(|log| {
                log.iter()
                    .skip_while(|(t, ok, _)| *t <= recovered_at || !ok)
                    .filter(|(_, ok, _)| !ok)
                    .count()
            })
            .sum();
        Outcome {
            during: during.len(),
            errors: during.iter().filter(|(_, ok, _)| !ok).count(),
            slowest: during.iter().map(|(_, _, l)| *l).max().unwrap_or(0),
            after_ok: logs
                .iter()
                .filter(|(t, ok, _)| *t > recovered_at && *ok)
                .count(),
            after_err,
            callers_back: per_caller
                .iter()
                .filter(|log| log.iter().any(|(t, ok, _)| *t > recovered_at && *ok))
                .count(),
        }
    }
}

/// Waits until every caller has been answered `more` times than now (`answered` counts each
/// caller's answers), failing with `what` after 20 s.
async fn each_answered_more(answered: &[AtomicU64], more: u64, what: &str) {
    let so_far = || answered.iter().map(|n| n.load(Ordering::Relaxed));
    let since: Vec<u64> = so_far().collect();
    crate::support::until(Duration::from_secs(20), what, || {
        so_far().zip(&since).all(|(now, then)| now >= then + more)
    })
    .await;
}

/// Failover under load: 8 callers keep calling while the master behind Sentinel is killed.
/// Every answer in the meantime is a timely UNAVAILABLE (never a hang, never a crash), counting
/// resumes on the promoted replica without a restart, and no READONLY sticks afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    use crate::support::redis_server::RedisSentinel;
    let Some(mut set) = RedisSentinel::start() else {
        return;
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store(set.target(), &clock);
    let s = start_with(store, clock, &[("cut.yaml", RULES)], Options::default()).await;
    let stop = Arc::new(AtomicBool::new(false));
    // Answers counted so far, per caller: the test moves on when calls were answered, not
    // after a fixed time.
    let answered: Arc<Vec<AtomicU64>> = Arc::new((0..8).map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let callers: Vec<_> = (0..8)
        .map(|i| {
            let (client, stop) = (s.client.clone(), Arc::clone(&stop));
            tokio::spawn(keep_calling(
                client,
                i,
                started,
                stop,
                Arc::clone(&answered),
            ))
        })
        .collect();
    // Under load first: every caller has been answered a few times.
    each_answered_more(&answered, 5, "every caller answered before the kill").await;
    let killed_at = started.elapsed().as_millis();
    set.master.kill();
    // Until every caller has succeeded again after the kill (or 30 s).
    let probe = req1("cut", &[("user", "probe")]);
    let recovered_at =
        crate::support::wait::until_some(Duration::from_secs(30), "a new master", || async {
            s.try_call(probe.clone())
                .await
                .is_ok()
                .then(|| started.elapsed().as_millis())
        })
        .await;
    // Load after the failover too: every caller answered a few times more.
    each_answered_more(&answered, 5, "every caller answered after the failover").await;
    stop.store(true, Ordering::Relaxed);
    let mut per_caller = Vec::new();
    for caller in callers {
        per_caller.push(caller.await.expect("caller"));
    }
    let Outcome {
        during,
        errors,
        slowest,
        after_ok,
        after_err,
        callers_back,
    } = Outcome::of(&per_caller, killed_at, recovered_at);
    eprintln!(
        "sentinel failover under load: master killed at {killed_at} ms, counting again at {recovered_at} ms \
         ({} ms), {during} calls meanwhile ({errors} UNAVAILABLE), slowest answer {slowest} ms, \
         after: {after_ok} OK, {after_err} errors",
        recovered_at - killed_at,
    );
    assert!(
        callers_back == 8 && after_err == 0,
        "every caller answered after the failover ({callers_back} of 8), and no READONLY or \
         error after that ({after_err})"
    );
}
