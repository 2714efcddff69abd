//! Lifecycle: start-up (bad settings and bad rules stop the binary with distinct exit codes; a
//! forced start without a valid config, then a fix), SIGTERM under load on the real binary
//! (health flips at once, calls are answered through the drain, exit 0, JSON logs), a second
//! signal ending the drain at once, start-up logs at the default level, and
//! `GRPC_MAX_CONNECTION_AGE` recycling connections without failed calls.

use std::io::{BufRead, BufReader};
use std::process::{ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::{Process, RULES, command, http_get, loopback_env, metric, rules_root};
use crate::support::lifeline::Supervised;
use crate::support::{req1, until};

mod descriptors;

/// The real binary, its ports read from its own "serving" log line (every listener on port 0).
pub struct Binary {
    child: Supervised,
    logs: BufReader<ChildStderr>,
    /// Log lines read so far.
    seen: Vec<String>,
    grpc: u16,
    http: u16,
}

/// The port after `name: 127.0.0.1:` in a logged `Addresses`.
fn port_after(line: &str, name: &str) -> Option<u16> {
    let at = line.find(&format!("{name}: "))? + name.len() + 2;
    let rest = line[at..].trim_start_matches("Some(");
    let end = rest.find([',', ')', ' ', '"'])?;
    rest[..end].rsplit(':').next()?.parse().ok()
}

impl Binary {
    pub fn start(env: &[(&str, &str)]) -> Binary {
        Self::start_under(None, RULES, env)
    }

    /// Starts the binary with `rules` as its rule file.
    pub fn start_with(rules: &str, env: &[(&str, &str)]) -> Binary {
        Self::start_under(None, rules, env)
    }

    /// The gRPC port.
    pub fn grpc(&self) -> u16 {
        self.grpc
    }

    /// Ends the process with SIGKILL (no drain, nothing flushed) and waits for it.
    pub fn kill(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }

    /// Starts the binary, under `prlimit --nofile=SOFT:HARD` when `nofile` is given.
    fn start_under(nofile: Option<&str>, rules: &str, env: &[(&str, &str)]) -> Binary {
        let root = rules_root(rules);
        let mut all = loopback_env(&root);
        all.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let mut cmd = command(&all);
        if let Some(limits) = nofile {
            let binary = cmd.get_program().to_owned();
            let mut wrapped = Command::new("prlimit");
            wrapped.arg(format!("--nofile={limits}")).arg(binary);
            wrapped.env_clear();
            for (k, v) in cmd.get_envs() {
                if let Some(v) = v {
                    wrapped.env(k, v);
                }
            }
            cmd = wrapped;
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = Supervised::spawn(&mut cmd, "KILL").expect("spawn turnstile");
        let logs = BufReader::new(child.take_stderr().expect("stderr"));
        let mut binary = Binary {
            child,
            logs,
            seen: Vec::new(),
            grpc: 0,
            http: 0,
        };
        let serving = binary.wait_for_log("serving");
        binary.grpc = port_after(&serving, "grpc").expect("grpc port in the log");
        binary.http = port_after(&serving, "http").expect("http port in the log");
        binary
    }

    /// Reads log lines until one contains `text` (the process ending first fails the test).
    pub fn wait_for_log(&mut self, text: &str) -> String {
        loop {
            let mut line = String::new();
            let n = self.logs.read_line(&mut line).expect("read the log");
            assert!(
                n > 0,
                "the log ended before {text:?}:\n{}",
                self.seen.join("")
            );
            self.seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// The rest of the log, after the process exits, and the exit code.
    fn wait(mut self) -> (Option<i32>, String) {
        let code = self.child.wait().expect("wait").code();
        let mut rest = self.seen.join("");
        let mut line = String::new();
        while self.logs.read_line(&mut line).unwrap_or(0) > 0 {
            rest.push_str(&line);
            line.clear();
        }
        (code, rest)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_fails_no_call_and_exits_zero() {
    let p = Binary::start(&[
        ("SHUTDOWN_DRAIN_SECONDS", "2"),
        ("LOG_FORMAT", "json"),
        ("LOG_LEVEL", "info"),
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for _ in 0..8 {
        let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", p.grpc))
            .await
            .expect("connect");
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
    until(Duration::from_secs(10), "calls are answered", || {
        ok.load(Ordering::Relaxed) > 100
    })
    .await;
    p.signal("-TERM");
    // Health flips at once; calls keep being answered during the drain.
    until(
        Duration::from_secs(1),
        "health did not turn unhealthy at once",
        || http_get(p.http, "/healthcheck").map(|r| r.0) == Some(500),
    )
    .await;
    let during = ok.load(Ordering::Relaxed);
    until(
        Duration::from_millis(1500),
        "calls are answered during the drain",
        || ok.load(Ordering::Relaxed) > during + 100,
    )
    .await;
    // Clients stop sending (as Envoy does once its health check sees NOT_SERVING).
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("caller");
    }
    let (code, logs) = p.wait();
    assert_eq!(code, Some(0), "{logs}");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "{} calls answered, none may fail",
        ok.load(Ordering::Relaxed)
    );
    let line = logs
        .lines()
        .find(|l| l.contains("shutting down"))
        .unwrap_or_else(|| panic!("{logs}"));
    for field in [
        "\"@timestamp\":\"",
        "\"@message\":\"shutting down",
        "\"level\":\"info\"",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
}

#[test]
fn a_second_signal_ends_the_drain_and_start_up_logs_are_info() {
    // The reference's default LOG_LEVEL (warn): start-up is still visible, and not as warnings.
    let mut p = Binary::start(&[("SHUTDOWN_DRAIN_SECONDS", "600"), ("LOG_FORMAT", "json")]);
    p.signal("-INT");
    p.wait_for_log("shutting down");
    p.signal("-INT");
    // Not the 600 s drain: the second signal ends it (else this line never comes, and the log
    // ends without it when the drain runs out).
    p.wait_for_log("drain cut short");
    let (code, logs) = p.wait();
    assert_eq!(code, Some(0), "{logs}");
    for event in ["rate limit configuration loaded", "\"@message\":\"serving"] {
        let line = logs
            .lines()
            .find(|l| l.contains(event))
            .unwrap_or_else(|| panic!("{event} missing at the default level:\n{logs}"));
        assert!(line.contains("\"level\":\"info\""), "{line}");
    }
    assert!(
        !logs.contains("\"level\":\"warning\""),
        "a normal start and stop logs no warning:\n{logs}"
    );
}

/// Connections reach `GRPC_MAX_CONNECTION_AGE` under load (16 grpcio callers on one channel,
/// through a relay that counts the connections): each gets a GOAWAY at its age, its calls in
/// flight finish, grpcio moves to a new connection, and no call fails (issue 51: tonic, given a
/// grace, sent no GOAWAY and cut the connection at age + grace, calls and all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connection_age_recycles_connections_without_failing_calls() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("GRPC_MAX_CONNECTION_AGE", "300ms"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "1s"),
        ],
    );
    let relay = crate::support::proxy::Proxy::start(&format!("127.0.0.1:{}", p.grpc)).await;
    let addr = relay.addr();
    let loaded = tokio::task::spawn_blocking(move || grpcio_load(&addr, "4", "16"));
    let Some((ok, failed)) = loaded.await.expect("the load ran") else {
        return;
    };
    eprintln!(
        "max connection age under load: {ok} calls, {failed} failed, over {} connections",
        relay.connections()
    );
    assert!(ok > 100, "{ok} calls");
    assert!(
        relay.connections() >= 4,
        "connections were recycled: {}",
        relay.connections()
    );
    assert_eq!(failed, 0, "no call fails across GOAWAYs");
}

/// [`grpcio_loop`] with `threads` callers at once on one channel.
fn grpcio_load(addr: &str, seconds: &str, threads: &str) -> Option<(u64, u64)> {
    crate::peers::python(&["load", addr, seconds, threads]).map(|out| answered_failed(&out))
}

/// The two counts the peer script prints: calls answered, calls failed.
fn answered_failed(stdout: &str) -> (u64, u64) {
    let counts: Vec<u64> = stdout
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(counts.len(), 2, "{stdout}");
    (counts[0], counts[1])
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
    crate::support::wait::until(
        Duration::from_secs(15),
        "the fixed configuration loaded",
        || http_get(p.http, "/healthcheck").map(|r| r.0) == Some(200),
    )
    .await;
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
    // Every bad setting in one message, not one per attempt.
    let (code, stderr) = exit_of(&[
        ("GRPC_PORT", "80x".into()),
        ("NEAR_LIMIT_RATIO", "1.5".into()),
        ("LOG_FORMAT", "xml".into()),
    ]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("3 invalid settings"), "{stderr}");
    for name in ["GRPC_PORT", "NEAR_LIMIT_RATIO", "LOG_FORMAT"] {
        assert!(stderr.contains(name), "{name} missing: {stderr}");
    }
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
    crate::peers::python(&["loop", addr, seconds]).map(|out| answered_failed(&out))
}
