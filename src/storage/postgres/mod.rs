//! PostgreSQL (`BACKEND_TYPE=postgres`, or long windows routed here with `POSTGRES_FROM_UNIT`):
//! durable counters. Every counter operation of a request is one call of the schema's `hit`
//! function, every token-bucket step of it one call of `bucket` (arrays in, answers out; one
//! round trip and one transaction each), so an admitted hit is committed (with the operator's
//! `synchronous_commit`) before the answer leaves, and nothing is counted twice or lost when
//! Turnstile or PostgreSQL restarts.
//!
//! Turnstile's clock decides (as on memcached and Redis): the time of a request is passed in,
//! so replicas and the other stores agree on windows, and the database's clock never matters.
//!
//! Connections come from a deadpool-postgres pool (tokio-postgres underneath): chosen over
//! bb8-postgres because a pooled connection can be taken out of the pool for good
//! (`Object::take`), which is how a connection to a demoted primary is dropped on its first
//! read-only error, and because it keeps a per-connection cache of prepared statements. The
//! pool connects on demand: the service starts without PostgreSQL, reports not ready, and
//! counts as soon as the database accepts connections.
//!
//! Must not touch: rules, limits, protobuf, the settings' environment names.

mod buckets;
mod coalesce;
mod counters;
mod said;
mod schema;
mod sweep;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::clock::Clock;
use crate::storage::{CounterOp, CounterStore, Gauge, StorageError, TokenAnswer, TokenStep};

pub use schema::{MigrateMode, SchemaError, SchemaState};

/// How to reach PostgreSQL and keep the schema.
#[derive(Clone)]
pub struct PostgresOptions {
    /// Where and as whom (hosts, port, database, user, password, `target_session_attrs`).
    pub config: tokio_postgres::Config,
    /// TLS, when the connection string asks for it.
    pub tls: Option<tls::PgTls>,
    /// Connections kept at most.
    pub pool_size: usize,
    /// Deadline of one request's call, waiting for a connection included.
    pub timeout: Duration,
    /// The schema Turnstile's tables and functions live in.
    pub schema: String,
    /// When the schema is brought up to date.
    pub migrate: MigrateMode,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password: only where, never it.
        f.debug_struct("PostgresOptions")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Counters and buckets in PostgreSQL.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    options: PostgresOptions,
    quoted: String,
    sql: counters::Statements,
    bucket_sql: String,
    schema: OnceCell<()>,
    clock: Arc<dyn Clock>,
    /// Started at the first add (a runtime is needed to spawn its task).
    coalescer: std::sync::OnceLock<coalesce::Coalescer>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A store that connects on demand.
    pub fn new(options: PostgresOptions, clock: Arc<dyn Clock>) -> Result<Self, StorageError> {
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match &options.tls {
            None => Manager::from_config(
                options.config.clone(),
                tokio_postgres::NoTls,
                manager_config,
            ),
            Some(tls) => {
                Manager::from_config(options.config.clone(), tls.connector(), manager_config)
            }
        };
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.timeout))
            .create_timeout(Some(options.timeout))
            .build()
            .map_err(|e| StorageError::unavailable(format!("PostgreSQL pool: {e}")).caused_by(e))?;
        let quoted = format!("\"{}\"", options.schema);
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                sql: counters::Statements::new(&quoted),
                bucket_sql: format!(
                    "SELECT admitted, tats FROM {quoted}.bucket($1, $2::text[]::numeric[], \
                     $3::text[]::numeric[], $4::text[]::numeric[], $5, $6, $7::text[]::numeric[], $8)"
                ),
                quoted,
                options,
                schema: OnceCell::new(),
                clock,
                coalescer: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Where the store counts, as its errors name it (hosts and database; never the
    /// password).
    pub fn name(&self) -> String {
        self.place()
    }

    fn place(&self) -> String {
        let c = &self.inner.options.config;
        let hosts: Vec<String> = c
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        format!(
            "PostgreSQL {} database {}",
            hosts.join(","),
            c.get_dbname().unwrap_or("(default)")
        )
    }

    /// A connection with the schema in the state `POSTGRES_MIGRATE` asks for.
    async fn connection(&self) -> Result<Object, StorageError> {
        let mut client = self.pooled().await?;
        if !self.inner.schema.initialized() {
            let inner = &self.inner;
            inner
                .schema
                .get_or_try_init(|| schema::prepare(&mut client, &inner.options, &inner.quoted))
                .await
                .map_err(|e| {
                    StorageError::unavailable(format!("{}: {e}", self.place())).caused_by(e)
                })?;
        }
        Ok(client)
    }

    /// Runs `call` on a connection within the deadline, mapping failures to store errors.
    async fn within<T, F, Fut>(&self, call: F) -> Result<T, StorageError>
    where
        F: FnOnce(Object) -> Fut,
        Fut: std::future::Future<Output = (Object, Result<T, tokio_postgres::Error>)>,
    {
        let attempt = async {
            let client = self.connection().await?;
            let (client, result) = call(client).await;
            result.map_err(|e| self.failed(client, &e))
        };
        match tokio::time::timeout(self.inner.options.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(self.late()),
        }
    }

    /// The rows of `sql` (prepared once per connection) with `params`, within the deadline.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StorageError> {
        self.within(|client| async move {
            let result = async {
                let statement = client.prepare_cached(sql).await?;
                client.query(&statement, params).await
            }
            .await;
            (client, result)
        })
        .await
    }

    /// The one row of `sql` with `params` (a function's answer).
    async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, StorageError> {
        self.query(sql, params)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| StorageError::protocol(format!("{} answered no row", self.place())))
    }

    /// A connection from the pool, as it is (the schema not checked).
    async fn pooled(&self) -> Result<Object, StorageError> {
        self.inner.pool.get().await.map_err(|e| self.unconnected(e))
    }

    /// No connection could be had from the pool: the deadline passed, or what PostgreSQL (or
    /// the socket, or TLS) said when connecting.
    fn unconnected(&self, e: deadpool_postgres::PoolError) -> StorageError {
        if let deadpool_postgres::PoolError::Timeout(_) = e {
            return self.late();
        }
        let said = said::pool_error(&e);
        StorageError::unavailable(format!("{}: no connection: {said}", self.place())).caused_by(e)
    }

    /// The coalescer of adds, started on first use.
    fn coalescer(&self) -> &coalesce::Coalescer {
        self.inner.coalescer.get_or_init(|| {
            coalesce::Coalescer::start(Arc::downgrade(&self.inner), self.inner.options.pool_size)
        })
    }

    /// The deadline passed (connecting, waiting for a pooled connection, or the call).
    fn late(&self) -> StorageError {
        StorageError::timeout(format!(
            "{} did not answer within {:?} (POSTGRES_TIMEOUT)",
            self.place(),
            self.inner.options.timeout
        ))
    }

    /// The store error for `e`; a connection that can no longer write (a demoted primary) or
    /// that broke is taken out of the pool for good, so the next call connects afresh (with
    /// `target_session_attrs=read-write`, to the new primary).
    fn failed(&self, client: Object, e: &tokio_postgres::Error) -> StorageError {
        let code = e.code();
        if code == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) || e.is_closed() {
            drop(Object::take(client));
            return StorageError::unavailable(format!(
                "{}: {} (connection dropped; the next call reconnects)",
                self.place(),
                said::Said(e)
            ));
        }
        match code {
            Some(_) => StorageError::protocol(format!(
                "{} refused the call: {}",
                self.place(),
                said::Said(e)
            )),
            None => StorageError::unavailable(format!("{}: {}", self.place(), said::Said(e))),
        }
    }

    /// Deletes expired rows in small batches, every `every`, until the task is dropped.
    pub async fn sweep_every(self, every: Duration) {
        sweep::run(self, every).await;
    }

    /// One sweep now; how many expired rows it deleted.
    pub async fn sweep_once(&self) -> Result<u64, StorageError> {
        sweep::once(self).await
    }

    /// The schema's state (`turnstile migrate --check`).
    pub async fn schema_state(&self) -> Result<SchemaState, StorageError> {
        let client = self.pooled().await?;
        schema::state(&client, &self.inner.quoted)
            .await
            .map_err(|e| StorageError::unavailable(format!("{}: {e}", self.place())).caused_by(e))
    }

    /// Brings the schema up to date (`turnstile migrate`); the versions applied.
    pub async fn migrate(&self) -> Result<Vec<i32>, StorageError> {
        let mut client = self.pooled().await?;
        schema::migrate(&mut client, &self.inner.options.schema, &self.inner.quoted)
            .await
            .map_err(|e| StorageError::unavailable(format!("{}: {e}", self.place())).caused_by(e))
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl CounterStore for PostgresStore {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        counters::hit(self, hits).await
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        buckets::step(self, steps).await
    }

    async fn ready(&self) -> Result<(), StorageError> {
        self.within(|client| async move {
            let result = client.simple_query("SELECT 1").await.map(|_| ());
            (client, result)
        })
        .await
    }

    fn durable(&self) -> bool {
        true
    }

    fn gauges(&self) -> Vec<Gauge> {
        let status = self.inner.pool.status();
        vec![Gauge::PostgresPool {
            connections: status.size as u64,
            idle: status.available as u64,
        }]
    }
}
