//! Lifecycle of the real binary: start-up (bad settings and bad rules stop it with distinct exit
//! codes; forced start without a valid config, then a fix), SIGTERM under load (health flips at once, calls are answered
//! through the drain, exit 0, JSON logs), and `GRPC_MAX_CONNECTION_AGE` recycling connections
//! without failed calls.

use std::io::Read;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::process::{Process, RULES, command, http_get, metric, rules_root};
use crate::support::req1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_fails_no_call_and_exits_zero() {
    let root = rules_root(RULES);
    let mut p = Process::start(
        &root,
        &[
            ("SHUTDOWN_DRAIN_SECONDS", "2"),
            ("LOG_FORMAT", "json"),
            ("LOG_LEVEL", "info"),
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for _ in 0..8 {
        let mut client = p.client().await;
        let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match client
                    .should_rate_limit(req1("ops", &[("user", "load")]))
                    .await
                {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(signalled.success());
    // Health flips at once; calls keep being answered during the drain.
    let deadline = Instant::now() + Duration::from_secs(1);
    while http_get(p.http, "/healthcheck").map(|r| r.0) != Some(500) {
        assert!(
            Instant::now() < deadline,
            "health did not turn unhealthy at once"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let during = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        ok.load(Ordering::Relaxed) > during,
        "calls are answered during the drain"
    );
    // Clients stop sending (as Envoy does once its health check sees NOT_SERVING).
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("caller");
    }
    let status = p.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "{} calls answered, none may fail",
        ok.load(Ordering::Relaxed)
    );
    let mut logs = String::new();
    p.child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut logs)
        .expect("logs");
    let line = logs
        .lines()
        .find(|l| l.contains("shutting down"))
        .unwrap_or_else(|| panic!("{logs}"));
    for field in [
        "\"@timestamp\":\"",
        "\"@message\":\"shutting down",
        "\"level\":\"warning\"",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
}

#[test]
fn max_connection_age_recycles_connections_without_failing_calls() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("GRPC_MAX_CONNECTION_AGE", "300ms"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "10s"),
        ],
    );
    // Several connection ages pass; every GOAWAY lets in-flight calls finish and grpcio
    // reconnects on its own (as Envoy does).
    let Some((ok, failed)) = grpcio_loop(&format!("127.0.0.1:{}", p.grpc), "2") else {
        return;
    };
    assert!(ok > 10, "{ok} calls");
    assert_eq!(failed, 0, "no call fails across GOAWAYs");
}

fn exit_of(env: &[(&str, String)]) -> (Option<i32>, String) {
    let out = command(env).output().expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_without_a_valid_config_then_fixing_it() {
    let root =
        rules_root("domain: ops\ndescriptors:\n  - key: user\n    rate_limit: { unit: minit }\n");
    let p = Process::spawn(
        &root,
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
    );
    assert_eq!(
        http_get(p.http, "/healthcheck"),
        Some((500, "unhealthy: config".into()))
    );
    let mut client = p.client().await;
    let status = client
        .should_rate_limit(req1("ops", &[("user", "x")]))
        .await
        .expect_err("no configuration");
    assert_eq!(
        (status.code(), status.message()),
        (
            tonic::Code::Unavailable,
            "no rate limit configuration loaded"
        )
    );
    assert_eq!(
        metric(&p.metrics(), "ratelimit_service_config_load_error"),
        Some(1)
    );

    std::fs::write(p.dir.join("rules.yaml"), RULES).expect("fix the rules");
    let deadline = Instant::now() + Duration::from_secs(15);
    while http_get(p.http, "/healthcheck").map(|r| r.0) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the fixed configuration was not loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resp = client
        .should_rate_limit(req1("ops", &[("user", "x")]))
        .await
        .expect("answers now")
        .into_inner();
    assert_eq!(resp.statuses[0].limit_remaining, 1);
}

#[test]
fn bad_settings_and_bad_config_stop_start_up_with_distinct_codes() {
    let (code, stderr) = exit_of(&[("GRPC_PORT", "80x".into())]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("GRPC_PORT"), "{stderr}");
    let (code, stderr) = exit_of(&[("NEAR_LIMIT_RATIO", "1.5".into())]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("NEAR_LIMIT_RATIO"), "{stderr}");
    let root =
        rules_root("domain: x\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight }\n");
    let (code, stderr) = exit_of(&[
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
    ]);
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains(
            "rules.yaml:4:25: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"
        ),
        "{stderr}"
    );
}

#[test]
fn grpc_on_a_unix_socket() {
    let root = rules_root(RULES);
    let socket = root.join("rls.sock");
    let _p = Process::start(&root, &[("GRPC_UDS", socket.to_str().expect("path"))]);
    let Some((ok, failed)) = grpcio_loop(&format!("unix:{}", socket.display()), "0.5") else {
        return;
    };
    assert!(
        ok > 0 && failed == 0,
        "calls over the socket: {ok} ok, {failed} failed"
    );
}

/// Calls ShouldRateLimit in a loop for `seconds` on one grpcio channel: `(ok, failed)`, or
/// `None` when the peer virtualenv is missing (reported).
fn grpcio_loop(addr: &str, seconds: &str) -> Option<(u64, u64)> {
    let stdout = crate::peers::python(&["loop", addr, seconds])?;
    let counts: Vec<u64> = stdout
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(counts.len(), 2, "{stdout}");
    Some((counts[0], counts[1]))
}
