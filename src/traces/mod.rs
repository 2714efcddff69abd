//! OpenTelemetry traces (`TRACING_ENABLED`): a span per `ShouldRateLimit` call and per RLQS
//! report, children per counter-store call, exported over OTLP off the request path.
//!
//! Spans are made with the OpenTelemetry API directly, not through `tracing-opentelemetry`:
//! the bridge builds a `tracing` span (and its OpenTelemetry builder) for every call whether or
//! not it is sampled, while here the sampler (`ParentBased(TraceIdRatioBased(rate))`, as the
//! reference) decides first and an unsampled call costs three header lookups and one random
//! draw, nothing more: a call that names no parent is a root, and roots are drawn at
//! `TRACING_SAMPLING_RATE` here, before the SDK is asked for anything (the SDK's own sampler
//! is then `ParentBased(AlwaysOn)`, so a drawn root is recorded and a caller's flag decides
//! for the rest; the same choices as the reference's sampler, without building and dropping a
//! span on every unsampled call). Attributes are computed only for recording spans. The parent context
//! travels with the decision's future (`FutureExt::with_context`), so a store call started
//! inside it finds its parent without the limiter knowing that traces exist.
//!
//! Must not touch: the decision, protocols' conversion, stores.

mod export;
mod propagation;

pub use export::SpanCounts;

use std::borrow::Cow;
use std::sync::Arc;

use opentelemetry::trace::{
    FutureExt as _, Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{RandomIdGenerator, Sampler, SdkTracer, SdkTracerProvider};
use tonic::metadata::MetadataMap;

use crate::settings::TracingSettings;

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// The OTLP exporter rejected its configuration.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A certificate or key file (`OTEL_EXPORTER_OTLP_*CERTIFICATE`, `…_CLIENT_KEY`).
    #[error("OTLP exporter TLS: {0}")]
    Tls(String),
}

/// The process's tracer: sampling, parents, spans and their export.
pub struct Tracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    parents: propagation::Parents,
    flusher: export::Flusher,
    include_values: bool,
    root_rate: RootRate,
}

/// The share of root calls traced (`TRACING_SAMPLING_RATE`), as a threshold on a random
/// 64-bit draw.
#[derive(Debug, Clone, Copy)]
enum RootRate {
    Never,
    Always,
    Below(u64),
}

impl RootRate {
    fn new(rate: f64) -> Self {
        if rate >= 1.0 {
            RootRate::Always
        } else if rate > 0.0 {
            // rate × 2^64, in (0, 2^64): the draw is below it with probability `rate`.
            RootRate::Below((rate * 18_446_744_073_709_551_616.0) as u64)
        } else {
            RootRate::Never
        }
    }

    fn draw(self) -> bool {
        use opentelemetry_sdk::trace::IdGenerator as _;
        match self {
            RootRate::Never => false,
            RootRate::Always => true,
            RootRate::Below(threshold) => {
                let draw =
                    u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes());
                draw < threshold
            }
        }
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("include_values", &self.include_values)
            .finish_non_exhaustive()
    }
}

impl Tracer {
    /// The tracer and its export task (to be spawned on the runtime); `counts` learns what
    /// became of every span.
    pub fn start(
        settings: &TracingSettings,
        counts: Arc<SpanCounts>,
    ) -> Result<(Tracer, impl Future<Output = ()> + Send + use<>), TracingError> {
        let resource = resource(settings);
        let (queue, flusher, task) = export::pipeline(settings, &resource, counts)?;
        // Roots are drawn in `server_span`; the SDK records them and follows callers' flags.
        let sampler = Sampler::ParentBased(Box::new(Sampler::AlwaysOn));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_sampler(sampler)
            .with_resource(resource.clone())
            .build();
        let tracer = provider.tracer("turnstile");
        let tracer = Tracer {
            provider,
            tracer,
            parents: propagation::Parents::new(),
            flusher,
            include_values: settings.include_values,
            root_rate: RootRate::new(settings.sampling_rate),
        };
        Ok((tracer, task))
    }

    /// Whether descriptor values may be attributes (`TRACING_INCLUDE_VALUES`).
    pub fn include_values(&self) -> bool {
        self.include_values
    }

    /// The caller's trace context from a call's metadata.
    pub fn parent(&self, metadata: &MetadataMap) -> Context {
        self.parents.extract(metadata)
    }

    /// A server span under `parent`, or `None` when the sampler drops it: a root (no valid
    /// parent) is drawn at the sampling rate, a caller's flag decides for its children.
    pub fn server_span(&self, name: &'static str, parent: &Context) -> Option<Traced> {
        let has_parent = parent.span().span_context().is_valid();
        if !has_parent && !self.root_rate.draw() {
            return None;
        }
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .start_with_context(&self.tracer, parent);
        span.is_recording().then(|| Traced(parent.with_span(span)))
    }

    /// A client span under the current context's span (a store call inside a traced
    /// decision), or `None` when there is no recording span to hang it from.
    pub fn child_span(&self, name: &'static str) -> Option<Traced> {
        if !Context::map_current(|cx| cx.span().is_recording()) {
            return None;
        }
        let parent = Context::current();
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .start_with_context(&self.tracer, &parent);
        Some(Traced(parent.with_span(span)))
    }

    /// Sends what is queued now and waits until it has been exported (or failed).
    pub async fn flush(&self) {
        self.flusher.flush().await;
    }

    /// Flushes, then stops the provider.
    pub async fn shutdown(&self) {
        self.flush().await;
        let _ = self.provider.shutdown();
    }
}

/// A recording span and the context that carries it.
#[derive(Debug, Clone)]
pub struct Traced(Context);

impl Traced {
    /// Sets one attribute.
    pub fn set(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        self.0.span().set_attribute(KeyValue::new(key, value));
    }

    /// Marks the span failed with `message`.
    pub fn fail(&self, message: impl Into<Cow<'static, str>>) {
        self.0.span().set_status(Status::error(message));
    }

    /// Runs `future` with this span as the current context, so child spans find it.
    pub async fn run<F: Future>(&self, future: F) -> F::Output {
        future.with_context(self.0.clone()).await
    }

    /// Ends the span now.
    pub fn end(self) {
        self.0.span().end();
    }
}

/// `service.name`, `service.namespace`, `service.instance.id` (a random UUID when not set,
/// as the reference makes one).
fn resource(s: &TracingSettings) -> Resource {
    let mut attributes = Vec::with_capacity(3);
    if !s.service_namespace.is_empty() {
        attributes.push(KeyValue::new(
            "service.namespace",
            s.service_namespace.clone(),
        ));
    }
    let instance = if s.service_instance_id.is_empty() {
        random_uuid()
    } else {
        s.service_instance_id.clone()
    };
    attributes.push(KeyValue::new("service.instance.id", instance));
    Resource::builder()
        .with_service_name(s.service_name.clone())
        .with_attributes(attributes)
        .build()
}

/// A version-4 UUID from the SDK's random trace-id generator.
fn random_uuid() -> String {
    use opentelemetry_sdk::trace::IdGenerator as _;
    let raw = u128::from_be_bytes(RandomIdGenerator::default().new_trace_id().to_bytes());
    let v4 = (raw & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{v4:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn roots_are_drawn_at_the_rate() {
        use super::RootRate;
        assert!((0..1000).all(|_| RootRate::new(1.0).draw()));
        assert!((0..1000).all(|_| !RootRate::new(0.0).draw()));
        assert!((0..1000).all(|_| !RootRate::new(-1.0).draw()));
        let kept = (0..100_000).filter(|_| RootRate::new(0.01).draw()).count();
        // 1% of 100,000 is 1,000 (σ ≈ 31): 800..1200 is more than six σ either side.
        assert!((800..1200).contains(&kept), "{kept}");
    }

    #[test]
    fn instance_ids_are_version_4_uuids() {
        let id = super::random_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, super::random_uuid());
    }
}
