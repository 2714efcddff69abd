//! The service run in process for the tests: [`Process`] (an `App` from settings given as an
//! environment map, on a runtime of its own, listeners on port 0), the real binary with an exact
//! environment ([`command`]), and small HTTP and metrics helpers. Tests are in `process.rs`
//! and elsewhere.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use turnstile::app::{App, AppError};
use turnstile::clock::{Clock, SystemClock};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use turnstile::settings::Settings;

use crate::support::unique;

pub const RULES: &str = "domain: ops\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";

/// A running service (an `App` on a runtime of its own, on its own thread), stopped on drop.
pub struct Process {
    pub grpc: u16,
    pub http: u16,
    pub debug: u16,
    pub prometheus: u16,
    pub dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), AppError>>>,
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(tag));
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

/// The real binary with exactly `env` (and `PATH`).
pub fn command(env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Rules under `root` (RUNTIME_ROOT/ratelimit/config) and every listener on a loopback port 0.
pub fn loopback_env(root: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", "0".into()),
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", "0".into()),
    ]
}

/// The settings of [`loopback_env`] plus the Prometheus port, no drain, and `env`.
pub fn settings(root: &Path, env: &[(&str, &str)]) -> Settings {
    let mut all: HashMap<String, String> = loopback_env(root)
        .into_iter()
        .chain([
            ("USE_PROMETHEUS", "true".to_owned()),
            ("PROMETHEUS_ADDR", "127.0.0.1:0".to_owned()),
            ("SHUTDOWN_DRAIN_SECONDS", "0".to_owned()),
        ])
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Settings::from_env(&move |k| all.get(k).cloned(), None).expect("settings")
}

impl Process {
    /// Starts the service with rules under `root` plus `env`, and waits until it is healthy.
    pub fn start(root: &Path, env: &[(&str, &str)]) -> Process {
        Self::start_on(root, env, 2)
    }

    /// Starts the service; it is bound (and its ports answer) when this returns.
    pub fn spawn(root: &Path, env: &[(&str, &str)]) -> Process {
        Self::try_spawn(settings(root, env), root).expect("the service starts")
    }

    /// Builds and runs an `App` from `settings`; the build's error if it fails.
    pub fn try_spawn(settings: Settings, root: &Path) -> Result<Process, AppError> {
        Self::try_spawn_with(settings, root, Arc::new(SystemClock))
    }

    /// The same, reading time from `clock` (the production wiring with time a test moves).
    pub fn try_spawn_with(
        settings: Settings,
        root: &Path,
        clock: Arc<dyn Clock>,
    ) -> Result<Process, AppError> {
        Self::try_spawn_on(settings, root, clock, 2)
    }

    /// Starts the service on a runtime of `workers` threads and waits until it is healthy.
    pub fn start_on(root: &Path, env: &[(&str, &str)], workers: usize) -> Process {
        let clock = Arc::new(SystemClock);
        let p = Self::try_spawn_on(settings(root, env), root, clock, workers)
            .expect("the service starts");
        crate::support::wait::blocking(Duration::from_secs(20), "turnstile healthy", || {
            http_get(p.http, "/healthcheck").map(|r| r.0) == Some(200)
        });
        p
    }

    /// Builds and runs an `App` on a runtime of `workers` threads of its own.
    fn try_spawn_on(
        settings: Settings,
        root: &Path,
        clock: Arc<dyn Clock>,
        workers: usize,
    ) -> Result<Process, AppError> {
        let (stop, stopped) = oneshot::channel::<()>();
        let (built_tx, built_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let deps = turnstile::app::Dependencies { clock, store: None };
                let app = match App::build_with(settings, deps).await {
                    Ok(app) => app,
                    Err(e) => {
                        let _ = built_tx.send(Err(e));
                        return Ok(());
                    }
                };
                let _ = built_tx.send(Ok(app.addresses().clone()));
                let stopped = async move {
                    let _ = stopped.await;
                };
                app.run_until(stopped, std::future::ready(())).await
            })
        });
        let addresses = built_rx.recv().expect("the app thread answers")?;
        Ok(Process {
            grpc: addresses.grpc.map_or(0, |a| a.port()),
            http: addresses.http.port(),
            debug: addresses.debug.port(),
            prometheus: addresses.prometheus.map_or(0, |a| a.port()),
            dir: root.join("ratelimit/config"),
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        crate::support::connect(self.grpc).await
    }

    pub fn metrics(&self) -> String {
        http_get(self.debug, "/metrics").expect("metrics").1
    }

    /// Stops the service (no drain) and returns how it ended.
    pub fn stop(mut self) -> Result<(), AppError> {
        self.stop.take();
        self.thread
            .take()
            .map_or(Ok(()), |t| t.join().expect("app thread"))
    }
}

/// Makes `root/ratelimit/config/rules.yaml`.
pub fn rules_root(text: &str) -> PathBuf {
    let root = temp_dir("root");
    let dir = root.join("ratelimit/config");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("rules.yaml"), text).expect("write");
    root
}

/// A tiny HTTP/1.1 client: (status, body).
pub fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http(port, "GET", path, "")
}

/// The value of a metric line that starts with `series`.
pub fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
