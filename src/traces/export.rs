//! Getting finished spans to the collector without ever holding a decision up: a bounded
//! queue that a span joins with `try_send` (a full queue drops the span and counts it), and
//! one task that batches the queue and exports over OTLP (gRPC or HTTP, both through
//! hyper-rustls, so TLS is rustls with the same crypto as every other client here).
//!
//! Why not the SDK's `BatchSpanProcessor`: it keeps its drop count private (logged once at
//! shutdown) and does not see export failures at all; an on-call engineer needs both in
//! `/metrics` (`turnstile_trace_spans_dropped_total{reason}`). The queue and the batching
//! loop are the small part; the OTLP encoding and transport are the exporter crate's.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_rustls::rustls::ClientConfig;

use super::TracingError;
use crate::settings::{OtlpProtocol, TracingSettings};

/// What happened to spans after they ended, for `/metrics`.
#[derive(Debug, Default)]
pub struct SpanCounts {
    exported: AtomicU64,
    queue_full: AtomicU64,
    export_failed: AtomicU64,
}

impl SpanCounts {
    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Spans dropped because the queue was full (the collector too slow or away).
    pub fn dropped_queue_full(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
    }

    /// Spans dropped because their batch could not be exported.
    pub fn dropped_export_failed(&self) -> u64 {
        self.export_failed.load(Ordering::Relaxed)
    }
}

enum Queued {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queued::Span(_) => "Span",
            Queued::Flush(_) => "Flush",
        })
    }
}

/// When the export task should look at the queue: a batch's worth of spans has been queued
/// since it last did, or a flush was asked for. Waking it per span would cost a worker's
/// unpark per traced call; this wakes it per batch (or per `OTEL_BSP_SCHEDULE_DELAY`).
#[derive(Debug)]
struct Wake {
    pending: AtomicUsize,
    batch_size: usize,
    notify: Notify,
}

/// The span processor: ended spans into the queue, never waiting.
#[derive(Debug)]
pub(super) struct Queue {
    tx: mpsc::Sender<Queued>,
    wake: Arc<Wake>,
    counts: Arc<SpanCounts>,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(Queued::Span(Box::new(span))).is_err() {
            self.counts.queue_full.fetch_add(1, Ordering::Relaxed);
        } else if self.wake.pending.fetch_add(1, Ordering::Relaxed) + 1 == self.wake.batch_size {
            self.wake.notify.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Asks the export task to send what is queued now, and waits until it has.
#[derive(Debug, Clone)]
pub(super) struct Flusher(mpsc::Sender<Queued>, Arc<Wake>);

impl Flusher {
    pub(super) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.0.send(Queued::Flush(done)).await.is_ok() {
            self.1.notify.notify_one();
            let _ = wait.await;
        }
    }
}

/// The processor, its flusher and the export task (to be spawned).
pub(super) fn pipeline(
    settings: &TracingSettings,
    resource: &Resource,
    counts: Arc<SpanCounts>,
) -> Result<(Queue, Flusher, impl Future<Output = ()> + Send + use<>), TracingError> {
    let mut exporter = exporter(settings)?;
    exporter.set_resource(resource);
    let (tx, rx) = mpsc::channel(settings.queue_size);
    let wake = Arc::new(Wake {
        pending: AtomicUsize::new(0),
        batch_size: settings.batch_size,
        notify: Notify::new(),
    });
    let queue = Queue {
        tx: tx.clone(),
        wake: Arc::clone(&wake),
        counts: Arc::clone(&counts),
    };
    let exports = Exports {
        exporter,
        counts,
        batch: Vec::with_capacity(settings.batch_size),
        batch_size: settings.batch_size,
    };
    let task = export_loop(exports, rx, Arc::clone(&wake), settings.schedule_delay);
    Ok((queue, Flusher(tx, wake), task))
}

/// The exporter and the batch being filled.
struct Exports {
    exporter: opentelemetry_otlp::SpanExporter,
    counts: Arc<SpanCounts>,
    batch: Vec<SpanData>,
    batch_size: usize,
}

impl Exports {
    async fn push(&mut self, span: SpanData) {
        self.batch.push(span);
        if self.batch.len() >= self.batch_size {
            self.send().await;
        }
    }

    async fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let n = self.batch.len() as u64;
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(self.batch_size));
        match self.exporter.export(batch).await {
            Ok(()) => self.counts.exported.fetch_add(n, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!(error = %e, spans = n, "span export failed");
                self.counts.export_failed.fetch_add(n, Ordering::Relaxed)
            }
        };
    }
}

/// Every `delay`, or as soon as a batch is full or a flush is asked for: everything queued is
/// exported in batches of at most the batch size.
async fn export_loop(
    mut exports: Exports,
    mut rx: mpsc::Receiver<Queued>,
    wake: Arc<Wake>,
    delay: Duration,
) {
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        tokio::select! {
            () = wake.notify.notified() => {}
            () = tokio::time::sleep(delay) => {}
        }
        // Spans queued from here on count towards the next wake-up.
        wake.pending.store(0, Ordering::Relaxed);
        let closed = loop {
            match rx.try_recv() {
                Ok(Queued::Span(span)) => exports.push(*span).await,
                Ok(Queued::Flush(done)) => waiting.push(done),
                Err(TryRecvError::Empty) => break false,
                Err(TryRecvError::Disconnected) => break true,
            }
        };
        exports.send().await;
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
        if closed {
            return;
        }
    }
}

fn exporter(s: &TracingSettings) -> Result<opentelemetry_otlp::SpanExporter, TracingError> {
    let build = |e: opentelemetry_otlp::ExporterBuildError| TracingError::Exporter(e.to_string());
    let tls = client_config(s)?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    match s.protocol {
        OtlpProtocol::Grpc => {
            let endpoint = tonic::transport::Endpoint::from_shared(s.endpoint.clone())
                .map_err(|e| TracingError::Exporter(format!("{}: {e}", s.endpoint)))?
                .timeout(s.timeout)
                .connect_timeout(s.timeout);
            let channel = endpoint.connect_with_connector_lazy(connector.enable_http2().build());
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &s.headers {
                if let (Ok(k), Ok(v)) = (
                    k.parse::<tonic::metadata::MetadataKey<_>>(),
                    v.parse::<tonic::metadata::MetadataValue<_>>(),
                ) {
                    metadata.insert(k, v);
                }
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_channel(channel)
                .with_metadata(metadata)
                .with_timeout(s.timeout)
                .build()
                .map_err(build)
        }
        OtlpProtocol::Http => {
            let client = opentelemetry_http::hyper::HyperClient::new(
                connector.enable_http1().build(),
                s.timeout,
                None,
            );
            let headers: HashMap<String, String> = s.headers.iter().cloned().collect();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_endpoint(s.endpoint.clone())
                .with_headers(headers)
                .with_timeout(s.timeout)
                .build()
                .map_err(build)
        }
    }
}

/// rustls for `https` endpoints: `OTEL_EXPORTER_OTLP_CERTIFICATE` or the system's roots, and
/// the client certificate when one is set.
fn client_config(s: &TracingSettings) -> Result<ClientConfig, TracingError> {
    let tls = |e: crate::tls::TlsError| TracingError::Tls(e.into_message());
    let roots = crate::tls::roots(s.ca_file.as_deref()).map_err(tls)?;
    let identity = s
        .client_identity
        .as_ref()
        .map(|(c, k)| (c.as_path(), k.as_path()));
    crate::tls::client_config(crate::tls::Verify::Full, roots, identity).map_err(tls)
}
