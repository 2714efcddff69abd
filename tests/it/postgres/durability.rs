//! Durability, the point of PostgreSQL: a monthly plan quota half used, then Turnstile killed
//! (SIGKILL: nothing flushed) and PostgreSQL restarted in immediate mode (a crash: only what was
//! committed survives): the remaining count is exactly what it was.

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::lifecycle::Binary;
use crate::support::postgres_server::Postgres;
use crate::support::{connect, req1, unique};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: month, requests_per_unit: 10 }
";

/// Calls until `n` answers are in; their remaining counts.
async fn remaining(grpc: u16, key: &str, n: usize) -> Vec<(Code, u32)> {
    let mut client = connect(grpc).await;
    let mut out = Vec::new();
    for _ in 0..n {
        let answer = client
            .should_rate_limit(req1("plans", &[("api_key", key)]))
            .await
            .expect("answered")
            .into_inner();
        out.push((answer.overall_code(), answer.statuses[0].limit_remaining));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monthly_quota_survives_a_killed_service_and_a_crashed_database() {
    let Some(pg) = Postgres::start() else { return };
    let schema = unique("dur").replace('-', "_");
    let url = pg.url();
    let env = [
        ("BACKEND_TYPE", "postgres"),
        ("POSTGRES_URL", url.as_str()),
        ("POSTGRES_SCHEMA", schema.as_str()),
    ];
    let key = unique("customer");
    let first = Binary::start_with(RULES, &env);
    let used = remaining(first.grpc(), &key, 5).await;
    assert_eq!(used.last(), Some(&(Code::Ok, 5)), "{used:?}");
    first.kill();

    pg.ctl(&["restart", "-m", "immediate", "-w", "-t", "30"]);

    let second = Binary::start_with(RULES, &env);
    let after = remaining(second.grpc(), &key, 6).await;
    assert_eq!(
        after,
        vec![
            (Code::Ok, 4),
            (Code::Ok, 3),
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ],
        "the five hits before the crash are all still counted"
    );
}
