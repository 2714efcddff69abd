//! The memcached counter store (`BACKEND_TYPE=memcache`).
//!
//! Each counter is one atomic meta arithmetic command (`ma <b64 key> b N<ttl> J<hits> D<hits> v`)
//! that creates the counter with its TTL or adds to it, and returns the count after the hit in
//! one round trip, so the decision never rests on a read taken before the write. Keys go out
//! base64-encoded. A request's hits are grouped by server (on a consistent-hash ring), each
//! group goes out through the server's transport as one batch, and the servers are asked
//! concurrently, so a request costs one round trip of latency whatever its number of
//! descriptors. Every operation has a deadline; failures are typed, name the server, and put it
//! into backoff. The server list is fixed (`MEMCACHE_HOST_PORT`) or discovered from DNS SRV
//! (`MEMCACHE_SRV`) and refreshed.
//!
//! Where things are: `hits` (a batch of counter operations grouped by server), `token_bucket`
//! (token-bucket states by compare-and-swap), `ring` (which server owns a key), `discovery` (SRV),
//! `server` (one server's health and deadlines), `transport` (the trait the two transports
//! implement, below them), the two transports, `pipelined/` (our own connections) and
//! `pooled/` (bb8 and async-memcached), and `kind` (the configured kind, which names them).

pub mod discovery;
mod hits;
mod kind;
mod pipelined;
mod pooled;
mod ring;
mod server;
mod token_bucket;
mod transport;

#[cfg(fuzzing)]
pub use pipelined::fuzz_replies;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::try_join_all;

use super::{CounterOp, CounterStore, Gauge, StorageError, TokenAnswer, TokenStep};
use crate::clock::Clock;
use discovery::Resolver;
use kind::ServerTransport;
use pipelined::Pipelined;
use pooled::{Pooled, Protocol};
use ring::Ring;
use server::Server;
use transport::{Command, Sent, Transport};

/// How long a probe after a late answer may take before the server is marked down.
const PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// memcached reads any exptime above this (30 days) as an absolute Unix time.
const RELATIVE_EXPTIME_MAX: u64 = 2_592_000;

/// The last absolute expiry memcached holds (2^31 - 1: 2038-01-19 03:14:07 UTC). memcached
/// (1.6.18 measured) drops an item with a later one at once, so such counters are stored
/// without an expiry instead: their keys name their window, so a stale one is never read again,
/// and memcached's LRU reclaims it when it needs the room.
const LAST_ABSOLUTE_EXPTIME: u64 = 2_147_483_647;

/// How to reach memcached.
#[derive(Debug, Clone)]
pub struct MemcachedOptions {
    /// `host:port` of every server.
    pub servers: Vec<String>,
    /// How each server is talked to.
    pub client: MemcachedClient,
    /// TLS to every server (`MEMCACHE_TLS`; the pipelined transport only).
    pub tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
}

/// How each memcached server is talked to: what the `MEMCACHE_*` settings say, read into this
/// type by `settings` itself, so that nothing copies them field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemcachedClient {
    /// `MEMCACHE_CLIENT` and `MEMCACHE_CLASSIC_PROTOCOL`: which transport carries the commands.
    pub transport: MemcachedTransport,
    /// `MEMCACHE_MAX_IDLE_CONNS`: connections per server (pooled transports); at least 1.
    pub pool_size: u32,
    /// `MEMCACHE_PIPELINED_CONNECTIONS`: connections per server of the pipelined transport,
    /// each shared by every caller; `None`: one per worker thread of the runtime the store is
    /// made on, at most [`DEFAULT_PIPELINED_CONNECTIONS_MAX`].
    pub pipelined_connections: Option<NonZeroUsize>,
    /// `MEMCACHE_TIMEOUT`: the deadline of one operation, connection included.
    pub timeout: Duration,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: extra TTL of up to this many seconds, spread per key.
    pub jitter_max_seconds: u64,
}

/// The most connections per server the pipelined client opens by default: memcached's default
/// number of worker threads. More would not reach more of them, and every replica's
/// connections count against memcached's connection limit (1,024 by default).
pub const DEFAULT_PIPELINED_CONNECTIONS_MAX: usize = 4;

impl MemcachedClient {
    /// The pipelined client's connections per server: as set, or one per worker thread of the
    /// runtime the store is made on (the cores Turnstile sends from), at most
    /// [`DEFAULT_PIPELINED_CONNECTIONS_MAX`].
    fn pipelined_connections(&self) -> NonZeroUsize {
        self.pipelined_connections.unwrap_or_else(|| {
            let workers =
                tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers());
            NonZeroUsize::new(workers.min(DEFAULT_PIPELINED_CONNECTIONS_MAX))
                .unwrap_or(NonZeroUsize::MIN)
        })
    }
}

/// How commands reach a memcached server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemcachedTransport {
    /// Meta commands on a few shared connections, each pipelining every caller's commands
    /// (the default).
    #[default]
    Pipelined,
    /// Meta commands on a bb8 pool of async-memcached connections, one in flight each.
    Pool,
    /// Classic `incr`/`add` on the pool, for servers older than 1.6.
    Classic,
}

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
    /// Token-bucket steps waiting per key while one update of that key is out.
    step_queue: token_bucket::StepQueue,
    client: MemcachedClient,
    /// The client's pipelined connections per server, decided when the store is made.
    pipelined_connections: NonZeroUsize,
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    /// Every call's deadline, and the runtime's scheduling delay (a late answer on a busy
    /// runtime is overload).
    deadline: server::Deadline,
    clock: Arc<dyn Clock>,
}

impl MemcachedStore {
    /// A store over the given servers. Connections are made lazily.
    pub fn new(options: MemcachedOptions, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        if options.servers.is_empty() {
            return Err(StorageError::unavailable("no memcached servers configured"));
        }
        let empty = Topology {
            servers: Vec::new(),
            ring: Ring::new(&[]),
        };
        let store = Self {
            inner: Arc::new(Inner {
                topology: ArcSwap::from_pointee(empty),
                step_queue: token_bucket::StepQueue::default(),
                client: options.client,
                pipelined_connections: options.client.pipelined_connections(),
                tls: options.tls,
                deadline: server::Deadline {
                    timeout: options.client.timeout,
                    scheduling: crate::storage::lateness::SchedulingDelay::shared(),
                },
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
            .map_err(|e| StorageError::unavailable(e.to_string()).caused_by(e))?;
        tracing::info!(servers = ?options.servers, "memcached servers discovered");
        Self::new(options, clock)
    }

    /// Re-resolves `srv_name` every `every` (`MEMCACHE_SRV_REFRESH`) for as long as the
    /// returned future is polled; a failed lookup keeps the current servers.
    pub async fn refresh_every(self, srv_name: String, resolver: Resolver, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            match resolver.lookup(&srv_name).await {
                Ok(servers) if servers != self.servers() => {
                    tracing::info!(?servers, "memcached servers changed");
                    self.set_servers(servers);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "memcached SRV refresh failed; keeping the current servers");
                }
            }
        }
    }

    /// Replaces the server list; servers that stay keep their connections.
    pub fn set_servers(&self, names: Vec<String>) {
        let current = self.inner.topology.load();
        let servers = names
            .iter()
            .map(
                |name| match current.servers.iter().find(|s| &s.name == name) {
                    Some(existing) => Arc::clone(existing),
                    None => Arc::new(Server::new(name.clone(), self.inner.transport(name))),
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
}

impl Inner {
    /// The server that owns `key` now, as an owned handle (it is held across awaits, where an
    /// `arc_swap` guard would crowd the thread's fast slots; see `apply_hits`).
    fn server_for(&self, key: &str) -> Result<Arc<Server>, StorageError> {
        let topology = self.topology.load();
        topology
            .ring
            .server_for(key.as_bytes())
            .map(|i| Arc::clone(&topology.servers[i]))
            .ok_or_else(|| StorageError::unavailable("no memcached servers"))
    }

    /// memcached's exptime for a counter: the end of its window plus jitter plus one second
    /// (memcached may expire an item up to a second early), relative when it fits in 30 days,
    /// absolute otherwise, so week, month and year counters live as long as their windows; 0
    /// (no expiry) past the last absolute time memcached holds.
    fn exptime(&self, key: &str, expires_at: u64, now: u64) -> u64 {
        let jitter = crate::storage::remote::jitter_seconds(key, self.client.jitter_max_seconds);
        let until = expires_at.saturating_add(jitter).saturating_add(1);
        let relative = until.saturating_sub(now).max(1);
        if relative <= RELATIVE_EXPTIME_MAX {
            relative
        } else if until <= LAST_ABSOLUTE_EXPTIME {
            until
        } else {
            0
        }
    }

    /// A transport to `server` of the configured kind.
    fn transport(&self, server: &str) -> ServerTransport {
        let pooled = |protocol| {
            ServerTransport::Pooled(Pooled::new(
                server.to_owned(),
                self.client.pool_size,
                self.deadline.timeout,
                protocol,
            ))
        };
        match self.client.transport {
            MemcachedTransport::Pipelined => ServerTransport::Pipelined(Pipelined::new(
                server.to_owned(),
                self.pipelined_connections,
                self.tls.clone(),
            )),
            MemcachedTransport::Pool => pooled(Protocol::Meta),
            MemcachedTransport::Classic => pooled(Protocol::Classic),
        }
    }

    /// The counts after `commands`, which all belong to `server`, through its pool.
    async fn apply_pooled<'k, I>(
        &self,
        server: &Arc<Server>,
        commands: I,
    ) -> Result<Vec<u64>, StorageError>
    where
        I: IntoIterator<Item = Command<'k>> + Send,
        I::IntoIter: Send,
    {
        let sent = Sent::default();
        let Some(pooled) = server.transport.pooled() else {
            return Err(StorageError::protocol(format!(
                "memcached {}: a pipelined server in a pooled store",
                server.name
            )));
        };
        // Not boxed here: every caller keeps this future on the heap already (one server's
        // call is boxed whole in `apply_hits`, several sit in the join's own allocation).
        let call = pooled.apply(commands, &sent);
        server.guarded(&self.deadline, &sent, call).await
    }
}

impl CounterStore for MemcachedStore {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        self.saturating_hits(hits).await
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        try_join_all(steps.iter().map(|step| self.token_step(step.clone()))).await
    }

    fn gauges(&self) -> Vec<Gauge> {
        let topology = self.inner.topology.load();
        topology
            .servers
            .iter()
            .flat_map(|server| {
                let connections = server.transport.connections();
                let readings = Gauge::MemcachedServer {
                    server: server.name.clone(),
                    up: server.is_up(),
                    connections: connections.open,
                    idle_connections: connections.idle,
                };
                [readings, server.breaker()]
            })
            .collect()
    }

    async fn ready(&self) -> Result<(), StorageError> {
        let topology = self.inner.topology.load();
        let mut why = Vec::new();
        for server in &topology.servers {
            if server.known_up() {
                return Ok(());
            }
            let probe = server.transport.probe();
            match tokio::time::timeout(self.inner.deadline.timeout * 10, probe).await {
                Ok(Ok(())) => {
                    server.record_success();
                    return Ok(());
                }
                Ok(Err(e)) => why.push(format!("{}: {e}", server.name)),
                Err(_) => why.push(format!("{}: no answer to a probe", server.name)),
            }
        }
        Err(StorageError::unavailable(if why.is_empty() {
            "no memcached servers".into()
        } else {
            why.join("; ")
        }))
    }
}
