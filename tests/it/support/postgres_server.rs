//! A real PostgreSQL server for a test (Debian's packages): `initdb` into a temporary
//! directory and `pg_ctl start` on a free port, as the `postgres` user when the tests run as
//! root (initdb refuses root), stopped and removed on drop, and stopped when the test binary
//! exits (`lifeline`). Each test may also use its own
//! schema (`POSTGRES_SCHEMA`) on a server.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use turnstile::clock::Clock;
use turnstile::storage::postgres::{MigrateMode, PostgresOptions, PostgresStore};

use crate::support::lifeline::Lifeline;
use crate::support::process::temp_dir;
use crate::support::{free_port, missing, unique};

/// The directory of `initdb`, `pg_ctl` and `psql` (the newest installed major version).
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop()
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Makes `paths` (recursively) the `postgres` user's when the tests run as root (initdb and
/// the server refuse to run as root, and the server reads its key only as its owner).
fn give_to_postgres(paths: &[&std::path::Path]) {
    if !running_as_root() {
        return;
    }
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .args(paths)
        .status()
        .expect("chown");
    assert!(status.success(), "chown {paths:?}");
}

/// A PostgreSQL server, stopped on drop.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    /// Extra server options (`-c name=value …`), e.g. TLS.
    options: String,
    /// Stops the server (`pg_ctl stop -m immediate`) on drop or when the test binary exits.
    lifeline: Option<Lifeline>,
}

impl Postgres {
    /// Starts a server; `None` (a visible skip, or a failure when peers are required) when
    /// PostgreSQL is not installed.
    pub fn start() -> Option<Postgres> {
        Self::start_with(None)
    }

    /// Starts a server that also speaks TLS with `cert` and `key` (PEM), copied into its data
    /// directory with the permissions PostgreSQL requires.
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> Option<Postgres> {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&std::path::Path, &std::path::Path)>) -> Option<Postgres> {
        let Some(bin) = bin_dir() else {
            missing("PostgreSQL (initdb and pg_ctl, Debian's postgresql package)");
            return None;
        };
        let dir = temp_dir("pg");
        give_to_postgres(&[dir.as_path()]);
        let mut pg = Postgres {
            port: free_port(),
            dir,
            bin,
            options: String::new(),
            lifeline: None,
        };
        let data_dir = pg.dir.join("data");
        let data = data_dir.to_str().expect("path");
        pg.run(
            "initdb",
            &[
                "-D",
                data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        if let Some((cert, key)) = tls {
            std::fs::copy(cert, data_dir.join("server.crt")).expect("copy cert");
            std::fs::copy(key, data_dir.join("server.key")).expect("copy key");
            give_to_postgres(&[&data_dir.join("server.crt"), &data_dir.join("server.key")]);
            use std::os::unix::fs::PermissionsExt;
            let private = std::fs::Permissions::from_mode(0o600);
            std::fs::set_permissions(data_dir.join("server.key"), private).expect("chmod");
            pg.options = " -c ssl=on".into();
        }
        pg.arm();
        pg.ctl(&["start", "-w", "-t", "30"]);
        Some(pg)
    }

    /// A streaming-replication standby of `primary` (`pg_basebackup -R`), started.
    pub fn standby_of(primary: &Postgres) -> Postgres {
        let dir = temp_dir("pg-standby");
        give_to_postgres(&[dir.as_path()]);
        let mut standby = Postgres {
            port: free_port(),
            dir,
            bin: primary.bin.clone(),
            options: String::new(),
            lifeline: None,
        };
        let data = standby.dir.join("data");
        let port = primary.port.to_string();
        standby.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                data.to_str().expect("path"),
                "-R",
                "-X",
                "stream",
            ],
        );
        standby.arm();
        standby.ctl(&["start", "-w", "-t", "30"]);
        standby
    }

    /// The lifeline that stops this server however the test ends (set before it starts).
    fn arm(&mut self) {
        let data = self.dir.join("data");
        let mut stop = self.command("pg_ctl");
        stop.arg("-D").arg(&data).args(["stop", "-m", "immediate"]);
        self.lifeline = Some(Lifeline::new(&stop));
    }

    /// `tool` of this server's PostgreSQL, as the `postgres` user when the tests run as root.
    fn command(&self, tool: &str) -> Command {
        let binary = self.bin.join(tool);
        if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&binary);
            c
        } else {
            Command::new(&binary)
        }
    }

    fn output(&self, tool: &str, args: &[&str]) -> std::process::Output {
        self.command(tool)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect(tool)
    }

    fn run(&self, tool: &str, args: &[&str]) -> String {
        let out = self.output(tool, args);
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `pg_ctl` on this server's data directory, port and socket directory.
    pub fn ctl(&self, args: &[&str]) {
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1{}",
            self.port,
            self.dir.display(),
            self.options
        );
        let mut all = vec![
            "-D",
            data.to_str().expect("path"),
            "-l",
            log.to_str().expect("path"),
        ];
        all.extend_from_slice(args);
        if args
            .first()
            .is_some_and(|a| *a == "start" || *a == "restart")
        {
            all.extend_from_slice(&["-o", &options]);
            return drop(self.run("pg_ctl", &all));
        }
        self.run("pg_ctl", &all);
    }

    /// A login role `name` whose connections over TCP must give `password` (scram-sha-256;
    /// every other role is still trusted), then `extra` SQL about it.
    pub fn role_with_password(&self, name: &str, password: &str, extra: &str) {
        self.psql(&format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"));
        if !extra.is_empty() {
            self.psql(extra);
        }
        let hba = self.dir.join("data/pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        let line = format!("host all {name} 127.0.0.1/32 scram-sha-256\n");
        std::fs::write(&hba, format!("{line}{rest}")).expect("write pg_hba.conf");
        self.reload();
    }

    /// Reloads the configuration files and returns once the server has: `pg_ctl reload` and
    /// `pg_reload_conf()` only signal the postmaster, which reloads, signals its backends and
    /// reloads `pg_hba.conf` later. A new session reports the load time of the postmaster it
    /// was forked from, so a changed `pg_conf_load_time()` means the whole reload is done and
    /// every existing backend has been signalled before it reads its next command.
    pub fn reload(&self) {
        let loaded = || self.try_psql("SELECT pg_conf_load_time()");
        let before = loaded();
        self.ctl(&["reload"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while loaded() == before {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not reload its configuration in 10 s"
            );
        }
    }

    /// The connection URI of `user` with `password`.
    pub fn url_of(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// Freezes (`STOP`) or thaws (`CONT`) the server and its backends: connections stay open
    /// and nothing answers, as a hung database does. The postmaster is frozen first (so it
    /// forks no backend that escapes the freeze) and thawed last.
    pub fn signal_all(&self, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).expect("pid file");
        let pid = pid.lines().next().expect("pid").trim().to_owned();
        let postmaster = || {
            let main = Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .expect("kill");
            assert!(main.success(), "signal the postmaster");
        };
        if signal == "STOP" {
            postmaster();
        }
        let children = Command::new("pkill")
            .args([&format!("-{signal}"), "-P", &pid])
            .status()
            .expect("pkill");
        assert!(children.success(), "signal the backends");
        if signal != "STOP" {
            postmaster();
        }
    }

    /// The connection URI (user postgres, no password: the server trusts loopback).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// One SQL statement through `psql`, its output, or `None` if it failed.
    pub fn try_psql(&self, sql: &str) -> Option<String> {
        let port = self.port.to_string();
        let out = self.output("psql", &Self::psql_args(&port, sql));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// One SQL statement through `psql`, its unaligned output.
    pub fn psql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        self.run("psql", &Self::psql_args(&port, sql))
            .trim()
            .to_owned()
    }

    fn psql_args<'a>(port: &'a str, sql: &'a str) -> [&'a str; 9] {
        [
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-U",
            "postgres",
            "-At",
            "-c",
            sql,
        ]
    }

    /// A store on this server in a schema of its own (migrated at its first call).
    pub fn store(&self, clock: &Arc<dyn Clock>) -> (PostgresStore, String) {
        let schema = unique("t").replace('-', "_");
        let store = PostgresStore::new(self.options(&schema), Arc::clone(clock)).expect("store");
        (store, schema)
    }

    /// Options for `schema` on this server.
    pub fn options(&self, schema: &str) -> PostgresOptions {
        PostgresOptions {
            config: self.url().parse().expect("config"),
            tls: None,
            pool_size: 16,
            timeout: std::time::Duration::from_secs(5),
            schema: schema.to_owned(),
            migrate: MigrateMode::Auto,
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Fired: the server is stopped before its directory goes.
        drop(self.lifeline.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
