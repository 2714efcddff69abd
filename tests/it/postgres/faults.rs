//! PostgreSQL stopped under load: every call is answered within its caller's deadline with
//! `UNAVAILABLE` naming PostgreSQL, the service keeps running and reports not ready; once
//! PostgreSQL accepts connections again, counting resumes with the counts from before the
//! outage (how soon is printed; RELIABILITY.md has the figures).

use std::time::{Duration, Instant};

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::{Process, http_get, rules_root};
use crate::support::postgres_server::Postgres;
use crate::support::wait::until_some;
use crate::support::{req1, unique, until};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: month, requests_per_unit: 100 }
";

/// The deadline the test's callers give each call: five times `POSTGRES_TIMEOUT`.
const CALLER_DEADLINE: Duration = Duration::from_millis(1_250);

/// What one call got (its remaining budget, or the error) and how long it took.
type Answer = (
    Result<Result<u32, tonic::Status>, tokio::time::error::Elapsed>,
    Duration,
);

/// Calls on one key, each with the caller's deadline ([`CALLER_DEADLINE`]).
#[derive(Clone)]
struct Caller {
    client: RateLimitServiceClient<tonic::transport::Channel>,
    key: String,
}

impl Caller {
    /// One call: an answer past the deadline is no answer; how long it took is a figure.
    async fn call(&self) -> Answer {
        let mut client = self.client.clone();
        let started = Instant::now();
        let call = client.should_rate_limit(req1("plans", &[("api_key", &self.key)]));
        let answer = tokio::time::timeout(CALLER_DEADLINE, call).await;
        let took = started.elapsed();
        let answer = answer.map(|a| a.map(|a| a.into_inner().statuses[0].limit_remaining));
        (answer, took)
    }

    /// The remaining budget once the store counts again (`None`: not yet).
    async fn counted(&self) -> Option<u32> {
        self.call().await.0.ok().and_then(Result::ok)
    }
}

/// An answer within the caller's deadline, or the test fails.
fn answered((answer, _): Answer) -> Result<u32, tonic::Status> {
    answer.unwrap_or_else(|_| panic!("no answer within {CALLER_DEADLINE:?}"))
}

/// `calls` calls at once.
async fn at_once(caller: &Caller, calls: usize) -> Vec<Answer> {
    futures_util::future::join_all((0..calls).map(|_| caller.call())).await
}

/// Every answer is `UNAVAILABLE` with a message containing `says`; the slowest.
fn all_unavailable(answers: Vec<Answer>, says: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    for (answer, took) in answers {
        let status = answered((answer, took)).expect_err("PostgreSQL is not answering");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(status.message().contains(says), "{status:?}");
        slowest = slowest.max(took);
    }
    slowest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_under_load_then_back() {
    let Some(pg) = Postgres::start() else { return };
    let schema = unique("fault").replace('-', "_");
    let url = pg.url();
    let p = Process::start(
        &rules_root(RULES),
        &[
            ("BACKEND_TYPE", "postgres"),
            ("POSTGRES_URL", &url),
            ("POSTGRES_SCHEMA", &schema),
            ("POSTGRES_TIMEOUT", "250ms"),
        ],
    );
    let caller = Caller {
        client: p.client().await,
        key: unique("k"),
    };
    for expected in [99, 98, 97] {
        assert_eq!(answered(caller.call().await).expect("counted"), expected);
    }
    stopped_then_started(&pg, &p, &caller).await;
    hung_then_thawed(&pg, &caller).await;
}

/// Stopped: 16 callers x 5 calls answered at once, not ready; started: counting again with
/// the counts from before.
async fn stopped_then_started(pg: &Postgres, p: &Process, caller: &Caller) {
    pg.ctl(&["stop", "-m", "fast", "-w"]);
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        slowest = slowest.max(all_unavailable(at_once(caller, 16).await, "PostgreSQL"));
    }
    eprintln!(
        "PostgreSQL down: 80 calls from 16 callers, slowest answer {slowest:?} (POSTGRES_TIMEOUT=250ms)"
    );
    until(
        Duration::from_secs(5),
        "not ready while PostgreSQL is down",
        || http_get(p.http, "/healthcheck").is_some_and(|r| r.0 == 500),
    )
    .await;
    pg.ctl(&["start", "-w", "-t", "30"]);
    let back = Instant::now();
    let remaining = until_some(Duration::from_secs(10), "counting again", || {
        caller.counted()
    })
    .await;
    eprintln!("PostgreSQL back: counting again after {:?}", back.elapsed());
    assert_eq!(remaining, 96, "the counts from before the outage are there");
    assert_eq!(
        answered(caller.call().await)
            .map(|r| (Code::Ok, r))
            .expect("counted"),
        (Code::Ok, 95)
    );
}

/// A hung database (every process stopped, connections open): the deadline answers; thawed,
/// it counts again.
async fn hung_then_thawed(pg: &Postgres, caller: &Caller) {
    pg.signal_all("STOP");
    let answers = at_once(caller, 8).await;
    pg.signal_all("CONT");
    let slowest = all_unavailable(answers, "did not answer within 250ms (POSTGRES_TIMEOUT)");
    eprintln!("PostgreSQL hung: 8 calls, slowest answer {slowest:?} (POSTGRES_TIMEOUT=250ms)");
    let thawed = Instant::now();
    let remaining = until_some(
        Duration::from_secs(10),
        "counting again after the hang",
        || caller.counted(),
    )
    .await;
    eprintln!(
        "PostgreSQL thawed: counting again after {:?}",
        thawed.elapsed()
    );
    assert!(remaining <= 94, "{remaining:?}");
}
