//! The memcached counter store (`BACKEND_TYPE=memcache`). The only place that knows bb8 and
//! async-memcached.
//!
//! Each counter is one atomic meta arithmetic command (`ma <b64 key> b N<ttl> J<hits> D<hits> v`)
//! that creates the counter with its TTL or adds to it, and returns the count after the hit in
//! one round trip, so the decision never rests on a read taken before the write. Keys go out
//! base64-encoded. A request's hits go to their servers (on a consistent-hash ring)
//! concurrently on pooled connections, so a request costs one round trip of latency whatever
//! its number of descriptors. Every operation has a deadline; failures are typed, name the
//! server, and put it into backoff.

mod connection;
mod ring;
mod server;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;

use super::{CounterStore, Hit, Op, StorageError};
use crate::clock::Clock;
use connection::Protocol;
use ring::Ring;
use server::Server;

/// memcached reads any exptime above this (30 days) as an absolute Unix time.
const RELATIVE_EXPTIME_MAX: u64 = 2_592_000;

/// How to reach memcached.
#[derive(Debug, Clone)]
pub struct MemcachedOptions {
    /// `host:port` of every server (IPv4 or a host name).
    pub servers: Vec<String>,
    /// Connections per server.
    pub pool_size: u32,
    /// Deadline of one operation, connection included.
    pub timeout: Duration,
    /// Extra TTL of up to this many seconds, spread per key (`EXPIRATION_JITTER_MAX_SECONDS`).
    pub jitter_max_seconds: u64,
    /// Use classic `incr`/`add` instead of meta commands (servers older than 1.6).
    pub classic_protocol: bool,
}

/// The memcached counter store.
#[derive(Debug, Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    servers: Vec<Server>,
    ring: Ring,
    timeout: Duration,
    jitter_max_seconds: u64,
    clock: Arc<dyn Clock>,
}

impl MemcachedStore {
    /// A store over the given servers. Connections are made lazily.
    pub fn new(options: MemcachedOptions, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        if options.servers.is_empty() {
            return Err(StorageError::Unavailable(
                "no memcached servers configured".into(),
            ));
        }
        let protocol = if options.classic_protocol {
            Protocol::Classic
        } else {
            Protocol::Meta
        };
        let servers = options
            .servers
            .iter()
            .map(|name| Server::new(name.clone(), options.pool_size, options.timeout, protocol))
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                ring: Ring::new(&options.servers),
                servers,
                timeout: options.timeout,
                jitter_max_seconds: options.jitter_max_seconds,
                clock,
            }),
        })
    }

    /// The server (`host:port`) that owns `key`.
    pub fn server_for(&self, key: &str) -> Option<&str> {
        self.inner
            .ring
            .server_for(key.as_bytes())
            .map(|i| self.inner.servers[i].name.as_str())
    }
}

impl Inner {
    /// memcached's exptime for a counter: the end of its window plus jitter plus one second
    /// (memcached may expire an item up to a second early), relative when it fits in 30 days,
    /// absolute otherwise, so week, month and year counters live as long as their windows.
    fn exptime(&self, key: &str, expires_at: u64, now: u64) -> u64 {
        let jitter = match self.jitter_max_seconds {
            0 => 0,
            max => xxhash_rust::xxh3::xxh3_64(key.as_bytes()) % max,
        };
        let until = expires_at + jitter + 1;
        let relative = until.saturating_sub(now).max(1);
        if relative > RELATIVE_EXPTIME_MAX {
            until
        } else {
            relative
        }
    }

    async fn apply(&self, hit: &Hit, now: u64) -> Result<u64, StorageError> {
        let index = self
            .ring
            .server_for(hit.key.as_bytes())
            .ok_or_else(|| StorageError::Unavailable("no memcached servers".into()))?;
        let server = &self.servers[index];
        if !server.admit() {
            return Err(StorageError::Unavailable(format!(
                "memcached {} is down (retrying with backoff)",
                server.name
            )));
        }
        let operation = async {
            let mut conn = server.pool.get().await.map_err(|e| match e {
                bb8::RunError::User(e) => e,
                bb8::RunError::TimedOut => async_memcached::Error::ConnectionClosed,
            })?;
            match hit.op {
                Op::Add(n) => {
                    connection::add(
                        &mut conn,
                        server.protocol,
                        &hit.key,
                        n,
                        self.exptime(&hit.key, hit.expires_at, now),
                    )
                    .await
                }
                Op::Sub(n) => connection::sub(&mut conn, server.protocol, &hit.key, n).await,
            }
        };
        let result = match tokio::time::timeout(self.timeout, operation).await {
            Ok(result) => result,
            Err(_) => {
                server.record_failure();
                return Err(StorageError::Timeout(format!(
                    "memcached {} did not answer within {:?}",
                    server.name, self.timeout
                )));
            }
        };
        match result {
            Ok(count) => {
                server.record_success();
                Ok(count)
            }
            Err(async_memcached::Error::Protocol(status)) => {
                server.record_success();
                Err(StorageError::Protocol(format!(
                    "memcached {}: {status:?}",
                    server.name
                )))
            }
            Err(err) => {
                server.record_failure();
                Err(StorageError::Unavailable(format!(
                    "memcached {}: {err}",
                    server.name
                )))
            }
        }
    }
}

impl CounterStore for MemcachedStore {
    async fn hit(&self, hits: &[Hit]) -> Result<Vec<u64>, StorageError> {
        let now = self.inner.clock.now();
        try_join_all(hits.iter().map(|hit| self.inner.apply(hit, now))).await
    }

    async fn ready(&self) -> bool {
        for server in &self.inner.servers {
            if server.is_up() {
                return true;
            }
            let probe = async {
                let mut conn = server.pool.get().await.ok()?;
                conn.version().await.ok()
            };
            if let Ok(Some(_)) = tokio::time::timeout(self.inner.timeout * 10, probe).await {
                server.record_success();
                return true;
            }
        }
        false
    }
}
