//! A master with a replica watched by one Sentinel, plain or speaking TLS.

use std::time::Duration;

use turnstile::storage::redis::RedisTarget;

use super::{RedisProcess, TlsFiles, cli};

/// A master, a replica and one Sentinel watching them (quorum 1, fast failover).
pub struct RedisSentinel {
    pub master: RedisProcess,
    pub replica: RedisProcess,
    pub sentinel: RedisProcess,
}

pub const SENTINEL_MASTER: &str = "turnstile";

impl RedisSentinel {
    pub fn start() -> Option<RedisSentinel> {
        Self::start_with(None)
    }

    /// Turnstile's target for this set: its master through its one Sentinel, no password.
    pub fn target(&self) -> RedisTarget {
        RedisTarget::Sentinel {
            master: SENTINEL_MASTER.into(),
            sentinels: vec![self.sentinel.addr()],
            sentinel_auth: None,
        }
    }

    /// The same set speaking TLS everywhere: to clients, between master and replica, and from
    /// the sentinel to the servers; clients are given the TLS ports only (`data_port`), the
    /// plain ones are the tests' own `redis-cli`.
    pub fn start_tls(tls: &TlsFiles) -> Option<RedisSentinel> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<&TlsFiles>) -> Option<RedisSentinel> {
        // No 5 s wait before the replica's first (diskless) sync.
        let master = RedisProcess::spawn_with(tls, &["--repl-diskless-sync-delay", "0"])?;
        let master_port = master.data_port().to_string();
        let replica = RedisProcess::spawn_with(tls, &["--replicaof", "127.0.0.1", &master_port])?;
        // The sentinel learns the replicas from the master's INFO, which it asks every 10 s:
        // let the replica connect first, so the first INFO already names it.
        crate::support::wait::blocking(Duration::from_secs(10), "the replica connected", || {
            cli(master.port, &["INFO", "replication"])
                .is_some_and(|i| i.contains("connected_slaves:1"))
        });
        let sentinel = RedisProcess::spawn_with(tls, &["--sentinel"])?;
        let port = master_port;
        cli(
            sentinel.port,
            &[
                "SENTINEL",
                "MONITOR",
                SENTINEL_MASTER,
                "127.0.0.1",
                &port,
                "1",
            ],
        )
        .expect("sentinel monitor");
        for (option, value) in [
            ("down-after-milliseconds", "500"),
            ("failover-timeout", "2000"),
        ] {
            cli(
                sentinel.port,
                &["SENTINEL", "SET", SENTINEL_MASTER, option, value],
            )
            .expect("sentinel set");
        }
        // A failover needs a replica the sentinel knows (it learns them from the master's INFO,
        // every 10 s) and that is in sync.
        let replica_port = format!("{}", replica.data_port());
        crate::support::wait::blocking(
            Duration::from_secs(30),
            "the sentinel seeing an in-sync replica",
            || {
                cli(sentinel.port, &["SENTINEL", "REPLICAS", SENTINEL_MASTER])
                    .is_some_and(|r| r.contains(&replica_port))
                    && cli(replica.port, &["INFO", "replication"])
                        .is_some_and(|i| i.contains("master_link_status:up"))
            },
        );
        Some(RedisSentinel {
            master,
            replica,
            sentinel,
        })
    }
}
