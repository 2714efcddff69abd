//! `POSTGRES_FROM_UNIT=day` beside memcached: a day limit (and an hour × 24 one) is counted in
//! PostgreSQL and never touches memcached; a minute limit is counted in memcached and never
//! touches PostgreSQL; a request naming both sends each its operations; RLQS routes the same
//! way.

use std::io::{Read, Write};

use turnstile::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::{Process, rules_root};
use crate::rlqs::stream::Quotas;
use crate::support::postgres_server::Postgres;
use crate::support::{Memcached, desc, req, unique};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: day, requests_per_unit: 3 }
  - key: daily
    rate_limit: { unit: hour, unit_multiplier: 24, requests_per_unit: 100 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

/// memcached's counters that any command on a key moves.
fn memcached_activity(port: u16) -> Vec<(String, u64)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("memcached");
    stream.write_all(b"stats\r\n").expect("stats");
    let mut text = String::new();
    let mut buf = [0u8; 8192];
    while !text.ends_with("END\r\n") {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "memcached closed the connection");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace().skip(1);
            let (name, value) = (parts.next()?, parts.next()?.parse().ok()?);
            [
                "curr_items",
                "total_items",
                "cmd_get",
                "cmd_set",
                "incr_hits",
                "incr_misses",
                "cmd_touch",
            ]
            .contains(&name)
            .then(|| (name.to_owned(), value))
        })
        .collect()
}

/// PostgreSQL and memcached, and Turnstile counting day limits in the one and the rest in the
/// other, PostgreSQL's schema made (readiness reaches it too).
async fn routed() -> Option<(Postgres, Memcached, Process, String)> {
    let pg = Postgres::start()?;
    let mc = Memcached::start()?;
    let schema = unique("route").replace('-', "_");
    let (url, mc_addr) = (pg.url(), mc.addr());
    let p = Process::start(
        &rules_root(RULES),
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", &mc_addr),
            ("POSTGRES_URL", &url),
            ("POSTGRES_FROM_UNIT", "day"),
            ("POSTGRES_SCHEMA", &schema),
        ],
    );
    crate::support::until(
        std::time::Duration::from_secs(10),
        "the schema is made",
        || {
            pg.psql(&format!(
                "SELECT to_regclass('{schema}.counters') IS NOT NULL"
            )) == "t"
        },
    )
    .await;
    Some((pg, mc, p, schema))
}

/// The codes of one request of `descriptors` in domain `plans`.
async fn codes(
    client: &RateLimitServiceClient<tonic::transport::Channel>,
    descriptors: Vec<RateLimitDescriptor>,
) -> Vec<Code> {
    let answer = client
        .clone()
        .should_rate_limit(req("plans", descriptors))
        .await
        .expect("answered")
        .into_inner();
    answer.statuses.iter().map(|s| s.code()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_windows_count_in_postgres_and_short_ones_in_memcached() {
    let Some((pg, mc, p, schema)) = routed().await else {
        return;
    };
    let rows = || pg.psql(&format!("SELECT count(*) FROM {schema}.counters"));
    // /rlconfig says which limits are durable.
    let (_, dump) = crate::process::http_get(p.debug, "/rlconfig").expect("rlconfig");
    let line = |key: &str| {
        dump.lines()
            .find(|l| l.starts_with(&format!("plans.{key}:")))
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        line("api_key"),
        "plans.api_key: unit=DAY requests_per_unit=3 store=postgres, shadow_mode: false, quota_mode: false"
    );
    assert!(line("daily").contains(" store=postgres"), "{dump}");
    assert!(!line("user").contains("store="), "{dump}");
    let client = p.client().await;
    let codes = |descriptors| codes(&client, descriptors);

    // Minute limits: memcached only.
    let user = unique("u");
    for expected in [Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(codes(vec![desc(&[("user", &user)])]).await, vec![expected]);
    }
    assert_eq!(rows(), "0", "a minute limit never touches PostgreSQL");

    // Day limits: PostgreSQL only.
    let before = memcached_activity(mc.port);
    let key = unique("k");
    for expected in [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(
            codes(vec![desc(&[("api_key", &key)])]).await,
            vec![expected]
        );
    }
    assert_eq!(codes(vec![desc(&[("daily", &key)])]).await, vec![Code::Ok]);
    assert_eq!(
        rows(),
        "2",
        "a day and an hour × 24 limit, counted in PostgreSQL"
    );
    assert_eq!(
        memcached_activity(mc.port),
        before,
        "and never in memcached"
    );

    // Both in one request: each store gets its operations, the answers in order.
    let other = unique("u");
    assert_eq!(
        codes(vec![desc(&[("api_key", &key)]), desc(&[("user", &other)])]).await,
        vec![Code::OverLimit, Code::Ok]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_counts_a_day_limit_in_postgres_as_rls_does() {
    let Some((pg, mc, p, schema)) = routed().await else {
        return;
    };
    let client = p.client().await;
    let codes = |descriptors| codes(&client, descriptors);
    // RLQS routes as RLS does: a report on the day limit lands in PostgreSQL.
    let reported = unique("r");
    let report = RateLimitQuotaUsageReports {
        domain: "plans".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("api_key".to_owned(), reported.clone())].into(),
            }),
            time_elapsed: None,
            num_requests_allowed: 2,
            num_requests_denied: 0,
        }],
    };
    let before = memcached_activity(mc.port);
    Quotas::one_report(p.grpc, report).await;
    assert_eq!(
        memcached_activity(mc.port),
        before,
        "RLQS leaves memcached alone too"
    );
    let counted = pg.psql(&format!(
        "SELECT coalesce(max(count), 0) FROM {schema}.counters WHERE key LIKE '%{reported}%' AND count = 2"
    ));
    assert_eq!(counted, "2", "the report's 2 requests are in PostgreSQL");
    // And RLS reads that count: 3 - 2 - 1 = 0 left, then over.
    assert_eq!(
        codes(vec![desc(&[("api_key", &reported)])]).await,
        vec![Code::Ok]
    );
    assert_eq!(
        codes(vec![desc(&[("api_key", &reported)])]).await,
        vec![Code::OverLimit]
    );
}
