//! A counter store wrapped so that every call is timed and its failures counted, and, when
//! tracing is on and the call runs inside a sampled decision, a child span describes it
//! (`db.system`, the servers, the number of operations, the outcome), without the limiter
//! knowing that metrics or traces exist.

use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::storage::{CounterOp, CounterStore, Gauge, StorageError, TokenAnswer, TokenStep};
use crate::traces::{Traced, Tracer};

/// How a store's calls are named in traces.
#[derive(Debug, Clone)]
pub struct StoreLabel {
    /// The span name (the reference's, where it has one: `Redis Pipeline Execution`,
    /// `Memcached Fetch Execution`).
    pub span: &'static str,
    /// `db.system`: `memory`, `memcached`, `redis`, `postgresql`.
    pub system: &'static str,
    /// `server.address`: the configured servers.
    pub servers: String,
    /// `turnstile.store.role`: `main`, `per_second` or `durable`.
    pub role: &'static str,
}

/// `S`, with each batched call's latency and outcome recorded in [`Metrics`].
#[derive(Debug)]
pub struct Instrumented<S> {
    inner: S,
    metrics: Arc<Metrics>,
    traced: Option<(Arc<Tracer>, StoreLabel)>,
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Self {
        Self {
            inner,
            metrics,
            traced: None,
        }
    }

    /// Also makes a child span per call under a traced decision.
    pub fn traced(mut self, tracer: Arc<Tracer>, label: StoreLabel) -> Self {
        self.traced = Some((tracer, label));
        self
    }

    fn span(&self, operations: usize) -> Option<Traced> {
        let (tracer, label) = self.traced.as_ref()?;
        let span = tracer.child_span(label.span)?;
        span.set("db.system", label.system);
        span.set("server.address", label.servers.clone());
        span.set("turnstile.store.role", label.role);
        span.set("turnstile.store.operations", operations as i64);
        Some(span)
    }

    fn done<T>(&self, started: Instant, span: Option<Traced>, result: &Result<T, StorageError>) {
        self.metrics
            .backend_call(started.elapsed(), result.as_ref().err());
        if let Some(span) = span {
            match result {
                Ok(_) => span.set("turnstile.store.outcome", "ok"),
                Err(e) => {
                    span.set("turnstile.store.outcome", e.kind().as_str());
                    span.fail(e.to_string());
                }
            }
            span.end();
        }
    }
}

impl<S: CounterStore> CounterStore for Instrumented<S> {
    async fn apply_ops(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let started = Instant::now();
        let span = self.span(hits.len());
        let result = self.inner.apply_ops(hits).await;
        self.done(started, span, &result);
        result
    }

    async fn take_tokens(&self, steps: &[TokenStep]) -> Result<Vec<TokenAnswer>, StorageError> {
        let started = Instant::now();
        let span = self.span(steps.len());
        let result = self.inner.take_tokens(steps).await;
        self.done(started, span, &result);
        result
    }

    async fn ready(&self) -> Result<(), StorageError> {
        self.inner.ready().await
    }

    fn gauges(&self) -> Vec<Gauge> {
        self.inner.gauges()
    }

    fn durable(&self) -> bool {
        self.inner.durable()
    }
}
