//! Migrations by hand (`POSTGRES_MIGRATE=check` with `turnstile migrate [--check]`): the service
//! refuses to count on an old schema, saying why; `migrate --check` reports and exits 1 until
//! `migrate` has applied the schema; then the service counts.

use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, command, http_get, rules_root};
use crate::support::postgres_server::Postgres;
use crate::support::{req1, unique, until};

const RULES: &str = "\
domain: plans
descriptors:
  - key: api_key
    rate_limit: { unit: month, requests_per_unit: 2 }
";

fn migrate(env: &[(&str, String)], check: bool) -> (Option<i32>, String) {
    let mut cmd = command(env);
    cmd.arg("migrate");
    if check {
        cmd.arg("--check");
    }
    let out = cmd.output().expect("turnstile migrate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_migrate_check_the_service_waits_for_turnstile_migrate() {
    let Some(pg) = Postgres::start() else { return };
    let schema = unique("hand").replace('-', "_");
    let env: Vec<(&str, String)> = vec![
        ("BACKEND_TYPE", "postgres".into()),
        ("POSTGRES_URL", pg.url()),
        ("POSTGRES_SCHEMA", schema.clone()),
        ("POSTGRES_MIGRATE", "check".into()),
    ];
    let (code, text) = migrate(&env, true);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("schema version 0, this Turnstile needs 1: run `turnstile migrate`"),
        "{text}"
    );

    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = Process::spawn(&rules_root(RULES), &pairs);
    let mut client = p.client().await;
    let key = unique("k");
    let refused = client
        .should_rate_limit(req1("plans", &[("api_key", &key)]))
        .await
        .expect_err("no schema yet");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(
        refused.message().contains("run `turnstile migrate`"),
        "{refused:?}"
    );
    until(
        Duration::from_secs(5),
        "not ready while the schema is behind",
        || http_get(p.http, "/healthcheck").is_some_and(|r| r.0 == 500 && r.1.contains("backend")),
    )
    .await;

    let (code, text) = migrate(&env, false);
    assert_eq!(
        (code, text.trim()),
        (
            Some(0),
            format!("schema {schema:?}: applied versions [1]").as_str()
        )
    );
    let (code, text) = migrate(&env, false);
    assert_eq!(
        (code, text.trim()),
        (
            Some(0),
            format!("schema {schema:?}: already up to date").as_str()
        )
    );
    let (code, text) = migrate(&env, true);
    assert_eq!(
        (code, text.trim()),
        (
            Some(0),
            format!("schema {schema:?}: schema version 1 (up to date)").as_str()
        )
    );

    // The service checks again at its next call and counts.
    let codes: Vec<Code> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            let answer = client
                .should_rate_limit(req1("plans", &[("api_key", &key)]))
                .await
                .expect("answered")
                .into_inner();
            out.push(answer.overall_code());
        }
        out
    };
    assert_eq!(codes, vec![Code::Ok, Code::Ok, Code::OverLimit]);
}

#[test]
fn migrate_without_postgres_configured_says_so() {
    let (code, text) = migrate(&[], false);
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("no PostgreSQL is configured"), "{text}");
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` with `BACKEND_TYPE=postgres`, the reference's
/// scenario as on Redis: once `key3` (10 an hour) would go over, only it is incremented, so
/// `key2` (20 an hour: the reference's scenario has 20 a minute, which a minute boundary during
/// the test would reset) in the same requests stays at 10 hits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_increment_when_over_limit_spares_the_other_descriptors() {
    let Some(pg) = Postgres::start() else { return };
    let schema = unique("stop").replace('-', "_");
    let url = pg.url();
    let rules = "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: { unit: hour, requests_per_unit: 20 }\n  - key: key3\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n";
    let p = Process::start(
        &rules_root(rules),
        &[
            ("BACKEND_TYPE", "postgres"),
            ("POSTGRES_URL", &url),
            ("POSTGRES_SCHEMA", &schema),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ],
    );
    let mut client = p.client().await;
    let value = unique("v");
    let mut seen = Vec::new();
    for _ in 0..15 {
        let call = crate::support::another_pair(&value);
        let r = client
            .should_rate_limit(call)
            .await
            .expect("answer")
            .into_inner();
        seen.push((r.statuses[0].limit_remaining, r.statuses[1].limit_remaining));
    }
    let expected: Vec<(u32, u32)> = (0..15u32)
        .map(|i| if i < 10 { (19 - i, 9 - i) } else { (10, 0) })
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(
        pg.psql(&format!(
            "SELECT count FROM {schema}.counters WHERE key LIKE '%key2%' AND key LIKE '%{value}%'"
        )),
        "10",
        "key2 was not incremented past the stop"
    );
}
