//! `PROMETHEUS_MAPPER_YAML` with Envoy Gateway's statsd_exporter mapping: after real calls, the
//! Prometheus port serves the series and labels its dashboards query
//! (`ratelimit_service_rate_limit_*` by `domain`, `key1`, `key2`), drops what the mapping drops,
//! and keeps Turnstile's own series; a broken mapping file stops the start naming its line.

use std::path::PathBuf;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, http_get, metric, rules_root, settings};
use crate::support::{desc, req};

const RULES: &str = "\
domain: eg
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: route
    value: api
    descriptors:
      - key: user
        rate_limit: { unit: minute, requests_per_unit: 1 }
";

fn mapping() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-gateway-statsd-mapping.yaml")
        .display()
        .to_string()
}

/// The series Envoy Gateway's dashboards query, as the mapping names them, after three
/// requests of two descriptors (limits 2 and 1 per unit), and their values.
const MAPPED: &[(&str, u64)] = &[
    (
        "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"user\"}",
        3,
    ),
    (
        "ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"user\"}",
        1,
    ),
    (
        "ratelimit_service_rate_limit_within_limit{domain=\"eg\",key1=\"user\"}",
        2,
    ),
    (
        "ratelimit_service_rate_limit_near_limit{domain=\"eg\",key1=\"user\"}",
        1,
    ),
    (
        "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"route_api\",key2=\"user\"}",
        3,
    ),
    (
        "ratelimit_service_rate_limit_over_limit{domain=\"eg\",key1=\"route_api\",key2=\"user\"}",
        2,
    ),
    (
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"}",
        3,
    ),
    (
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"}",
        0,
    ),
    ("ratelimit_service_config_load_success{}", 1),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_mapping_names_the_series_its_dashboards_query() {
    let file = mapping();
    let p = Process::start(
        &rules_root(RULES),
        &[("PROMETHEUS_MAPPER_YAML", file.as_str())],
    );
    let mut client = p.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let two = req(
            "eg",
            vec![
                desc(&[("user", "ann")]),
                desc(&[("route", "api"), ("user", "ann")]),
            ],
        );
        let response = client
            .should_rate_limit(two)
            .await
            .expect("answered")
            .into_inner();
        codes.push(
            response
                .statuses
                .iter()
                .map(|s| s.code())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        codes,
        vec![
            vec![Code::Ok, Code::Ok],
            vec![Code::Ok, Code::OverLimit],
            vec![Code::OverLimit, Code::OverLimit],
        ]
    );
    let (status, text) = http_get(p.prometheus, "/metrics").expect("Prometheus port");
    assert_eq!(status, 200);
    for &(series, value) in MAPPED {
        assert_eq!(metric(&text, series), Some(value), "{series} in\n{text}");
    }
    assert!(
        text.contains("# TYPE ratelimit_service_rate_limit_total_hits counter"),
        "{text}"
    );
    // What the mapping drops is gone; Turnstile's own series keep their names.
    assert!(
        !text.contains("ratelimit_service_global_shadow_mode"),
        "{text}"
    );
    assert!(!text.contains("over_limit_with_local_cache"), "{text}");
    assert!(text.contains("turnstile_backend_errors_total"), "{text}");
    assert!(
        text.contains("ratelimit_service_response_time_seconds_bucket"),
        "{text}"
    );
}

#[test]
fn a_broken_mapping_file_stops_the_start_naming_its_line() {
    let dir = crate::process::temp_dir("mapper");
    let file = dir.join("conf.yaml");
    std::fs::write(
        &file,
        "mappings:\n  - match: \"a.*\"\n    labels: {x: \"$1\"}\n",
    )
    .expect("write");
    let path = file.display().to_string();
    let root = rules_root(RULES);
    let error = Process::try_spawn(settings(&root, &[("PROMETHEUS_MAPPER_YAML", &path)]), &root)
        .err()
        .expect("refused");
    assert_eq!(error.exit_code(), 78);
    assert_eq!(
        error.to_string(),
        format!(
            "invalid statsd mapping file: {path}:2:12: this mapping sets no `name` for the series"
        )
    );
}
