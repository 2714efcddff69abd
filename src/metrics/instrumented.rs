//! A counter store wrapped so that every call is timed and its failures counted, without the
//! limiter knowing that metrics exist.

use std::sync::Arc;
use std::time::Instant;

use super::Metrics;
use crate::storage::{BucketAnswer, BucketStep, CounterStore, Gauge, Hit, StorageError};

/// `S`, with each batched call's latency and outcome recorded in [`Metrics`].
#[derive(Debug)]
pub struct Instrumented<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Instrumented<S> {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Self {
        Self { inner, metrics }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: CounterStore> CounterStore for Instrumented<S> {
    async fn hit(&self, hits: &[Hit]) -> Result<Vec<u64>, StorageError> {
        let started = Instant::now();
        let result = self.inner.hit(hits).await;
        self.metrics
            .backend_call(started.elapsed(), result.as_ref().err());
        result
    }

    async fn bucket(&self, steps: &[BucketStep]) -> Result<Vec<BucketAnswer>, StorageError> {
        let started = Instant::now();
        let result = self.inner.bucket(steps).await;
        self.metrics
            .backend_call(started.elapsed(), result.as_ref().err());
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
