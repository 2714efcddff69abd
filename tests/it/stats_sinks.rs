//! The stats settings besides Prometheus and statsd: the DogStatsD sink with its mogrifiers
//! (a UDP listener sees the reference's tag format), `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`
//! and `DISABLE_STATS`, each on a running service after real calls.

use std::net::UdpSocket;

use crate::process::{Process, RULES, http_get, metric, receive_lines, rules_root};
use crate::support::req1;

async fn three_calls(p: &Process, user: &str) {
    let mut client = p.client().await;
    for _ in 0..3 {
        client
            .should_rate_limit(req1("ops", &[("user", user)]))
            .await
            .expect("call");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dogstatsd_sends_tags_and_mogrifies_names() {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = socket.local_addr().expect("addr").port().to_string();
    let p = Process::start(
        &rules_root(RULES),
        &[
            ("USE_PROMETHEUS", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("EXTRA_TAGS", "cluster:test"),
            ("USE_DOG_STATSD_MOGRIFIERS", "LIMITS"),
            (
                "DOG_STATSD_MOGRIFIER_LIMITS_PATTERN",
                r"^ratelimit\.service\.rate_limit\.([^.]*)\.(.*)\.([^.]*)$",
            ),
            (
                "DOG_STATSD_MOGRIFIER_LIMITS_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            (
                "DOG_STATSD_MOGRIFIER_LIMITS_TAGS",
                "domain:$1,descriptor:$2",
            ),
        ],
    );
    three_calls(&p, "dog").await;
    receive_lines(
        &socket,
        &[
            "ratelimit.service.rate_limit.total_hits:3|c|#cluster:test,domain:ops,descriptor:user",
            "ratelimit.service.rate_limit.over_limit:1|c|#cluster:test,domain:ops,descriptor:user",
            // Names the mogrifier does not match keep their dots, with the extra tags.
            "ratelimit.service.config_load_success:1|c|#cluster:test",
        ],
    );
}

#[test]
fn dogstatsd_beside_another_sink_or_with_a_broken_mogrifier_is_refused_by_name() {
    let root = rules_root(RULES);
    // The test settings turn USE_PROMETHEUS on: DogStatsD beside it is refused, as in the
    // reference (one sink at a time).
    let mut all: std::collections::HashMap<String, String> = crate::process::loopback_env(&root)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    all.insert("USE_PROMETHEUS".into(), "true".into());
    all.insert("USE_DOG_STATSD".into(), "true".into());
    let env = all.clone();
    let err = turnstile::settings::Settings::from_env(&move |k| env.get(k).cloned(), None)
        .expect_err("two sinks");
    let err = err.single().expect("one problem").clone();
    assert_eq!(err.name, "USE_DOG_STATSD");
    assert!(err.problem.contains("USE_PROMETHEUS"), "{err}");
    all.insert("USE_PROMETHEUS".into(), "false".into());
    all.insert("USE_DOG_STATSD_MOGRIFIERS".into(), "X".into());
    all.insert("DOG_STATSD_MOGRIFIER_X_PATTERN".into(), "(unclosed".into());
    all.insert("DOG_STATSD_MOGRIFIER_X_NAME".into(), "n".into());
    let env = all.clone();
    let err = turnstile::settings::Settings::from_env(&move |k| env.get(k).cloned(), None)
        .expect_err("bad pattern");
    let err = err.single().expect("one problem").clone();
    assert_eq!(err.name, "DOG_STATSD_MOGRIFIER_X_PATTERN");
    all.remove("DOG_STATSD_MOGRIFIER_X_NAME");
    all.insert("DOG_STATSD_MOGRIFIER_X_PATTERN".into(), "^a$".into());
    let env = all;
    let err = turnstile::settings::Settings::from_env(&move |k| env.get(k).cloned(), None)
        .expect_err("no name");
    let err = err.single().expect("one problem").clone();
    assert_eq!(err.name, "DOG_STATSD_MOGRIFIER_X_NAME");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_time_in_milliseconds_scales_bounds_and_sum() {
    let seconds = Process::start(&rules_root(RULES), &[]);
    let ms = Process::start(
        &rules_root(RULES),
        &[("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true")],
    );
    three_calls(&seconds, "s").await;
    three_calls(&ms, "ms").await;
    let (_, in_s) = http_get(seconds.prometheus, "/metrics").expect("metrics");
    let (_, in_ms) = http_get(ms.prometheus, "/metrics").expect("metrics");
    let bucket = "ratelimit_service_response_time_seconds_bucket";
    assert!(
        in_s.contains(&format!("{bucket}{{le=\"0.001\"}}")),
        "{in_s}"
    );
    assert!(in_ms.contains(&format!("{bucket}{{le=\"1\"}}")), "{in_ms}");
    assert!(
        in_ms.contains(&format!("{bucket}{{le=\"0.05\"}}")),
        "{in_ms}"
    );
    assert!(
        !in_ms.contains(&format!("{bucket}{{le=\"0.00005\"}}")),
        "{in_ms}"
    );
    let count = |text: &str| metric(text, "ratelimit_service_response_time_seconds_count");
    assert_eq!((count(&in_s), count(&in_ms)), (Some(3), Some(3)));
    let sum = |text: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with("ratelimit_service_response_time_seconds_sum"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .expect("sum")
    };
    // Three local decisions: well under a second each, and the ms sum is 1000× larger in
    // unit, so above 1 µs × 3 × 1000 = 0.003 when in ms and below 1 when in seconds.
    assert!(
        sum(&in_s) < 1.0 && sum(&in_ms) > 0.003,
        "{} {}",
        sum(&in_s),
        sum(&in_ms)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_stats_counts_no_descriptor_stats_and_starts_no_sink() {
    let p = Process::start(&rules_root(RULES), &[("DISABLE_STATS", "true")]);
    assert_eq!(p.prometheus, 0, "no Prometheus listener with DISABLE_STATS");
    three_calls(&p, "quiet").await;
    let text = p.metrics();
    let series = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with("ratelimit_service_rate_limit_"));
    assert_eq!(series, None, "per-descriptor stats with DISABLE_STATS");
    // The service's own health series stay for the readiness and error alerts.
    assert_eq!(metric(&text, "ratelimit_service_total_requests"), Some(3));
    assert_eq!(metric(&text, "turnstile_ready"), Some(1));
}

/// A configured limit's stats counters are attached to the limit the first time it is counted
/// and read from it after: two metrics over one rule set (as tests run several services) still
/// count apart, and a reloaded rule set counts on into the same series.
#[tokio::test]
async fn two_metrics_over_one_rule_set_count_apart_and_a_reload_counts_on() {
    use std::sync::Arc;
    use turnstile::clock::ManualClock;
    use turnstile::config::{LoadOptions, parse_files};
    use turnstile::limiter::{Descriptor, Entry, Limiter, Request};
    use turnstile::metrics::Metrics;
    use turnstile::storage::memory::MemoryStore;

    let rules = || {
        let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 9}\n";
        parse_files(&[("r.yaml".into(), text.into())], LoadOptions::default())
            .expect("rules")
            .rules
    };
    let clock = ManualClock::new(1_796_000_000);
    let store = MemoryStore::new(100, Arc::new(clock.clone()));
    let limiter = Limiter::new(store, Arc::new(clock), Default::default());
    let request = Request {
        domain: "d".into(),
        descriptors: vec![Descriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            limit_override: None,
            hits: 1,
            refund: false,
            hits_addend: None,
        }],
        hits_addend: 0,
    };
    let (a, b) = (Metrics::new(100, 0.8, &[]), Metrics::new(100, 0.8, &[]));
    let hits = |m: &Metrics| {
        metric(
            &m.render(&[]),
            r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="k"}"#,
        )
    };
    let first = rules();
    for metrics in [&a, &a, &b] {
        let verdict = limiter.check(&first, &request).await.expect("decided");
        metrics.record(&request, &verdict);
    }
    assert_eq!((hits(&a), hits(&b)), (Some(2), Some(1)));
    let reloaded = rules();
    let verdict = limiter.check(&reloaded, &request).await.expect("decided");
    a.record(&request, &verdict);
    assert_eq!(hits(&a), Some(3), "one series across the reload");
}

/// Descriptor values and a domain that would inject a statsd line or a DogStatsD tag
/// (issue 41): every line a real UDP listener receives is one metric with the tags it was
/// given; the bytes that mean something arrive as `_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_neither_inject_lines_nor_tags() {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = socket.local_addr().expect("addr").port().to_string();
    let rules = "domain: dm\ndescriptors:\n  - key: v\n    detailed_metric: true\n    rate_limit: { unit: hour, requests_per_unit: 9 }\n";
    let p = Process::start(
        &rules_root(rules),
        &[
            ("USE_PROMETHEUS", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("USE_DOG_STATSD_MOGRIFIERS", "L"),
            (
                "DOG_STATSD_MOGRIFIER_L_PATTERN",
                r"^ratelimit\.service\.rate_limit\.([^.]*)\.(.*)\.([^.]*)$",
            ),
            (
                "DOG_STATSD_MOGRIFIER_L_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            ("DOG_STATSD_MOGRIFIER_L_TAGS", "domain:$1,descriptor:$2"),
        ],
    );
    let mut client = p.client().await;
    for (domain, value) in [
        ("dm", "a\ninjected.metric:999|c"),
        ("dm", "b,env:prod"),
        ("x\r|#evil:1", "c"),
    ] {
        client
            .should_rate_limit(req1(domain, &[("v", value)]))
            .await
            .expect("call");
    }
    let received = receive_lines(
        &socket,
        &[
            "ratelimit.service.rate_limit.total_hits:1|c|#domain:dm,descriptor:v_a_injected.metric_999_c",
            "ratelimit.service.rate_limit.total_hits:1|c|#domain:dm,descriptor:v_b_env_prod",
            "ratelimit.service.rate_limit.x__#evil_1.domain_not_found:1|c",
        ],
    );
    // Every line is one metric: a name, a count, `c`, and only the tags the mogrifier gives.
    for line in received.lines().filter(|l| !l.is_empty()) {
        let (name, rest) = line.split_once(':').expect("name:value");
        assert!(
            name.starts_with("ratelimit"),
            "no line of the client's: {line:?}"
        );
        let sections: Vec<&str> = rest.split('|').collect();
        assert!(
            sections[0].parse::<u64>().is_ok() && sections[1] == "c",
            "{line:?}"
        );
        if let Some(tags) = sections.get(2) {
            let keys: Vec<&str> = tags[1..]
                .split(',')
                .map(|t| t.split(':').next().unwrap_or(""))
                .collect();
            assert_eq!(keys, ["domain", "descriptor"], "no injected tag: {line:?}");
        }
        assert!(sections.len() <= 3, "{line:?}");
    }
}
