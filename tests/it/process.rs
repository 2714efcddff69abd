//! The service as an operator runs it, built by `App` in process from settings given as an
//! environment map (listeners on port 0, so no port races): HTTP `/healthcheck`, `/json`,
//! `/rlconfig`, `/metrics` and the Prometheus port, hot reload (good file, broken file,
//! Kubernetes `..data` symlink swap) and the statsd sink. The few tests that need the real
//! binary (exit codes, signals, logs, `check-config`) use [`command`]. The harness is in `support/process.rs`.

use std::time::{Duration, Instant};

use std::sync::Arc;

use turnstile::clock::ManualClock;

use crate::support::{req1, unique};

pub use crate::support::process::{
    Process, RULES, command, http, http_get, loopback_env, metric, rules_root, settings, temp_dir,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_endpoints_and_metrics() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[("EXTRA_TAGS", "cluster:test")]);
    assert_eq!(http_get(p.http, "/healthcheck"), Some((200, "OK".into())));
    let body = r#"{"domain":"ops","descriptors":[{"entries":[{"key":"user","value":"ann"}]}]}"#;
    let (status, json) = http(p.http, "POST", "/json", body).expect("json");
    assert_eq!(status, 200, "{json}");
    assert!(
        json.contains(r#""overallCode":"OK""#)
            && json.contains(r#""limitRemaining":1"#)
            && json.contains(r#""unit":"MINUTE""#),
        "{json}"
    );
    assert_eq!(http(p.http, "POST", "/json", body).map(|r| r.0), Some(200));
    let (status, json) = http(p.http, "POST", "/json", body).expect("json");
    assert_eq!(status, 429, "{json}");
    assert!(json.contains(r#""overallCode":"OVER_LIMIT""#), "{json}");
    assert_eq!(
        http(p.http, "POST", "/json", "{nope").map(|r| r.0),
        Some(400)
    );
    assert_eq!(
        http(p.http, "POST", "/json", r#"{"domain":""}"#).map(|r| r.0),
        Some(400)
    );

    rlconfig_says_the_rules(&p);
    metrics_count_the_three_calls(&p);
}

/// `/rlconfig`, and with `?rlqs` how RLQS serves each rule.
fn rlconfig_says_the_rules(p: &Process) {
    let rlconfig = http_get(p.debug, "/rlconfig").expect("rlconfig").1;
    assert_eq!(
        rlconfig.trim(),
        "ops.user: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false"
    );
    let rlqs = http_get(p.debug, "/rlconfig?rlqs")
        .expect("rlconfig?rlqs")
        .1;
    assert_eq!(
        rlqs.trim(),
        "ops.user: bucket {user: *} → fair share of 2 per minute in fixed windows"
    );
}

/// The reference's series with `EXTRA_TAGS`, on the debug port and the Prometheus port: 3 hits,
/// 2 within the limit, 1 over and 1 near it, one live counter.
fn metrics_count_the_three_calls(p: &Process) {
    let metrics = p.metrics();
    let labels = r#"{domain="ops",key1="user",cluster="test"}"#;
    assert_eq!(
        metric(
            &metrics,
            &format!("ratelimit_service_rate_limit_total_hits{labels}")
        ),
        Some(3),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("ratelimit_service_rate_limit_within_limit{labels}")
        ),
        Some(2)
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("ratelimit_service_rate_limit_over_limit{labels}")
        ),
        Some(1)
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("ratelimit_service_rate_limit_near_limit{labels}")
        ),
        Some(1)
    );
    assert_eq!(
        metric(
            &metrics,
            "ratelimit_service_config_load_success{cluster=\"test\"}"
        ),
        Some(1)
    );
    assert!(
        metrics.contains(
            "ratelimit_service_response_time_seconds_bucket{cluster=\"test\",le=\"+Inf\"}"
        ),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "turnstile_memory_counters{cluster=\"test\"}"),
        Some(1),
        "one live counter"
    );
    let prom = http_get(p.prometheus, "/metrics")
        .expect("prometheus port")
        .1;
    assert!(
        prom.contains("ratelimit_service_rate_limit_total_hits"),
        "{prom}"
    );
}

async fn eventually_limit(p: &Process, domain: &str, want: Option<u32>) {
    let client = p.client().await;
    let what = format!("limit {want:?} applied");
    crate::support::wait::until_some(Duration::from_secs(15), &what, || {
        let mut client = client.clone();
        async move {
            let resp = client
                .should_rate_limit(req1(domain, &[("user", &unique("u"))]))
                .await
                .expect("call")
                .into_inner();
            let got = resp.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit);
            (got == want).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_good_broken_and_symlink_swap() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[]);
    eventually_limit(&p, "ops", Some(2)).await;

    std::fs::write(
        p.dir.join("rules.yaml"),
        RULES.replace("requests_per_unit: 2", "requests_per_unit: 7"),
    )
    .expect("write");
    eventually_limit(&p, "ops", Some(7)).await;

    std::fs::write(
        p.dir.join("rules.yaml"),
        "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: { unit: minit }\n",
    )
    .expect("write");
    crate::support::wait::until(Duration::from_secs(15), "the broken reload counted", || {
        metric(&p.metrics(), "ratelimit_service_config_load_error") == Some(1)
    })
    .await;
    eventually_limit(&p, "ops", Some(7)).await;

    // A Kubernetes ConfigMap volume: files are symlinks into `..data`, which is swapped.
    let dir = &p.dir;
    std::fs::remove_file(dir.join("rules.yaml")).expect("rm");
    let v1 = dir.join("..2026_v1");
    std::fs::create_dir(&v1).expect("mkdir");
    std::fs::write(
        v1.join("config.yaml"),
        RULES.replace("requests_per_unit: 2", "requests_per_unit: 11"),
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_v1", dir.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).expect("symlink");
    eventually_limit(&p, "ops", Some(11)).await;
    let v2 = dir.join("..2026_v2");
    std::fs::create_dir(&v2).expect("mkdir");
    std::fs::write(
        v2.join("config.yaml"),
        RULES.replace("requests_per_unit: 2", "requests_per_unit: 13"),
    )
    .expect("write");
    std::os::unix::fs::symlink("..2026_v2", dir.join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("atomic swap");
    eventually_limit(&p, "ops", Some(13)).await;
    assert!(metric(&p.metrics(), "ratelimit_service_config_load_success").unwrap_or(0) >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_sink_pushes_reference_names() {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = socket.local_addr().expect("addr").port().to_string();
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
            ("EXTRA_TAGS", "cluster:test"),
        ],
    );
    let mut client = p.client().await;
    for _ in 0..3 {
        client
            .should_rate_limit(req1("ops", &[("user", "statsd")]))
            .await
            .expect("call");
    }
    receive_lines(
        &socket,
        &[
            "ratelimit.service.rate_limit.ops.user.total_hits:3|c|#cluster:test",
            "ratelimit.service.rate_limit.ops.user.over_limit:1|c|#cluster:test",
            "ratelimit.service.config_load_success:1|c|#cluster:test",
        ],
    );
}

/// Reads datagrams from `socket` until every line of `want` has been seen (10 s at most); what
/// was received.
pub fn receive_lines(socket: &std::net::UdpSocket, want: &[&str]) -> String {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut received = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 65_536];
    while !want.iter().all(|w| received.lines().any(|l| l == *w)) {
        assert!(
            Instant::now() < deadline,
            "lines missing: {want:?}; received:\n{received}"
        );
        if let Ok(n) = socket.recv(&mut buf) {
            received.push_str(&String::from_utf8_lossy(&buf[..n]));
            received.push('\n');
        }
    }
    received
}

/// The production wiring (`App::build_with`) with a clock the test moves: a window ends when
/// the clock says so, with no waiting for wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_reads_time_from_the_clock_it_is_given() {
    let root = rules_root(RULES);
    let clock = ManualClock::new(crate::support::T0);
    let p = Process::try_spawn_with(settings(&root, &[]), &root, Arc::new(clock.clone()))
        .expect("the service starts");
    let mut client = p.client().await;
    let user = unique("clocked");
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = client
            .should_rate_limit(req1("ops", &[("user", &user)]))
            .await
            .expect("call")
            .into_inner();
        codes.push(answer.overall_code);
    }
    // 2 a minute: OK, OK, OVER_LIMIT (codes 1, 1, 2).
    assert_eq!(codes, [1, 1, 2]);
    clock.advance(60);
    let next = client
        .should_rate_limit(req1("ops", &[("user", &user)]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(
        next.overall_code, 1,
        "a new window once the clock moved a minute"
    );
    assert_eq!(next.statuses[0].limit_remaining, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_configuration_is_healthy_but_said() {
    let root = rules_root(RULES);
    std::fs::remove_file(root.join("ratelimit/config/rules.yaml")).expect("rm");
    let p = Process::start(&root, &[]);
    let (status, body) = http_get(p.http, "/healthcheck").expect("healthcheck");
    assert_eq!(status, 200);
    assert!(
        body.starts_with("OK (warning: no rate limit rules are loaded"),
        "{body}"
    );
    // Rules arrive: the warning goes.
    std::fs::write(p.dir.join("rules.yaml"), RULES).expect("write");
    crate::support::until(
        Duration::from_secs(15),
        "the warning stayed after rules loaded",
        || http_get(p.http, "/healthcheck").map(|r| r.1) == Some("OK".into()),
    )
    .await;
}
