//! The Redis (and Valkey) counter store (`BACKEND_TYPE=redis`): one server, a cluster, or a
//! master behind Sentinel. A request's fixed-window hits are plain commands pipelined in one
//! write (`counters`); refunds, leases and token-bucket steps are script calls that do them
//! atomically on the server (`scripts`). On one server, or the master behind Sentinel, a
//! request's counters travel in one write, one round trip, over our own connection shared by
//! every caller (`pipe`: whatever is queued goes out together; over TLS too); on a cluster a
//! request's keys are grouped by slot, each group one write to its node over our own
//! connection to it, all groups at once. Scripts go over redis-rs's connections.
//! Each server, or each cluster node, has a circuit breaker (`breakers`). Failures are typed and
//! name Redis; a connection fault or a READONLY answer (a demoted master) drops the connection
//! at once so the next call reconnects (and, behind Sentinel, asks the sentinels for the master
//! again).
//!
//! Must not touch: rules, limits, the algorithms' arithmetic (the token-bucket script mirrors
//! `storage::token_bucket`, which the contract suite checks), key layout.

mod breakers;
mod cluster;
mod connect;
mod counters;
mod dialing;
mod guarded;
mod options;
mod pipe;
mod resp;
mod scripts;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use redis::{FromRedisValue, RedisError};

use super::{CounterOp, CounterStore, StorageError, Take, TokenAnswer, TokenStep};
use crate::clock::Clock;
use crate::storage::lateness::saturated_runtime;
use crate::storage::remote;
use breakers::Breakers;
use connect::{Conn, Connector};
pub use options::{RedisAuth, RedisOptions, RedisTarget, RedisTlsOptions};
#[cfg(fuzzing)]
pub use resp::fuzz_replies;
use scripts::Scripts;

/// A token bucket's `capacity × period (ms)` must stay below this here: the script's numbers
/// are Lua doubles, exact below 2^53. Rules beyond it are refused when they load.
pub const TOKEN_BUCKET_MAX_SCALE: u128 = 1 << 53;

/// What one call sends: a script invocation, or plain commands pipelined in one write.
enum Request<'a> {
    Script(&'a redis::ScriptInvocation<'a>),
    Commands(&'a redis::Pipeline),
}

/// The Redis counter store.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connector: Connector,
    scripts: Scripts,
    timeout: Duration,
    jitter_max_seconds: u64,
    clock: Arc<dyn Clock>,
    name: String,
    /// The runtime's recent scheduling delay: a late answer on a busy runtime is overload.
    scheduling: Arc<crate::storage::lateness::SchedulingDelay>,
    /// The server's circuit breaker, or each cluster node's.
    breakers: Breakers,
}

impl RedisStore {
    /// A store over `options`; nothing connects until the first call (or readiness check).
    pub fn new(options: RedisOptions, clock: Arc<dyn Clock>) -> Self {
        let name = match &options.target {
            RedisTarget::Tcp(a) | RedisTarget::Unix(a) => format!("redis {a}"),
            RedisTarget::Cluster(nodes) => format!("redis cluster {}", nodes.join(",")),
            RedisTarget::Sentinel { master, .. } => format!("redis master {master} (sentinel)"),
        };
        let cluster = matches!(options.target, RedisTarget::Cluster(_));
        RedisStore {
            inner: Arc::new(Inner {
                breakers: Breakers::new(&name, cluster),
                timeout: options.timeout,
                jitter_max_seconds: options.jitter_max_seconds,
                connector: Connector::new(options),
                scripts: Scripts::default(),
                clock,
                name,
                scheduling: crate::storage::lateness::SchedulingDelay::shared(),
            }),
        }
    }
}

impl RedisStore {
    /// The store as its errors name it (`redis 10.0.0.1:6379`, `redis cluster …`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl Inner {
    /// Seconds a counter created now for a window ending at `expires_at` must live.
    fn ttl(&self, key: &str, expires_at: u64, now: u64) -> u64 {
        let jitter = remote::jitter_seconds(key, self.jitter_max_seconds);
        (expires_at + jitter + 1).saturating_sub(now).max(1)
    }

    /// Runs one request under the deadline; faults reset the connection.
    async fn call<T: FromRedisValue>(&self, request: Request<'_>) -> Result<T, StorageError> {
        let mut conn = self.connector.get().await.map_err(|e| self.error(&e))?;
        // A cluster connection follows node faults and topology changes itself; the others
        // are dropped on a fault so the next call reconnects (behind Sentinel: to the master
        // the sentinels name now).
        let own_recovery = matches!(conn, Conn::Cluster(_));
        let started = tokio::time::Instant::now();
        let work = async {
            match request {
                Request::Script(invocation) => invocation.invoke_async(&mut conn).await,
                Request::Commands(commands) => commands.query_async(&mut conn).await,
            }
        };
        let result = tokio::time::timeout(self.timeout, work).await;
        match result {
            Ok(Ok(value)) => Ok(value),
            // redis-rs's own response timeout (the same deadline) may fire first.
            Ok(Err(e))
                if e.is_timeout()
                    && saturated_runtime(started, self.timeout, &self.scheduling).is_some() =>
            {
                Err(self.late(started))
            }
            Ok(Err(e)) => {
                let fault = e.is_io_error() || e.is_connection_dropped() || is_readonly(&e);
                if fault && !own_recovery {
                    self.connector.reset();
                }
                Err(self.error(&e))
            }
            Err(_) => Err(self.late(started)),
        }
    }

    /// A call started at `started` that passed its deadline: Turnstile's overload when the
    /// deadline fired late (the answer may have waited unread), Redis's lateness otherwise.
    fn late(&self, started: tokio::time::Instant) -> StorageError {
        remote::late(&self.name, started, self.timeout, &self.scheduling)
    }

    fn error(&self, e: &RedisError) -> StorageError {
        let error = if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            StorageError::unavailable(format!("{}: {e}", self.name))
        } else if e.is_cluster_error()
            || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
        {
            // The cluster's own state (CLUSTERDOWN, MASTERDOWN, a slot whose master does not
            // answer its redirection): Redis is unavailable, in its words.
            let code = e.code().unwrap_or("CLUSTER");
            StorageError::unavailable(format!("{}: {code}: {e}", self.name))
        } else if e.is_timeout() {
            StorageError::timeout(format!("{}: {e}", self.name))
        } else {
            StorageError::protocol(format!("{}: {e}", self.name))
        };
        error.caused_by(e.clone())
    }

    /// Token-bucket steps in one script call, in order (their keys must share a slot on a cluster).
    async fn steps(&self, steps: &[&TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        let mut invocation = self.scripts.token_bucket.prepare_invoke();
        for step in steps {
            if step.capacity.get().saturating_mul(step.interval.get()) >= TOKEN_BUCKET_MAX_SCALE {
                return Err(StorageError::protocol(format!(
                    "token bucket too large for Redis: capacity {} x period {} ms must stay \
                     under 2^53",
                    step.capacity, step.interval
                )));
            }
            let rate = step.ticks_per_milli.get();
            // More than a full token bucket is refused (a take) or fills it (a refund) whatever the
            // amount: bounded so, n × period stays within the script's exact range.
            let full = u64::try_from(step.capacity.get()).unwrap_or(u64::MAX);
            let (n, refund) = match step.take {
                Take::Take(n) => (n.min(full.saturating_add(1)), 0),
                Take::Refund(n) => (n.min(full), 1),
            };
            invocation
                .key(step.key.as_bytes())
                .arg(u64::try_from(step.now / rate).unwrap_or(u64::MAX))
                .arg(u64::try_from(rate).unwrap_or(u64::MAX))
                .arg(u64::try_from(step.interval.get()).unwrap_or(u64::MAX))
                .arg(u64::try_from(step.capacity.get()).unwrap_or(u64::MAX))
                .arg(n)
                .arg(refund);
        }
        let flat: Vec<i64> = self.call(Request::Script(&invocation)).await?;
        if flat.len() != 3 * steps.len() {
            return Err(StorageError::protocol(format!(
                "{}: {} values for {} token-bucket steps",
                self.name,
                flat.len(),
                steps.len()
            )));
        }
        Ok(flat
            .chunks(3)
            .zip(steps)
            .map(|(v, step)| {
                let rate = step.ticks_per_milli.get();
                let (q, r) = (
                    u128::try_from(v[1]).unwrap_or(0),
                    u128::try_from(v[2]).unwrap_or(0),
                );
                TokenAnswer {
                    admitted: v[0] == 1,
                    tat: q * rate + r,
                }
            })
            .collect())
    }
}

fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY")
}

/// The futures are boxed: redis-rs's are deep (unboxed, they push the service's request future
/// past the compiler's layout depth limit in release builds) and large.
impl CounterStore for RedisStore {
    /// The usual call (adds and reads on one server over our own pipe) has a future of its own
    /// without redis-rs's: moving the general one (4.8 KB) into its box cost 2 % of the server
    /// at saturation (perf, BENCHMARKS.md "Redis"), this one is 320 bytes. Unboxed, it would
    /// grow the decision's future (`tests/future_size.rs`) by 16 bytes.
    fn apply_ops(
        &self,
        hits: &[CounterOp],
    ) -> impl Future<Output = Result<Vec<u64>, StorageError>> + Send {
        match self.inner.connector.pipes() && counters::plain(hits) {
            true => Either::Left(Box::pin(self.piped(hits))),
            false => Either::Right(Box::pin(self.hit_all(hits))),
        }
    }

    fn take_tokens(
        &self,
        steps: &[TokenStep],
    ) -> impl Future<Output = Result<Vec<TokenAnswer>, StorageError>> + Send {
        Box::pin(self.token_steps_all(steps))
    }

    fn ready(&self) -> impl Future<Output = Result<(), StorageError>> + Send {
        Box::pin(async {
            let outcome = self.is_ready().await;
            if let Breakers::Server(breaker) = &self.inner.breakers {
                breaker.record(&outcome);
            }
            outcome
        })
    }

    fn gauges(&self) -> Vec<crate::storage::Gauge> {
        self.inner.breakers.gauges()
    }
}

impl RedisStore {
    /// Hits that are not all adds and reads on a pipe (`piped`): one script call on one server,
    /// by node on a cluster.
    async fn hit_all(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let now = self.inner.clock.now_secs();
        let all: Vec<&CounterOp> = hits.iter().collect();
        if !self.inner.connector.is_cluster() {
            let breaker = self.admit(b"")?;
            let outcome = self.inner.scripted(&all, now).await;
            return self.after(breaker, outcome);
        }
        self.cluster_hits(&all, now).await
    }

    async fn token_steps_all(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        let all: Vec<&TokenStep> = steps.iter().collect();
        if !self.inner.connector.is_cluster() {
            let breaker = self.admit(b"")?;
            let outcome = self.inner.steps(&all).await;
            return self.after(breaker, outcome);
        }
        // A cluster: one call per step (a script's keys must share a slot).
        let answers = remote::in_key_order(
            &all,
            |s| s.key.as_str(),
            |step| async move {
                let breaker = self.admit(step.key.as_bytes())?;
                let outcome = self.inner.steps(std::slice::from_ref(step)).await;
                self.after(breaker, outcome)
            },
        );
        Ok(answers.await?.into_iter().flatten().collect())
    }
}
