//! PostgreSQL stopped under load: every call is answered within its caller's deadline with
//! `UNAVAILABLE` naming PostgreSQL, the service keeps running and reports not ready; once
//! PostgreSQL accepts connections again, counting resumes with the counts from before the
//! outage (how soon is printed; RELIABILITY.md has the figures).

use std::time::{Duration, Instant};

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

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
    let client = p.client().await;
    let key = unique("k");
    // Every call with a caller's deadline (five times POSTGRES_TIMEOUT): an answer past it is
    // no answer, and fails the test; how long each took is printed as a figure.
    let call = || {
        let mut client = client.clone();
        let key = key.clone();
        async move {
            let started = Instant::now();
            let call = client.should_rate_limit(req1("plans", &[("api_key", &key)]));
            let answer = tokio::time::timeout(CALLER_DEADLINE, call).await;
            let took = started.elapsed();
            let answer = answer.map(|a| a.map(|a| a.into_inner().statuses[0].limit_remaining));
            (answer, took)
        }
    };
    // While PostgreSQL is down or hung, a call past the deadline fails the test; while it
    // comes back, a late answer is "not counting yet" (the wait for counting goes on).
    let answered = |(answer, _): (Result<_, _>, Duration)| {
        answer.unwrap_or_else(|_| panic!("no answer within {CALLER_DEADLINE:?}"))
    };
    let counted = || async { call().await.0.ok().and_then(Result::ok) };
    for expected in [99, 98, 97] {
        assert_eq!(answered(call().await).expect("counted"), expected);
    }

    pg.ctl(&["stop", "-m", "fast", "-w"]);
    // 16 callers at once, 5 calls each.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let answers = futures_util::future::join_all((0..16).map(|_| call())).await;
        for (answer, took) in answers {
            let status = answered((answer, took)).expect_err("PostgreSQL is down");
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert!(status.message().contains("PostgreSQL"), "{status:?}");
            slowest = slowest.max(took);
        }
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
    let remaining = until_some(Duration::from_secs(10), "counting again", counted).await;
    eprintln!("PostgreSQL back: counting again after {:?}", back.elapsed());
    assert_eq!(remaining, 96, "the counts from before the outage are there");
    assert_eq!(
        answered(call().await)
            .map(|r| (Code::Ok, r))
            .expect("counted"),
        (Code::Ok, 95)
    );

    // A hung database (every process stopped, connections open): the deadline answers.
    pg.signal_all("STOP");
    let answers = futures_util::future::join_all((0..8).map(|_| call())).await;
    pg.signal_all("CONT");
    let mut slowest = Duration::ZERO;
    for (answer, took) in answers {
        let status = answered((answer, took)).expect_err("PostgreSQL is hung");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(
            status
                .message()
                .contains("did not answer within 250ms (POSTGRES_TIMEOUT)"),
            "{status:?}"
        );
        slowest = slowest.max(took);
    }
    eprintln!("PostgreSQL hung: 8 calls, slowest answer {slowest:?} (POSTGRES_TIMEOUT=250ms)");
    let thawed = Instant::now();
    let remaining = until_some(
        Duration::from_secs(10),
        "counting again after the hang",
        counted,
    )
    .await;
    eprintln!(
        "PostgreSQL thawed: counting again after {:?}",
        thawed.elapsed()
    );
    assert!(remaining <= 94, "{remaining:?}");
}
