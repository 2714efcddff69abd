//! The algorithms against their reference models (`models`), on every backend: random
//! sequences of calls (hits 0–3, refunds) and clock steps in milliseconds go through the real
//! limiter over the memory store and over a real memcached, and every answer (code, remaining,
//! reset) must equal the model's. Plus the algorithms end to end over gRPC (`scenarios`) and
//! exactness under concurrency across two processes (`concurrency`).

mod envoy;
mod exactness;
mod local;
mod models;
mod scenarios;
mod stalls;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::limiter::{Code, Descriptor, Entry, Limiter, Request};
use turnstile::storage::CounterStore;
use turnstile::storage::memory::MemoryStore;

use crate::support::redis_server::redis_store_within;
use crate::support::{Memcached, memcached_store, unique};
use models::{Answer, Bucket, Leases, Sliding};
use stalls::{Expiry, Stalls};

/// The rules under test. Concurrency leases live 5 s on memory (the model checks their expiry)
/// and an hour on memcached (whose expiry runs on real time, not the test clock).
fn rules(lease_unit: &str) -> String {
    format!(
        "domain: alg\ndescriptors:\n\
         \x20 - key: sw\n    rate_limit: {{ unit: second, unit_multiplier: 2, requests_per_unit: 5, algorithm: sliding_window }}\n\
         \x20 - key: tb\n    rate_limit: {{ unit: second, unit_multiplier: 2, requests_per_unit: 3, algorithm: token_bucket, burst: 2 }}\n\
         \x20 - key: cc\n    rate_limit: {{ unit: {lease_unit}, requests_per_unit: 3, algorithm: concurrency }}\n"
    )
}

/// One step of a model test: the clock moved on, or one call (its rule's key, one of a few
/// values, hits, and whether it is a refund).
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Advance(u64),
    Call {
        key: &'static str,
        value: u8,
        hits: u64,
        refund: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0u64..2_500).prop_map(Step::Advance),
        3 => (
            prop_oneof![Just("sw"), Just("tb"), Just("cc")],
            0u8..2,
            0u64..4,
            proptest::bool::weighted(0.15)
        )
            .prop_map(|(key, value, hits, refund)| Step::Call { key, value, hits, refund }),
    ]
}

struct Models {
    sliding: Sliding,
    bucket: Bucket,
    leases: Leases,
}

fn request<'a>(key: &'a str, value: &'a str, hits: u64, refund: bool) -> Request<'a> {
    Request {
        domain: "alg".into(),
        descriptors: vec![Descriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            limit_override: None,
            hits,
            refund,
            hits_addend: Some(hits),
        }],
        hits_addend: 0,
    }
}

/// How long a remote store may take to answer here: these tests compare answers, not
/// deadlines, and a loaded machine must not turn a slow answer into a failed case.
const PATIENCE: Duration = Duration::from_secs(20);

/// Drives `steps` through the limiter and the models; the first difference fails the case.
fn run<S: CounterStore>(
    runtime: &tokio::runtime::Runtime,
    limiter: &Limiter<S>,
    clock: &ManualClock,
    expiry: Expiry,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    run_with_share(runtime, limiter, clock, expiry, 1, steps)
}

/// [`run`] for a limiter that decides with a share of 1/`share` of each limit: in the models
/// every hit (and refund) counts `share` times (docs/algorithms.md, "The local mode").
fn run_with_share<S: CounterStore>(
    runtime: &tokio::runtime::Runtime,
    limiter: &Limiter<S>,
    clock: &ManualClock,
    expiry: Expiry,
    share: u64,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    let rules = crate::support::rules(&[("alg.yaml", &rules_for(expiry))], false);
    let mut models = Models {
        sliding: Sliding::new(5, 2_000),
        bucket: Bucket::new(3, 2, 2_000),
        leases: Leases::new(3, expiry.lease_ms()),
    };
    let case = unique("case");
    let mut stalls = Stalls::new(expiry);
    for step in steps {
        stalls.catch_up(clock);
        let (key, value, hits, refund) = match step {
            Step::Advance(ms) => {
                clock.advance_millis(ms);
                continue;
            }
            Step::Call {
                key,
                value,
                hits,
                refund,
            } => (key, value, hits, refund),
        };
        let value = format!("{case}-{value}");
        let now = clock.now().millis();
        let counted = hits * share;
        let want: Answer = match key {
            "sw" => models.sliding.call(&value, now, counted, refund),
            "tb" => models.bucket.call(&value, now, counted, refund),
            _ => models.leases.call(&value, now, counted, refund),
        };
        let verdict = runtime
            .block_on(limiter.check(&rules, &request(key, &value, hits, refund)))
            .map_err(|e| TestCaseError::fail(format!("store: {e}")))?;
        stalls.called();
        let status = &verdict.statuses[0];
        let got = Answer {
            over: status.code == Code::OverLimit,
            remaining: u64::from(status.remaining),
            reset_ms: status.reset_in.map_or(u64::MAX, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            }),
        };
        if got != want {
            return Err(stalls.difference(format!(
                "{key} {value} hits {hits} refund {refund} at {now}: got {got:?}, the model says {want:?}"
            )));
        }
    }
    Ok(())
}

fn rules_for(expiry: Expiry) -> String {
    match expiry {
        Expiry::TestClock => rules("second, unit_multiplier: 5"),
        Expiry::RealTime => rules("hour"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    #[test]
    fn every_algorithm_matches_its_model_on_memory(steps in proptest::collection::vec(step(), 1..80)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::new(100_000, Arc::new(clock.clone()));
        let limiter = Limiter::new(store, Arc::new(clock.clone()), Default::default());
        run(&runtime, &limiter, &clock, Expiry::TestClock, steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn every_algorithm_matches_its_model_on_memcached(steps in proptest::collection::vec(step(), 1..60)) {
        let Some(memcached) = shared_memcached() else { return Ok(()) };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        // memcached expires on real time: the test clock starts at the real present.
        let clock = ManualClock::new(SystemClock.now_secs());
        let store = runtime.block_on(async { memcached_store(&[memcached], &clock, PATIENCE) });
        let limiter = Limiter::new(store, Arc::new(clock.clone()), Default::default());
        run(&runtime, &limiter, &clock, Expiry::RealTime, steps)?;
    }
}

/// One memcached for every case of the property test (each case uses keys of its own).
fn shared_memcached() -> Option<&'static Memcached> {
    static SHARED: std::sync::OnceLock<Option<Memcached>> = std::sync::OnceLock::new();
    SHARED.get_or_init(Memcached::start).as_ref()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// The sliding window's worst case (docs/algorithms.md): in any period of length P ending at
    /// an admitted hit at e into its window, at most L + ⌊L·e/P⌋ hits were admitted (< 2L).
    #[test]
    fn sliding_window_stays_within_its_stated_bound(gaps in proptest::collection::vec(0u64..400, 1..300)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::new(100_000, Arc::new(clock.clone()));
        let limiter = Limiter::new(store, Arc::new(clock.clone()), Default::default());
        let rules = crate::support::rules(&[("alg.yaml", &rules_for(Expiry::TestClock))], false);
        let (limit, period) = (5u64, 2_000u64);
        let mut admitted: Vec<u64> = Vec::new();
        for gap in gaps {
            clock.advance_millis(gap);
            let verdict = runtime
                .block_on(limiter.check(&rules, &request("sw", "bound", 1, false)))
                .expect("memory store");
            if verdict.statuses[0].code == Code::Ok {
                let t = clock.now().millis();
                admitted.push(t);
                let in_period = admitted.iter().filter(|&&a| a + period > t).count() as u64;
                let e = t % period;
                prop_assert!(in_period <= limit + limit * e / period, "{in_period} admitted in the period ending {t}");
            }
        }
    }
}

/// The same comparison on Redis (one server, and a 3-master cluster), each case on keys of its
/// own; the Redis processes live for the whole run and are stopped at its end.
fn models_on_redis(target: turnstile::storage::redis::RedisTarget, cases: u32) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let result = runner.run(&proptest::collection::vec(step(), 1..60), |steps| {
        // Redis expires on real time: the test clock starts at the real present.
        let clock = ManualClock::new(SystemClock.now_secs());
        let store =
            runtime.block_on(async { redis_store_within(target.clone(), &clock, PATIENCE) });
        let limiter = Limiter::new(store, Arc::new(clock.clone()), Default::default());
        run(&runtime, &limiter, &clock, Expiry::RealTime, steps)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn every_algorithm_matches_its_model_on_redis() {
    let Some(redis) = crate::support::redis_server::RedisProcess::start() else {
        return;
    };
    models_on_redis(
        turnstile::storage::redis::RedisTarget::Tcp(redis.addr()),
        40,
    );
}

#[test]
fn every_algorithm_matches_its_model_on_a_redis_cluster() {
    let Some(cluster) = crate::support::redis_server::RedisCluster::start() else {
        return;
    };
    models_on_redis(
        turnstile::storage::redis::RedisTarget::Cluster(cluster.seeds()),
        20,
    );
}

#[test]
fn every_algorithm_matches_its_model_through_sentinel() {
    let Some(set) = crate::support::redis_server::RedisSentinel::start() else {
        return;
    };
    models_on_redis(set.target(), 20);
}

/// The same comparison on PostgreSQL. Turnstile's clock decides there (expiry included), so
/// the test clock starts where the memory store's does and leases expire on it.
#[test]
fn every_algorithm_matches_its_model_on_postgres() {
    let Some(pg) = crate::support::postgres_server::Postgres::start() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(40));
    let result = runner.run(&proptest::collection::vec(step(), 1..60), |steps| {
        let clock = ManualClock::new(1_000_000);
        let shared: Arc<dyn turnstile::clock::Clock> = Arc::new(clock.clone());
        let (store, _schema) = pg.store(&shared);
        let limiter = Limiter::new(store, shared, Default::default());
        run(&runtime, &limiter, &clock, Expiry::TestClock, steps)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
