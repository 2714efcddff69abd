use super::*;

const FILE: &str = r#"
defaults:
  match_type: glob
mappings:
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "${3}"
  - match: "ratelimit.service.call.should_rate_limit.*"
    name: "ratelimit_service_should_rate_limit_error"
    match_metric_type: counter
    labels:
      err_type: "$1"
  - match: "client_*_total.*"
    name: "client_$1_$2"
  - match: "ratelimit\\.service\\.(config_load_[a-z]+)"
    match_type: regex
    name: "rls_$1"
  - match: "."
    match_type: "regex"
    action: "drop"
    name: "dropped"
"#;

fn series(name: &str, labels: &[(&str, &str)]) -> Mapped {
    Mapped::Series {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    }
}

#[test]
fn globs_capture_whole_parts_and_name_the_labels() {
    let m = Mapper::parse("conf.yaml", FILE).expect("parses");
    assert_eq!(
        m.map(
            "ratelimit.service.rate_limit.d.user.near_limit",
            MetricType::Counter
        ),
        series(
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "d"), ("key1", "user")]
        )
    );
    assert_eq!(
        m.map(
            "ratelimit.service.rate_limit.d.user.path.near_limit",
            MetricType::Counter
        ),
        series(
            "ratelimit_service_rate_limit_near_limit",
            &[("domain", "d"), ("key1", "user"), ("key2", "path")]
        )
    );
    assert_eq!(
        m.map("client_redis_total.eu", MetricType::Counter),
        series("client_redis_eu", &[])
    );
}

#[test]
fn metric_types_regexes_and_drops() {
    let m = Mapper::parse("conf.yaml", FILE).expect("parses");
    assert_eq!(
        m.map(
            "ratelimit.service.call.should_rate_limit.redis_error",
            MetricType::Counter
        ),
        series(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        )
    );
    // The counter-only mapping does not take a gauge; the catch-all regex drops it.
    assert_eq!(
        m.map(
            "ratelimit.service.call.should_rate_limit.redis_error",
            MetricType::Gauge
        ),
        Mapped::Drop
    );
    assert_eq!(
        m.map("ratelimit.service.config_load_success", MetricType::Counter),
        series("rls_config_load_success", &[])
    );
    // Four parts after the prefix match neither glob: dropped, as the reference drops them.
    assert_eq!(
        m.map(
            "ratelimit.service.rate_limit.d.a.b.c.near_limit",
            MetricType::Counter
        ),
        Mapped::Drop
    );
}

#[test]
fn without_a_match_the_statsd_name_is_escaped() {
    let m = Mapper::parse("m.yaml", "mappings: []\n").expect("parses");
    assert_eq!(
        m.map(
            "ratelimit.service.rate_limit.d.user-id.total_hits",
            MetricType::Counter
        ),
        series("ratelimit_service_rate_limit_d_user_id_total_hits", &[])
    );
}

#[test]
fn errors_name_the_file_line_and_what_belongs_there() {
    let e = Mapper::parse(
        "m.yaml",
        "mappings:\n  - match: \"a.*\"\n    labels: {x: \"$1\"}\n",
    )
    .expect_err("no name");
    assert_eq!(
        e.to_string(),
        "m.yaml:2:12: this mapping sets no `name` for the series"
    );
    let e = Mapper::parse(
        "m.yaml",
        "mappings:\n  - match: \"(\"\n    match_type: regex\n    name: x\n",
    )
    .expect_err("bad regex");
    assert!(
        e.to_string()
            .starts_with("m.yaml:2:12: match \"(\" is not a regular expression"),
        "{e}"
    );
    let e = Mapper::parse(
        "m.yaml",
        "mappings:\n  - match: a\n    name: x\n    action: keep\n",
    )
    .expect_err("bad action");
    assert!(
        e.to_string()
            .contains("action \"keep\": expected map or drop"),
        "{e}"
    );
    let e = Mapper::parse("m.yaml", "mappings: 3\n").expect_err("not a list");
    assert!(e.to_string().starts_with("m.yaml:1:"), "{e}");
}
