//! An OTLP trace receiver for the tests, built from `opentelemetry-proto`'s generated code:
//! OTLP/gRPC (`TraceService/Export`) and OTLP/HTTP (`POST /v1/traces`, protobuf) on loopback.
//! It keeps every span it is sent, with its resource's `service.name`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// A span as received, with the `service.name` of its resource.
#[derive(Debug, Clone)]
pub struct Got {
    pub service: String,
    pub resource: Vec<KeyValue>,
    pub span: Span,
}

impl Got {
    pub fn name(&self) -> &str {
        &self.span.name
    }

    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// A string, integer or boolean attribute, as text; arrays joined with `|`.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }

    pub fn resource_attr(&self, key: &str) -> Option<String> {
        attr(&self.resource, key)
    }
}

fn attr(list: &[KeyValue], key: &str) -> Option<String> {
    let value = list
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?;
    Some(text(value))
}

fn text(value: &Value) -> String {
    match value {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        Value::ArrayValue(a) => a
            .values
            .iter()
            .filter_map(|v| v.value.as_ref().map(text))
            .collect::<Vec<_>>()
            .join("|"),
        other => format!("{other:?}"),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone, Default)]
struct Spans(Arc<Mutex<Vec<Got>>>);

impl Spans {
    fn take(&self, request: ExportTraceServiceRequest) {
        let mut all = self.0.lock().expect("spans");
        for resource_spans in request.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default();
            let service = attr(&resource, "service.name").unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    all.push(Got {
                        service: service.clone(),
                        resource: resource.clone(),
                        span,
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Spans {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A running receiver, stopped when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    spans: Spans,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// OTLP/gRPC on a loopback port.
    pub async fn grpc() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans = Spans::default();
        let service = TraceServiceServer::new(spans.clone());
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Receiver { addr, spans, task }
    }

    /// OTLP/HTTP (`POST /v1/traces`, protobuf) on a loopback port.
    pub async fn http() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans = Spans::default();
        let keep = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let keep = keep.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            keep.take(request);
                            (
                                axum::http::StatusCode::OK,
                                [("content-type", "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(_) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [("content-type", "text/plain")],
                            b"not an ExportTraceServiceRequest".to_vec(),
                        ),
                    }
                }
            }),
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, spans, task }
    }

    pub fn spans(&self) -> Vec<Got> {
        self.spans.0.lock().expect("spans").clone()
    }

    /// Waits (polling, up to 20 s) until `done` holds for the spans received.
    pub async fn until(&self, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let received = || {
            let names: Vec<_> = self
                .spans()
                .iter()
                .map(|g| (g.service.clone(), g.name().to_owned()))
                .collect();
            format!("{what}; received: {names:?}")
        };
        crate::support::wait::until_some_said(Duration::from_secs(20), received, || async {
            let spans = self.spans();
            done(&spans).then_some(spans)
        })
        .await
    }
}
