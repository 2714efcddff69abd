//! Primary failover with `target_session_attrs=read-write` over two hosts: a primary and its
//! streaming standby. The primary is demoted in place (it goes read-only, as a fenced old
//! primary does) and the standby promoted: calls fail while no host accepts writes (the
//! pooled connections to the old primary are dropped at their first read-only error), then
//! the service counts on the new primary, with the counts it had replicated.

use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, rules_root};
use crate::support::postgres_server::Postgres;
use crate::support::wait::until_some;
use crate::support::{req1, unique, until};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: month, requests_per_unit: 10 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_the_promoted_standby() {
    let Some(primary) = Postgres::start() else {
        return;
    };
    let standby = Postgres::standby_of(&primary);
    let schema = unique("fo").replace('-', "_");
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, standby.port
    );
    let p = Process::start(
        &rules_root(RULES),
        &[
            ("BACKEND_TYPE", "postgres"),
            ("POSTGRES_URL", &url),
            ("POSTGRES_SCHEMA", &schema),
            ("POSTGRES_TIMEOUT", "500ms"),
        ],
    );
    let client = p.client().await;
    let key = unique("k");
    let call = || {
        let mut client = client.clone();
        let key = key.clone();
        async move {
            client
                .should_rate_limit(req1("plans", &[("api_key", &key)]))
                .await
                .map(|a| {
                    let a = a.into_inner();
                    (a.overall_code(), a.statuses[0].limit_remaining)
                })
        }
    };
    for remaining in [9, 8, 7] {
        assert_eq!(call().await.expect("counted"), (Code::Ok, remaining));
    }
    until(
        Duration::from_secs(10),
        "the standby has the counts",
        || {
            standby
                .try_psql(&format!(
                    "SELECT coalesce(max(count), 0) FROM {schema}.counters WHERE key LIKE '%{key}%'"
                ))
                .as_deref()
                == Some("3")
        },
    )
    .await;

    // The old primary is fenced (read-only for every transaction); no host takes writes.
    primary.psql("ALTER SYSTEM SET default_transaction_read_only = on");
    primary.reload();
    let status = call().await.expect_err("no writable host");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("PostgreSQL"), "{status:?}");

    standby.ctl(&["promote", "-w", "-t", "30"]);
    let after = until_some(
        Duration::from_secs(10),
        "counting on the promoted standby",
        || async { call().await.ok() },
    )
    .await;
    assert_eq!(after, (Code::Ok, 6), "the replicated counts, then this hit");
    assert_eq!(
        standby.psql(&format!(
            "SELECT max(count) FROM {schema}.counters WHERE key LIKE '%{key}%'"
        )),
        "4",
        "counted on the new primary"
    );
}
