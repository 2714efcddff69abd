//! An OTLP/gRPC span sink for the tracing benchmark: accepts every `TraceService/Export`,
//! counts the spans, and prints the count when stopped (SIGINT or SIGTERM). It stands in for an
//! OpenTelemetry Collector so that the benchmark measures Turnstile's cost of tracing, not a
//! collector's.
//!
//! Usage: `turnstile-otlp-sink [ADDR]` (default `127.0.0.1:4317`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

#[derive(Debug, Default, Clone)]
struct Sink(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .into_inner()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4317".to_owned())
        .parse()?;
    let sink = Sink::default();
    let count = Arc::clone(&sink.0);
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve_with_shutdown(addr, stop)
        .await?;
    println!("spans {}", count.load(Ordering::Relaxed));
    Ok(())
}
