//! Where a call's parent span comes from: the W3C `traceparent`/`tracestate` headers (and
//! W3C baggage) through the SDK's propagators, else B3 (the single `b3` header, then the
//! multi-header `x-b3-*` form, as Envoy's Zipkin tracer sends them), read from a call's gRPC
//! metadata. When a caller sends both, W3C wins (the reference lets B3 win; both name the same
//! trace whenever a proxy translates between them, and W3C is what OpenTelemetry sends).
//!
//! B3 is read here rather than through `opentelemetry-zipkin`'s propagator: that crate is
//! deprecated as a whole, and reading B3 is the two header forms below. A B3 context without
//! a sampling decision ("deferred") counts as not sampled, as OpenTelemetry's B3 readers do.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use tonic::metadata::{Ascii, KeyRef, MetadataKey, MetadataMap};

/// Reads parent contexts from call metadata.
pub(super) struct Parents(TextMapCompositePropagator, [MetadataKey<Ascii>; 3]);

impl std::fmt::Debug for Parents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parents(tracecontext, baggage, b3)")
    }
}

impl Parents {
    pub(super) fn new() -> Self {
        Self(
            TextMapCompositePropagator::new(vec![
                Box::new(TraceContextPropagator::new()),
                Box::new(BaggagePropagator::new()),
            ]),
            // The headers that start a parent, parsed once.
            ["traceparent", "b3", "x-b3-traceid"].map(MetadataKey::from_static),
        )
    }

    /// The caller's context (empty when it sent no trace headers).
    pub(super) fn extract(&self, metadata: &MetadataMap) -> Context {
        // Most calls carry no trace at all: three lookups, and no propagator runs.
        let traced = self.1.iter().any(|h| metadata.contains_key(h));
        if !traced {
            return Context::new();
        }
        let cx = self.0.extract(&Metadata(metadata));
        if cx.span().span_context().is_valid() {
            return cx;
        }
        match b3(metadata) {
            Some(parent) => cx.with_remote_span_context(parent),
            None => cx,
        }
    }
}

/// The B3 parent: the single `b3` header if it is valid, else the `x-b3-*` headers.
fn b3(metadata: &MetadataMap) -> Option<SpanContext> {
    let get = |name: &str| metadata.get(name).and_then(|v| v.to_str().ok());
    if let Some(single) = get("b3").and_then(b3_single) {
        return Some(single);
    }
    let sampled = match (get("x-b3-flags"), get("x-b3-sampled")) {
        (Some("1"), _) => true,
        (_, Some(s)) => matches!(s, "1" | "true"),
        (_, None) => false,
    };
    span_context(get("x-b3-traceid")?, get("x-b3-spanid")?, sampled)
}

/// `{trace}-{span}[-{sampling}[-{parent}]]` (a lone sampling state carries no parent).
fn b3_single(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (trace, span) = (parts.next()?, parts.next()?);
    let sampled = match parts.next() {
        None => false,
        Some("1" | "d") => true,
        Some("0") => false,
        Some(_) => return None,
    };
    span_context(trace, span, sampled)
}

/// A remote span context from B3's hex ids (a 64-bit trace id is zero-padded to 128 bits).
fn span_context(trace: &str, span: &str, sampled: bool) -> Option<SpanContext> {
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !(hex(trace, 32) || hex(trace, 16)) || !hex(span, 16) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

/// gRPC metadata as OpenTelemetry's header carrier (ASCII entries only).
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                KeyRef::Ascii(k) => Some(k.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(headers: &[(&'static str, &'static str)]) -> opentelemetry::trace::SpanContext {
        let mut md = MetadataMap::new();
        for (k, v) in headers {
            md.insert(*k, v.parse().expect("ascii"));
        }
        Parents::new().extract(&md).span().span_context().clone()
    }

    #[test]
    fn w3c_b3_multi_and_single_are_read_and_w3c_wins() {
        let w3c = parent(&[(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )]);
        assert_eq!(
            w3c.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(w3c.is_sampled() && w3c.is_remote());
        let multi = parent(&[
            ("x-b3-traceid", "463ac35c9f6413ad48485a3953bb6124"),
            ("x-b3-spanid", "a2fb4a1d1a96d312"),
            ("x-b3-sampled", "1"),
        ]);
        assert_eq!(multi.span_id().to_string(), "a2fb4a1d1a96d312");
        assert!(multi.is_sampled());
        let single = parent(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-0")]);
        assert_eq!(
            single.trace_id().to_string(),
            "80f198ee56343ba864fe8b2a57d3eff7"
        );
        assert!(!single.is_sampled());
        let both = parent(&[
            ("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        ]);
        assert_eq!(
            both.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(!parent(&[]).is_valid());
        let short = parent(&[("b3", "64fe8b2a57d3eff7-e457b5a2e4d86bd1-d")]);
        assert_eq!(
            short.trace_id().to_string(),
            "000000000000000064fe8b2a57d3eff7"
        );
        assert!(short.is_sampled());
        assert!(!parent(&[("b3", "1")]).is_valid());
        assert!(!parent(&[("x-b3-traceid", "zz"), ("x-b3-spanid", "a2fb4a1d1a96d312")]).is_valid());
    }
}
