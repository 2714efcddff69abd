//! The counter store the settings name, built and wrapped for the service: one enum over the
//! backends so the rest of the process is not generic over them, and the background work each
//! backend needs (the memory store's sweeper, SRV refresh) handed back as futures for the app
//! to own and stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::settings::{
    Backend, MemcachedServers, MemcachedSettings, MemcachedTls, PostgresRoute, PostgresSettings,
    RedisSettings, RedisTls,
};
use crate::storage::memcached::discovery::Resolver;
use crate::storage::memcached::{MemcachedOptions, MemcachedStore};
use crate::storage::memory::MemoryStore;
use crate::storage::postgres::tls::{PgTls, PgTlsFiles};
use crate::storage::postgres::{PostgresOptions, PostgresStore};
use crate::storage::redis::{RedisOptions, RedisStore, RedisTlsOptions};
use crate::storage::{
    CounterOp, CounterStore, Gauge, Guarded, StorageError, TokenAnswer, TokenStep,
};
use crate::tls::PemFile;

/// How often the memory store drops expired counters.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A background future owned by the app.
pub(super) type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The configured counter store.
#[derive(Debug, Clone)]
pub enum Store {
    /// In process.
    Memory(Arc<MemoryStore>),
    /// memcached.
    Memcached(MemcachedStore),
    /// Redis or Valkey (its circuit breakers its own: one per cluster node).
    Redis(RedisStore),
    /// PostgreSQL, behind its circuit breaker.
    Postgres(Guarded<PostgresStore>),
}

impl From<MemoryStore> for Store {
    fn from(store: MemoryStore) -> Self {
        Store::Memory(Arc::new(store))
    }
}

impl From<Arc<MemoryStore>> for Store {
    fn from(store: Arc<MemoryStore>) -> Self {
        Store::Memory(store)
    }
}

impl From<MemcachedStore> for Store {
    fn from(store: MemcachedStore) -> Self {
        Store::Memcached(store)
    }
}

impl From<RedisStore> for Store {
    fn from(store: RedisStore) -> Self {
        Store::Redis(store)
    }
}

impl From<PostgresStore> for Store {
    fn from(store: PostgresStore) -> Self {
        let name = store.name();
        Store::Postgres(Guarded::new(store, name))
    }
}

/// PostgreSQL's futures are ~2.4 KB (a transaction's state), the others at most ~0.5 KB: boxed,
/// so that every request's future is not sized (and moved at every `.await` layer, measured
/// 6 % of the server's time in `memmove`) for the one backend that waits a network round trip
/// and a commit anyway.
impl CounterStore for Store {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        match self {
            Store::Memory(s) => s.apply_ops(hits).await,
            Store::Memcached(s) => s.apply_ops(hits).await,
            Store::Redis(s) => s.apply_ops(hits).await,
            Store::Postgres(s) => Box::pin(s.apply_ops(hits)).await,
        }
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        match self {
            Store::Memory(s) => s.take_tokens(steps).await,
            Store::Memcached(s) => s.take_tokens(steps).await,
            Store::Redis(s) => s.take_tokens(steps).await,
            Store::Postgres(s) => Box::pin(s.take_tokens(steps)).await,
        }
    }

    async fn ready(&self) -> Result<(), StorageError> {
        match self {
            Store::Memory(s) => s.ready().await,
            Store::Memcached(s) => s.ready().await,
            Store::Redis(s) => s.ready().await,
            Store::Postgres(s) => s.ready().await,
        }
    }

    fn gauges(&self) -> Vec<Gauge> {
        match self {
            Store::Memory(s) => s.gauges(),
            Store::Memcached(s) => s.gauges(),
            Store::Redis(s) => s.gauges(),
            Store::Postgres(s) => s.gauges(),
        }
    }

    fn durable(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }
}

/// Builds the store of `backend` and the background tasks it needs.
pub(super) async fn build(
    backend: &Backend,
    clock: &Arc<dyn Clock>,
) -> Result<(Store, Vec<Task>), StorageError> {
    match backend {
        Backend::Memory { max_keys } => {
            let store = Arc::new(MemoryStore::new(*max_keys, Arc::clone(clock)));
            let sweeper: Task = Box::pin(Arc::clone(&store).sweep_every(SWEEP_EVERY));
            Ok((Store::Memory(store), vec![sweeper]))
        }
        Backend::Memcached(settings) => memcached_store(settings, clock).await,
        Backend::Redis(settings) => Ok((
            Store::from(RedisStore::new(redis_options(settings)?, Arc::clone(clock))),
            Vec::new(),
        )),
        Backend::Postgres(settings) => postgres_store(settings, clock),
    }
}

/// The PostgreSQL store of long windows (`POSTGRES_FROM_UNIT`), its tasks, and the shortest
/// period (seconds) it counts.
pub(super) fn durable(
    route: Option<&PostgresRoute>,
    clock: &Arc<dyn Clock>,
) -> Result<Option<(Store, Vec<Task>, u64)>, StorageError> {
    let Some(route) = route else {
        return Ok(None);
    };
    let from = crate::rules::Unit::parse(&route.from_unit)
        .map(crate::rules::Unit::seconds)
        .ok_or_else(|| {
            StorageError::unavailable(format!("POSTGRES_FROM_UNIT={}", route.from_unit))
        })?;
    let (store, tasks) = postgres_store(&route.settings, clock)?;
    Ok(Some((store, tasks, from)))
}

/// How often expired PostgreSQL rows are swept.
const POSTGRES_SWEEP_EVERY: Duration = Duration::from_secs(10);

/// A PostgreSQL store and its sweeper.
pub(super) fn postgres_store(
    s: &PostgresSettings,
    clock: &Arc<dyn Clock>,
) -> Result<(Store, Vec<Task>), StorageError> {
    let store = PostgresStore::new(postgres_options(s)?, Arc::clone(clock))?;
    let sweeper: Task = Box::pin(store.clone().sweep_every(POSTGRES_SWEEP_EVERY));
    Ok((Store::from(store), vec![sweeper]))
}

/// The storage options of the settings (TLS files read now: a missing one stops start-up).
pub(super) fn postgres_options(s: &PostgresSettings) -> Result<PostgresOptions, StorageError> {
    let tls = match s.ssl_mode {
        None => None,
        Some(verify) => {
            let files = PgTlsFiles {
                root: s.ssl_root_cert.clone(),
                client: s.ssl_client.clone(),
            };
            Some(
                PgTls::new(verify, &files)
                    .map_err(|e| StorageError::unavailable(format!("POSTGRES_URL TLS: {e}")))?,
            )
        }
    };
    Ok(PostgresOptions {
        config: s.config.clone(),
        tls,
        pool_size: s.pool_size,
        timeout: s.timeout,
        schema: s.schema.clone(),
        migrate: s.migrate,
    })
}

/// The per-second Redis store (`REDIS_PERSECOND`), when configured.
pub(super) fn per_second(
    backend: &Backend,
    clock: &Arc<dyn Clock>,
) -> Result<Option<Store>, StorageError> {
    match backend {
        Backend::Redis(settings) => match &settings.per_second {
            Some(second) => Ok(Some(Store::from(RedisStore::new(
                redis_options(second)?,
                Arc::clone(clock),
            )))),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

async fn memcached_store(
    s: &MemcachedSettings,
    clock: &Arc<dyn Clock>,
) -> Result<(Store, Vec<Task>), StorageError> {
    let mut options = MemcachedOptions {
        servers: Vec::new(),
        client: s.client,
        tls: s.tls.as_ref().map(memcached_tls).transpose()?,
    };
    match &s.servers {
        MemcachedServers::List(servers) => {
            options.servers = servers.clone();
            let store = MemcachedStore::new(options, Arc::clone(clock))?;
            Ok((Store::Memcached(store), Vec::new()))
        }
        MemcachedServers::Srv {
            name,
            refresh,
            resolver,
        } => {
            let resolver = match resolver {
                Some(server) => Resolver::at(*server),
                None => Resolver::system(),
            }
            .map_err(|e| StorageError::unavailable(e.to_string()).caused_by(e))?;
            let store =
                MemcachedStore::discover(name, &resolver, options, Arc::clone(clock)).await?;
            let tasks: Vec<Task> = match refresh {
                Some(every) => vec![Box::pin(store.clone().refresh_every(
                    name.clone(),
                    resolver,
                    *every,
                ))],
                None => Vec::new(),
            };
            Ok((Store::Memcached(store), tasks))
        }
    }
}

/// The TLS client configuration of `MEMCACHE_TLS` from its files (at start: a missing or bad
/// file stops start-up).
fn memcached_tls(
    tls: &MemcachedTls,
) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, StorageError> {
    store_tls(
        "MEMCACHE_TLS",
        tls.ca.as_deref(),
        tls.client.as_ref(),
        tls.skip_hostname_verification,
    )
}

/// A store's TLS client configuration (`setting` names it in errors) from its files: the
/// server's chain and name checked, or (`skip_hostname`, the reference's
/// `*_TLS_SKIP_HOSTNAME_VERIFICATION`) its chain only.
fn store_tls(
    setting: &str,
    ca: Option<&std::path::Path>,
    client: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    skip_hostname: bool,
) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, StorageError> {
    let client = client.map(|(c, k)| (c.as_path(), k.as_path()));
    let verify = match skip_hostname {
        true => crate::storage::tls::Verify::Chain,
        false => crate::storage::tls::Verify::Full,
    };
    crate::storage::tls::client_config(verify, ca, client)
        .map(Arc::new)
        .map_err(|e| StorageError::unavailable(format!("{setting}: {}", e.into_message())))
}

/// Reads the TLS files named by the settings once (at start: a missing file stops start-up),
/// for redis-rs's connections (as bytes) and Turnstile's own (as a rustls configuration).
fn redis_tls(tls: &RedisTls) -> Result<RedisTlsOptions, StorageError> {
    let read = |setting: &str, path: &std::path::Path| {
        PemFile::read(path)
            .map_err(|e| StorageError::unavailable(format!("{setting}: {}", e.into_message())))
    };
    let ca = tls
        .ca
        .as_deref()
        .map(|p| read("REDIS_TLS_CACERT", p))
        .transpose()?;
    let client = match &tls.client {
        Some((cert, key)) => Some((
            read("REDIS_TLS_CLIENT_CERT", cert)?,
            read("REDIS_TLS_CLIENT_KEY", key)?,
        )),
        None => None,
    };
    // Turnstile's own connections check the chain even when skipping the name, as the
    // reference does; redis-rs's (scripts, probes) can only skip both.
    let verify = match tls.skip_hostname_verification {
        true => crate::tls::Verify::Chain,
        false => crate::tls::Verify::Full,
    };
    let failed = |e: crate::tls::TlsError| {
        StorageError::unavailable(format!("REDIS_TLS: {}", e.into_message()))
    };
    let roots = crate::tls::roots_of(ca.as_ref()).map_err(failed)?;
    let identity = client.as_ref().map(|(c, k)| (c, k));
    let config = crate::storage::tls::client_config_of(verify, roots, identity).map_err(failed)?;
    Ok(RedisTlsOptions {
        root_cert: ca.map(|ca| ca.bytes().to_vec()),
        client: client.map(|(c, k)| (c.bytes().to_vec(), k.bytes().to_vec())),
        skip_hostname_verification: tls.skip_hostname_verification,
        config: Arc::new(config),
    })
}

fn redis_options(s: &RedisSettings) -> Result<RedisOptions, StorageError> {
    Ok(RedisOptions {
        target: s.target.clone(),
        auth: s.auth.clone(),
        timeout: s.timeout,
        jitter_max_seconds: s.jitter_max_seconds,
        tls: s.tls.as_ref().map(redis_tls).transpose()?,
    })
}
