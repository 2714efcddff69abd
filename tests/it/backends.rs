//! Runs one scenario on every counter store: the memory store, a real memcached process (meta
//! protocol), one redis-server (with the reference's key layout), a master behind a Sentinel, a
//! 3-master Redis Cluster, and PostgreSQL. `on_every_backend!` stamps one test per backend.

use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};

use turnstile::limiter::KeyLayout;
use turnstile::storage::redis::RedisTarget;

use crate::support::redis_server::{RedisCluster, RedisProcess, RedisSentinel, redis_store};
use crate::support::{Memcached, Options, TestServer, memcached_store, start_memory, start_with};

/// Which store a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    Memcached,
    /// One redis-server, with the reference's key layout (the Redis default).
    Redis,
    /// A 3-master Redis Cluster, with Turnstile's key layout.
    RedisCluster,
    /// A master with a replica behind a Sentinel.
    RedisSentinel,
    /// A PostgreSQL server of the test's own (Turnstile's clock decides there, so the test
    /// clock need not stand at the present).
    Postgres,
}

/// A server plus whatever it needs kept alive.
pub struct Harness {
    pub server: TestServer,
    /// The store's processes (memcached, Redis, Sentinel, a cluster, PostgreSQL), kept alive
    /// for the server's lifetime and stopped when it ends.
    pub _store: Option<Box<dyn std::any::Any + Send>>,
}

impl std::ops::Deref for Harness {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.server
    }
}

impl Backend {
    /// Starts a server on this backend, or `None` when memcached is not installed (reported).
    pub async fn start(self, files: &[(&str, &str)], options: Options) -> Option<Harness> {
        match self {
            Backend::Memory => Some(Harness {
                server: start_memory(files, options).await,
                _store: None,
            }),
            Backend::Memcached => {
                let mc = Memcached::start()?;
                // memcached expires items in real time, so the frozen test clock stands at the
                // real present (absolute expiry times beyond 30 days must be in the future).
                let clock = ManualClock::new(SystemClock.now_secs());
                let store = memcached_store(&[&mc], &clock, Duration::from_millis(500));
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _store: Some(Box::new(mc)),
                })
            }
            Backend::Redis => {
                let redis = RedisProcess::start()?;
                let clock = ManualClock::new(SystemClock.now_secs());
                let store = redis_store(RedisTarget::Tcp(redis.addr()), &clock);
                let mut options = options;
                options.limiter.key_layout = KeyLayout::Reference;
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _store: Some(Box::new(redis)),
                })
            }
            Backend::RedisSentinel => {
                let set = RedisSentinel::start()?;
                let clock = ManualClock::new(SystemClock.now_secs());
                let store = redis_store(set.target(), &clock);
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _store: Some(Box::new(set)),
                })
            }
            Backend::RedisCluster => {
                let cluster = RedisCluster::start()?;
                let clock = ManualClock::new(SystemClock.now_secs());
                let store = redis_store(RedisTarget::Cluster(cluster.seeds()), &clock);
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _store: Some(Box::new(cluster)),
                })
            }
            Backend::Postgres => {
                let pg = crate::support::postgres_server::Postgres::start()?;
                let clock = ManualClock::new(crate::support::T0);
                let shared: std::sync::Arc<dyn Clock> = std::sync::Arc::new(clock.clone());
                let (store, _schema) = pg.store(&shared);
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _store: Some(Box::new(pg)),
                })
            }
        }
    }
}

/// A store's processes for a service started from its environment (`Process`, the binary),
/// and the settings that point the service at them.
pub struct StoreEnv {
    /// The store's processes, stopped when this is dropped.
    pub _store: Option<Box<dyn std::any::Any + Send>>,
    pub env: Vec<(&'static str, String)>,
}

impl StoreEnv {
    /// The settings as pairs of strings.
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}

impl Backend {
    /// The store started for a service configured by its environment; `None` when its server
    /// is not installed (reported). Memory, memcached and one redis-server.
    pub fn env(self) -> Option<StoreEnv> {
        let (store, env): (Option<Box<dyn std::any::Any + Send>>, _) = match self {
            Backend::Memory => (None, vec![]),
            Backend::Memcached => {
                let mc = Memcached::start()?;
                let env = vec![
                    ("BACKEND_TYPE", "memcache".into()),
                    ("MEMCACHE_HOST_PORT", mc.addr()),
                ];
                (Some(Box::new(mc)), env)
            }
            Backend::Redis => {
                let redis = RedisProcess::start()?;
                let env = vec![
                    ("BACKEND_TYPE", "redis".into()),
                    ("REDIS_SOCKET_TYPE", "tcp".into()),
                    ("REDIS_URL", redis.addr()),
                ];
                (Some(Box::new(redis)), env)
            }
            other => panic!("{other:?}: not started from an environment here"),
        };
        Some(StoreEnv { _store: store, env })
    }
}

#[macro_export]
macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {
        mod memory_backend {
            $(#[tokio::test] async fn $scenario() { super::$scenario($crate::backends::Backend::Memory).await })*
        }
        mod memcached_backend {
            $(#[tokio::test] async fn $scenario() { super::$scenario($crate::backends::Backend::Memcached).await })*
        }
        mod redis_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $scenario() { super::$scenario($crate::backends::Backend::Redis).await })*
        }
        mod redis_sentinel_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $scenario() { super::$scenario($crate::backends::Backend::RedisSentinel).await })*
        }
        mod redis_cluster_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $scenario() { super::$scenario($crate::backends::Backend::RedisCluster).await })*
        }
        mod postgres_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $scenario() { super::$scenario($crate::backends::Backend::Postgres).await })*
        }
    };
}
