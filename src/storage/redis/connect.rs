//! Connections to Redis for each deployment: one server (a multiplexed connection, replaced
//! after a fault), a cluster (redis-rs's cluster connection: slots, MOVED/ASK and topology changes
//! are followed by the crate), or a master found through Sentinel (re-resolved after a
//! connection failure or a READONLY reply, i.e. a demoted master). `REDIS_TLS` applies to every
//! kind over TCP: under Sentinel to the sentinels and to the master alike. Connecting is lazy: a store
//! whose Redis is absent at start still starts, reports not ready, and connects when Redis
//! appears; between failed attempts it waits (backoff) instead of adding a connect timeout to
//! every request. It also holds our own pipelined connection (`pipe`) to the one server or the
//! master the sentinels name, and a cluster's to each node; how redis-rs is told where and how
//! to connect is `dialing`'s.
//!
//! Must not touch: scripts, keys, what the answers mean.

use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisFuture, RedisResult, Value};

use super::dialing::{
    certificates, host_port, sentinel_client, sentinels_master, settings, tcp, tls_mode,
};
use super::pipe::{NodePipes, Pipe};
use super::{RedisOptions, RedisTarget};
use crate::storage::breaker::Backoff;
use crate::storage::remote::lock;

/// A live connection of any kind; cheap to clone (multiplexed). It is a redis-rs connection
/// itself, so a command or script is written once for the three kinds.
#[derive(Clone)]
pub(super) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
    Sentinel(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// Retries of one cluster request (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, a connection lost), and
/// the bounds of the wait before each retry that waits (ms; redirections do not wait).
const CLUSTER_RETRIES: u32 = 16;
const CLUSTER_RETRY_WAIT_MIN_MS: u64 = 5;
const CLUSTER_RETRY_WAIT_MAX_MS: u64 = 50;

/// The current connection, or when the next attempt may be made.
pub(super) struct Connector {
    options: RedisOptions,
    current: arc_swap::ArcSwapOption<Conn>,
    connecting: tokio::sync::Mutex<()>,
    /// Failed connects: until the wait has passed, calls are refused at once.
    backoff: Backoff,
    /// Why the last connect failed (said while in backoff).
    why: Mutex<String>,
    /// The pipelined connection of the hot path (one server; `pipe`).
    pipe: arc_swap::ArcSwapOption<Pipe>,
    /// A cluster's pipelined connections, by node.
    nodes: NodePipes,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("target", &self.options.target)
            .finish()
    }
}

impl Connector {
    pub(super) fn new(options: RedisOptions) -> Self {
        Connector {
            options,
            current: arc_swap::ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            backoff: Backoff::default(),
            why: Mutex::new(String::new()),
            pipe: arc_swap::ArcSwapOption::empty(),
            nodes: NodePipes::default(),
        }
    }

    /// The live pipelined connection to cluster node `node` (`host:port`), connecting first
    /// when there is none.
    pub(super) async fn node_pipe(&self, node: &str) -> std::io::Result<Arc<Pipe>> {
        self.nodes.get(node, &self.options).await
    }

    /// Forgets the connection to cluster node `node` after a fault.
    pub(super) fn reset_node(&self, node: &str) {
        self.nodes.reset(node);
    }

    /// Whether this is a cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.options.target, RedisTarget::Cluster(_))
    }

    /// Whether fixed-window hits go over our own pipelined connection: to one server by TCP
    /// (over TLS or not) or a unix socket, or to the master the sentinels name.
    pub(super) fn pipes(&self) -> bool {
        match self.options.target {
            RedisTarget::Tcp(_) | RedisTarget::Sentinel { .. } => true,
            RedisTarget::Unix(_) => self.options.tls.is_none(),
            RedisTarget::Cluster(_) => false,
        }
    }

    /// The live pipelined connection, if there is one (no waiting: a call's usual case).
    pub(super) fn live_pipe(&self) -> Option<Arc<Pipe>> {
        self.pipe.load_full().filter(|pipe| !pipe.is_closed())
    }

    /// The live pipelined connection, connecting first when there is none (unless in backoff).
    pub(super) async fn pipe(&self) -> std::io::Result<Arc<Pipe>> {
        if let Some(pipe) = self.live_pipe() {
            return Ok(pipe);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(pipe) = self.live_pipe() {
            return Ok(pipe);
        }
        if !self.backoff.admit() {
            let why = lock(&self.why).clone();
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                format!("down (retrying with backoff): {why}"),
            ));
        }
        let o = &self.options;
        let connect = async {
            let target = match &o.target {
                RedisTarget::Sentinel { .. } => &sentinels_master(o).await?,
                target => target,
            };
            Pipe::connect(target, o.auth.as_ref(), o.tls.as_ref()).await
        };
        let failure = match tokio::time::timeout(o.timeout, connect).await {
            Ok(Ok(pipe)) => {
                self.backoff.record_success();
                let pipe = Arc::new(pipe);
                self.pipe.store(Some(Arc::clone(&pipe)));
                return Ok(pipe);
            }
            Ok(Err(e)) => e,
            Err(_) => std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        };
        self.back_off(failure.to_string());
        Err(failure)
    }

    /// The live connection, connecting first when there is none (unless in backoff).
    pub(super) async fn get(&self) -> RedisResult<Conn> {
        if let Some(conn) = self.current.load_full() {
            return Ok((*conn).clone());
        }
        let _connecting = self.connecting.lock().await;
        if let Some(conn) = self.current.load_full() {
            return Ok((*conn).clone());
        }
        if !self.backoff.admit() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "down (retrying with backoff)",
                lock(&self.why).clone(),
            )));
        }
        match tokio::time::timeout(self.options.timeout, self.connect()).await {
            Ok(Ok(conn)) => {
                self.backoff.record_success();
                self.current.store(Some(Arc::new(conn.clone())));
                Ok(conn)
            }
            Ok(Err(e)) => {
                self.back_off(e.to_string());
                Err(e)
            }
            Err(_) => {
                self.back_off("connect timed out".into());
                Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "connect timed out",
                )))
            }
        }
    }

    /// Forgets the connection after a fault that a reconnect (or, behind Sentinel, a new
    /// master) may cure.
    pub(super) fn reset(&self) {
        self.current.store(None);
        self.pipe.store(None);
    }

    fn back_off(&self, why: String) {
        *lock(&self.why) = why;
        self.backoff.record_failure();
    }

    /// A multiplexed connection to one server. Not redis-rs's reconnecting manager: this
    /// connector already replaces a connection after a fault, and the manager's own layer
    /// (a swap and a boxed future a call) cost 0.6 µs of Turnstile's CPU a call.
    async fn single(&self, client: redis::Client) -> RedisResult<Conn> {
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.options.timeout))
            .set_connection_timeout(Some(self.options.timeout));
        Ok(Conn::Single(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await?,
        ))
    }

    async fn connect(&self) -> RedisResult<Conn> {
        let o = &self.options;
        match &o.target {
            RedisTarget::Tcp(address) => {
                let client = match &o.tls {
                    None => redis::Client::open(
                        tcp(address)?
                            .into_connection_info()?
                            .set_redis_settings(settings(o)),
                    )?,
                    Some(tls) => {
                        let (host, port) = host_port(address)?;
                        let addr = ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: tls.skip_hostname_verification,
                            tls_params: None,
                        };
                        let info = addr.into_connection_info()?.set_redis_settings(settings(o));
                        redis::Client::build_with_tls(info, certificates(tls))?
                    }
                };
                self.single(client).await
            }
            RedisTarget::Unix(path) => {
                let info = ConnectionAddr::Unix(path.into())
                    .into_connection_info()?
                    .set_redis_settings(settings(o));
                let client = redis::Client::open(info)?;
                self.single(client).await
            }
            RedisTarget::Cluster(nodes) => {
                let nodes = nodes
                    .iter()
                    .map(|n| tcp(n).and_then(|a| a.into_connection_info()))
                    .collect::<RedisResult<Vec<_>>>()?;
                // redis-rs's 16 retries (MOVED and ASK are retried at once, and a slot migration
                // can bounce a call between two nodes a few times), but short waits between the
                // others (redis-rs's grow to seconds): a dead master or a cluster that declared
                // itself down (CLUSTERDOWN) is answered within about half a second instead of
                // holding calls until REDIS_TIMEOUT.
                let mut builder = ClusterClientBuilder::new(nodes)
                    .connection_timeout(o.timeout)
                    .response_timeout(o.timeout)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(CLUSTER_RETRY_WAIT_MIN_MS)
                    .max_retry_wait(CLUSTER_RETRY_WAIT_MAX_MS);
                if let Some(tls) = &o.tls {
                    builder = builder.tls(tls_mode(tls)).certs(certificates(tls));
                }
                if let Some(auth) = &o.auth {
                    if let Some(user) = &auth.user {
                        builder = builder.username(user);
                    }
                    builder = builder.password(&auth.password);
                }
                Ok(Conn::Cluster(
                    builder.build()?.get_async_connection().await?,
                ))
            }
            RedisTarget::Sentinel { .. } => Ok(Conn::Sentinel(
                sentinel_client(o)?.get_async_connection().await?,
            )),
        }
    }
}
