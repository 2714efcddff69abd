//! The memcached counter store (`BACKEND_TYPE=memcache`). The only place that knows bb8 and
//! async-memcached.
//!
//! Each counter is one atomic meta arithmetic command (`ma <b64 key> b N<ttl> J<hits> D<hits> v`)
//! that creates the counter with its TTL or adds to it, and returns the count after the hit in
//! one round trip, so the decision never rests on a read taken before the write. Keys go out
//! base64-encoded. A request's hits go to their servers (on a consistent-hash ring)
//! concurrently on pooled connections, so a request costs one round trip of latency whatever
//! its number of descriptors. Every operation has a deadline; failures are typed, name the
//! server, and put it into backoff. The server list is fixed (`MEMCACHE_HOST_PORT`) or
//! discovered from DNS SRV (`MEMCACHE_SRV`) and refreshed.

mod connection;
mod pipeline;
mod ring;
mod server;
pub mod srv;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::try_join_all;

use super::{CounterStore, Hit, StorageError};
use crate::clock::Clock;
use connection::Protocol;
use pipeline::Reply;
use ring::Ring;
use server::Server;
use srv::Resolver;

/// memcached reads any exptime above this (30 days) as an absolute Unix time.
const RELATIVE_EXPTIME_MAX: u64 = 2_592_000;

/// How to reach memcached.
#[derive(Debug, Clone)]
pub struct MemcachedOptions {
    /// `host:port` of every server.
    pub servers: Vec<String>,
    /// Connections per server.
    pub pool_size: u32,
    /// Deadline of one operation, connection included.
    pub timeout: Duration,
    /// Extra TTL of up to this many seconds, spread per key (`EXPIRATION_JITTER_MAX_SECONDS`).
    pub jitter_max_seconds: u64,
    /// Use classic `incr`/`add` instead of meta commands (servers older than 1.6); implies
    /// the pooled client.
    pub classic_protocol: bool,
    /// Which client carries the commands.
    pub client: MemcachedClient,
}

/// How commands reach a memcached server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemcachedClient {
    /// A few shared connections, each pipelining every caller's commands (the default).
    #[default]
    Pipelined,
    /// A bb8 pool of async-memcached connections, one command in flight per connection.
    Pool,
}

/// Pipelined connections per server: two keep a write in flight while the other fills.
const PIPELINES_PER_SERVER: usize = 2;

/// The memcached counter store.
#[derive(Debug, Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

/// The current servers and their ring; replaced whole when the server list changes.
#[derive(Debug)]
struct Topology {
    servers: Vec<Arc<Server>>,
    ring: Ring,
}

#[derive(Debug)]
struct Inner {
    topology: ArcSwap<Topology>,
    protocol: Protocol,
    client: MemcachedClient,
    pool_size: u32,
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
        let empty = Topology {
            servers: Vec::new(),
            ring: Ring::new(&[]),
        };
        let store = Self {
            inner: Arc::new(Inner {
                topology: ArcSwap::from_pointee(empty),
                protocol,
                client: if options.classic_protocol {
                    MemcachedClient::Pool
                } else {
                    options.client
                },
                pool_size: options.pool_size,
                timeout: options.timeout,
                jitter_max_seconds: options.jitter_max_seconds,
                clock,
            }),
        };
        store.set_servers(options.servers);
        Ok(store)
    }

    /// A store over the servers that `srv_name` resolves to (`MEMCACHE_SRV`).
    pub async fn discover(
        srv_name: &str,
        resolver: &Resolver,
        mut options: MemcachedOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StorageError> {
        options.servers = resolver
            .lookup(srv_name)
            .await
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        tracing::warn!(servers = ?options.servers, "memcached servers discovered");
        Self::new(options, clock)
    }

    /// Re-resolves `srv_name` every `every` (`MEMCACHE_SRV_REFRESH`); a failed lookup keeps the
    /// current servers.
    pub fn spawn_refresh(
        &self,
        srv_name: String,
        resolver: Resolver,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match resolver.lookup(&srv_name).await {
                    Ok(servers) if servers != store.servers() => {
                        tracing::warn!(?servers, "memcached servers changed");
                        store.set_servers(servers);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "memcached SRV refresh failed; keeping the current servers");
                    }
                }
            }
        })
    }

    /// Replaces the server list; servers that stay keep their connections.
    pub fn set_servers(&self, names: Vec<String>) {
        let current = self.inner.topology.load();
        let servers = names
            .iter()
            .map(
                |name| match current.servers.iter().find(|s| &s.name == name) {
                    Some(existing) => Arc::clone(existing),
                    None => Arc::new(Server::new(
                        name.clone(),
                        self.inner.pool_size,
                        PIPELINES_PER_SERVER,
                        self.inner.timeout,
                    )),
                },
            )
            .collect();
        let topology = Topology {
            ring: Ring::new(&names),
            servers,
        };
        self.inner.topology.store(Arc::new(topology));
    }

    /// The current servers, in the order given.
    pub fn servers(&self) -> Vec<String> {
        self.inner
            .topology
            .load()
            .servers
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// The server (`host:port`) that owns `key`.
    pub fn server_for(&self, key: &str) -> Option<String> {
        let topology = self.inner.topology.load();
        let index = topology.ring.server_for(key.as_bytes())?;
        Some(topology.servers[index].name.clone())
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

    /// The counts after `hits`, which all belong to `server`.
    async fn apply(
        &self,
        server: &Server,
        hits: &[&Hit],
        now: u64,
    ) -> Result<Vec<u64>, StorageError> {
        if !server.admit() {
            return Err(StorageError::Unavailable(format!(
                "memcached {} is down (retrying with backoff)",
                server.name
            )));
        }
        let operation = async {
            match self.client {
                MemcachedClient::Pipelined => self.pipelined(server, hits, now).await,
                MemcachedClient::Pool => {
                    let distinct = hits
                        .iter()
                        .enumerate()
                        .all(|(i, h)| hits[..i].iter().all(|o| o.key != h.key));
                    if distinct {
                        // One connection per hit, all at once.
                        try_join_all(hits.iter().map(|hit| self.pooled(server, hit, now))).await
                    } else {
                        // The same counter twice: in order, so each answer is the count after
                        // exactly the hits before it.
                        let mut counts = Vec::with_capacity(hits.len());
                        for hit in hits {
                            counts.push(self.pooled(server, hit, now).await?);
                        }
                        Ok(counts)
                    }
                }
            }
        };
        let result = match tokio::time::timeout(self.timeout, operation).await {
            Ok(result) => result,
            Err(_) => {
                server.record_failure();
                server.drop_pipelines();
                return Err(StorageError::Timeout(format!(
                    "memcached {} did not answer within {:?}",
                    server.name, self.timeout
                )));
            }
        };
        match result {
            Ok(counts) => {
                server.record_success();
                Ok(counts)
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
                server.drop_pipelines();
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
        let topology = self.inner.topology.load();
        // Group the hits by server: one batch (one write, one round trip) per server, the
        // servers in parallel.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, hit) in hits.iter().enumerate() {
            let server = topology
                .ring
                .server_for(hit.key.as_bytes())
                .ok_or_else(|| StorageError::Unavailable("no memcached servers".into()))?;
            match groups.iter_mut().find(|(s, _)| *s == server) {
                Some((_, members)) => members.push(i),
                None => groups.push((server, vec![i])),
            }
        }
        let batches = groups.iter().map(|(server, members)| {
            let group: Vec<&Hit> = members.iter().map(|&i| &hits[i]).collect();
            let topology = &topology;
            async move {
                self.inner
                    .apply(&topology.servers[*server], &group, now)
                    .await
            }
        });
        let answers = try_join_all(batches).await?;
        let mut counts = vec![0; hits.len()];
        for ((_, members), answer) in groups.iter().zip(answers) {
            for (&i, count) in members.iter().zip(answer) {
                counts[i] = count;
            }
        }
        Ok(counts)
    }

    fn gauges(&self) -> Vec<(&'static str, String, u64)> {
        let topology = self.inner.topology.load();
        let mut out = Vec::new();
        for server in &topology.servers {
            let label = format!("server=\"{}\"", server.name);
            let pool = server.pool.state();
            out.push((
                "turnstile_memcached_up",
                label.clone(),
                u64::from(server.is_up()),
            ));
            out.push((
                "turnstile_memcached_pool_connections",
                label.clone(),
                u64::from(pool.connections),
            ));
            out.push((
                "turnstile_memcached_pool_idle",
                label.clone(),
                u64::from(pool.idle_connections),
            ));
            out.push((
                "turnstile_memcached_pipelined_connections",
                label,
                server.open_pipelines(),
            ));
        }
        out
    }

    async fn ready(&self) -> bool {
        let topology = self.inner.topology.load();
        for server in &topology.servers {
            if server.is_up() {
                return true;
            }
            let probe = async {
                match self.inner.client {
                    MemcachedClient::Pipelined => {
                        let pipe = server.pipeline().await.ok()?;
                        (pipe.call(b"mn\r\n".to_vec(), 1).await.ok()? == vec![Reply::Noop])
                            .then_some(String::new())
                    }
                    MemcachedClient::Pool => {
                        let mut conn = server.pool.get().await.ok()?;
                        conn.version().await.ok()
                    }
                }
            };
            if let Ok(Some(_)) = tokio::time::timeout(self.inner.timeout * 10, probe).await {
                server.record_success();
                return true;
            }
        }
        false
    }
}
