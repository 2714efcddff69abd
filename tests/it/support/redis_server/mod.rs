//! Real Redis for the tests: `redis-server` processes on free ports (Debian's package, which CI
//! installs), one alone, three as a cluster (`redis-cli --cluster create`), or a master with a
//! replica watched by a Sentinel. Killed on drop and when the test binary exits (`lifeline`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::ManualClock;
use turnstile::storage::redis::{RedisOptions, RedisStore, RedisTarget};

use crate::support::lifeline::Supervised;
use crate::support::{free_port, missing, unique};

mod cluster;
mod sentinel;

pub use cluster::RedisCluster;
pub use sentinel::{RedisSentinel, SENTINEL_MASTER};

fn binary(name: &str) -> Option<PathBuf> {
    [format!("/usr/bin/{name}"), format!("/usr/local/bin/{name}")]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// TLS material for servers that speak TLS to their clients and to each other (replication,
/// a sentinel's connections), requiring client certificates signed by `ca`.
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TlsFiles {
    /// The arguments that open a TLS port beside the plain one (the tests' own `redis-cli`).
    fn args(&self, tls_port: u16) -> Vec<String> {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            "yes".into(),
            "--tls-replication".into(),
            "yes".into(),
            "--tls-client-cert-file".into(),
            path(&self.client_cert),
            "--tls-client-key-file".into(),
            path(&self.client_key),
        ]
    }
}

/// One redis-server (or sentinel) process.
pub struct RedisProcess {
    pub port: u16,
    /// The TLS port, when started with [`TlsFiles`].
    pub tls_port: Option<u16>,
    child: Option<Supervised>,
    dir: PathBuf,
    args: Vec<String>,
}

impl RedisProcess {
    /// Starts `redis-server` with `args` on a free port; `None` when it is not installed.
    fn spawn(args: &[&str]) -> Option<RedisProcess> {
        Self::spawn_on(None, args)
    }

    /// A standalone server on `port` (which must be free).
    pub fn start_on(port: u16) -> Option<RedisProcess> {
        Self::spawn_on(Some(port), &[])
    }

    fn spawn_on(fixed: Option<u16>, args: &[&str]) -> Option<RedisProcess> {
        let Some(server) = binary("redis-server") else {
            missing("redis-server");
            return None;
        };
        for _ in 0..10 {
            let port = fixed.unwrap_or_else(free_port);
            let dir = std::env::temp_dir().join(unique("redis"));
            std::fs::create_dir_all(&dir).expect("dir");
            let mut command = Command::new(&server);
            if args.first() == Some(&"--sentinel") {
                let conf = dir.join("sentinel.conf");
                std::fs::write(&conf, "").expect("sentinel.conf");
                command.arg(&conf);
            }
            command
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .args(["--appendonly", "no", "--dir"])
                .arg(&dir)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = Supervised::spawn(&mut command, "KILL").expect("spawn redis-server");
            // Up when it answers as ours (not another test's server that took the port
            // first); not up when it exited (the port was taken), and then another port.
            let mine = format!("process_id:{}", child.id());
            let what = format!("redis-server to answer on {port}");
            let up = crate::support::wait::blocking_some(Duration::from_secs(10), &what, || {
                if child.has_exited() {
                    return Some(false);
                }
                cli(port, &["INFO", "server"])
                    .is_some_and(|info| info.contains(&mine))
                    .then_some(true)
            });
            if up {
                return Some(RedisProcess {
                    port,
                    tls_port: None,
                    child: Some(child),
                    dir,
                    args: args.iter().map(|a| (*a).to_owned()).collect(),
                });
            }
            child.stop();
        }
        panic!("redis-server did not start on any of 10 free ports");
    }

    /// A standalone server with TLS only (no plain port) on a free port, requiring client
    /// certificates signed by `ca` (`redis-cli --tls` with `client`'s certificate and key checks
    /// that it answers).
    pub fn start_tls(
        cert: &Path,
        key: &Path,
        ca: &Path,
        client: (&Path, &Path),
    ) -> Option<RedisProcess> {
        let server = binary("redis-server")?;
        let port = free_port();
        let dir = std::env::temp_dir().join(unique("redis-tls"));
        std::fs::create_dir_all(&dir).expect("dir");
        let tls: Vec<String> = [
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &cert.to_string_lossy(),
            "--tls-key-file",
            &key.to_string_lossy(),
            "--tls-ca-cert-file",
            &ca.to_string_lossy(),
            "--tls-auth-clients",
            "yes",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        let mut command = Command::new(server);
        command
            .args([
                "--port",
                "0",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "redis.log",
                "--dir",
            ])
            .arg(&dir)
            .args(&tls)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = Supervised::spawn(&mut command, "KILL").expect("spawn redis-server");
        let process = RedisProcess {
            port,
            tls_port: None,
            child: Some(child),
            dir,
            args: tls,
        };
        let cli = binary("redis-cli")?;
        let what = format!("redis-server with TLS to answer on {port}");
        crate::support::wait::blocking(Duration::from_secs(10), &what, || {
            Command::new(&cli)
                .args(["--tls", "-p", &port.to_string(), "--cert"])
                .arg(client.0)
                .arg("--key")
                .arg(client.1)
                .arg("--cacert")
                .arg(ca)
                .arg("PING")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
        });
        Some(process)
    }

    /// A standalone server started with `args` as well.
    pub fn start_with(args: &[&str]) -> Option<RedisProcess> {
        Self::spawn(args)
    }

    /// A standalone server.
    pub fn start() -> Option<RedisProcess> {
        Self::spawn(&[])
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts `redis-server` with `args` and, with `tls`, a TLS port as well.
    fn spawn_with(tls: Option<&TlsFiles>, args: &[&str]) -> Option<RedisProcess> {
        let Some(tls) = tls else {
            return Self::spawn(args);
        };
        let tls_port = free_port();
        let tls_args = tls.args(tls_port);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(tls_args.iter().map(String::as_str));
        let mut process = Self::spawn(&all)?;
        process.tls_port = Some(tls_port);
        Some(process)
    }

    /// The port clients are given: the TLS one when there is one.
    pub fn data_port(&self) -> u16 {
        self.tls_port.unwrap_or(self.port)
    }

    /// Starts the process again on its port, with its directory (a cluster node keeps its
    /// `nodes.conf` and rejoins).
    pub fn restart(&mut self) {
        self.kill();
        let server = binary("redis-server").expect("redis-server");
        let mut command = Command::new(server);
        command
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = Supervised::spawn(&mut command, "KILL").expect("spawn redis-server");
        let mine = format!("process_id:{}", child.id());
        self.child = Some(child);
        let what = format!("redis-server restarted on {}", self.port);
        crate::support::wait::blocking(Duration::from_secs(10), &what, || {
            cli(self.port, &["INFO", "server"]).is_some_and(|i| i.contains(&mine))
        });
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.stop();
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How many keys the Redis on `port` holds that match `pattern` (`KEYS`).
pub fn count_keys(port: u16, pattern: &str) -> Option<usize> {
    cli(port, &["KEYS", pattern]).map(|k| k.lines().filter(|l| !l.trim().is_empty()).count())
}

/// `redis-cli -p port args...`, its output.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new(binary("redis-cli")?)
        .args(["-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A store over `target` on `clock`.
pub fn redis_store(target: RedisTarget, clock: &ManualClock) -> RedisStore {
    redis_store_as(target, None, clock)
}

/// A store over `target` on `clock` that waits `timeout` for an answer (tests that compare
/// answers, not deadlines, wait long enough for a loaded machine).
pub fn redis_store_within(
    target: RedisTarget,
    clock: &ManualClock,
    timeout: Duration,
) -> RedisStore {
    let options = RedisOptions {
        target,
        auth: None,
        timeout,
        jitter_max_seconds: 0,
        tls: None,
    };
    RedisStore::new(options, Arc::new(clock.clone()))
}

/// A store over `target` on `clock`, authenticating with `auth`.
pub fn redis_store_as(
    target: RedisTarget,
    auth: Option<turnstile::storage::redis::RedisAuth>,
    clock: &ManualClock,
) -> RedisStore {
    let options = RedisOptions {
        target,
        auth,
        timeout: Duration::from_secs(2),
        jitter_max_seconds: 0,
        tls: None,
    };
    RedisStore::new(options, Arc::new(clock.clone()))
}

/// The settings of a Redis backend on `main` with `REDIS_PERSECOND` on `second` (both TCP).
pub fn per_second_env<'a>(main: &'a str, second: &'a str) -> Vec<(&'static str, &'a str)> {
    vec![
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", main),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", second),
    ]
}
