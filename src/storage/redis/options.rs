//! How to reach Redis: where it is (one server, a unix socket, a cluster, a master behind
//! Sentinel), credentials, deadline, TTL jitter and TLS material — plain data built from the
//! settings, with `Debug` that never prints a password or key material.
//!
//! Must not touch: connections, commands, settings parsing.

use std::time::Duration;

/// Where Redis is (`REDIS_TYPE`, `REDIS_SOCKET_TYPE`, `REDIS_URL`; the settings build it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server at `host:port`.
    Tcp(String),
    /// One server on a unix socket.
    Unix(String),
    /// Cluster seed nodes (`host:port`).
    Cluster(Vec<String>),
    /// A master named `master`, found through these sentinels.
    Sentinel {
        /// The monitored master's name.
        master: String,
        /// The sentinels' `host:port`.
        sentinels: Vec<String>,
        /// `REDIS_SENTINEL_AUTH`: credentials for the sentinels themselves.
        sentinel_auth: Option<RedisAuth>,
    },
}

impl RedisTarget {
    /// The address or addresses, for labels and messages (never credentials).
    pub fn addresses(&self) -> String {
        match self {
            RedisTarget::Tcp(a) | RedisTarget::Unix(a) => a.clone(),
            RedisTarget::Cluster(nodes) => nodes.join(","),
            RedisTarget::Sentinel {
                master, sentinels, ..
            } => format!("{master} via {}", sentinels.join(",")),
        }
    }
}

/// Credentials (`REDIS_AUTH`, `REDIS_SENTINEL_AUTH`: `password` or `user:password`); `Debug`
/// never prints the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisAuth {
    /// The ACL user, when one was named.
    pub user: Option<String>,
    /// The password.
    pub password: String,
}

impl RedisAuth {
    /// `password` or `user:password`; `None` when empty.
    pub fn parse(text: &str) -> Option<RedisAuth> {
        match text.split_once(':') {
            _ if text.is_empty() => None,
            Some((user, password)) => Some(RedisAuth {
                user: Some(user.to_owned()),
                password: password.to_owned(),
            }),
            None => Some(RedisAuth {
                user: None,
                password: text.to_owned(),
            }),
        }
    }
}

impl std::fmt::Debug for RedisAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAuth")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisOptions {
    /// Where.
    pub target: RedisTarget,
    /// `REDIS_AUTH`.
    pub auth: Option<RedisAuth>,
    /// Deadline of one operation, and of a connection attempt.
    pub timeout: Duration,
    /// Extra TTL of up to this many seconds, spread per key.
    pub jitter_max_seconds: u64,
    /// TLS to every node (single or cluster).
    pub tls: Option<RedisTlsOptions>,
}

/// TLS material, already read from its files: as bytes for redis-rs's connections, and as the
/// rustls configuration our own pipelined connections use (built from the same files; with
/// `skip_hostname_verification` it still checks the chain, as the reference does, where
/// redis-rs's can only skip every check).
#[derive(Clone)]
pub struct RedisTlsOptions {
    /// PEM CA bundle; the system's roots when `None`.
    pub root_cert: Option<Vec<u8>>,
    /// PEM client certificate chain and key (mTLS).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept a server certificate issued for another name.
    pub skip_hostname_verification: bool,
    /// The same, for our own connections (`pipe`).
    pub config: std::sync::Arc<tokio_rustls::rustls::ClientConfig>,
}

impl std::fmt::Debug for RedisTlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTlsOptions")
            .field("root_cert", &self.root_cert.is_some())
            .field("client", &self.client.is_some())
            .field(
                "skip_hostname_verification",
                &self.skip_hostname_verification,
            )
            .finish()
    }
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("target", &self.target)
            .field("auth", &self.auth)
            .field("timeout", &self.timeout)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}
