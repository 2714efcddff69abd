//! The `envoy.service.ratelimit.v3.RateLimitService` route, written out rather than generated
//! so that the request is read by the server's own decoder (`decode`: the layout of
//! `turnstile.wire.v1.LenientRequest`, the header-derived texts as bytes and borrowed, see
//! `proto/turnstile/wire/v1/lenient.proto`) while answering with the official response type, and so that its one unary exchange goes without tonic's
//! streaming codec (`grpc::unary`). Otherwise it is what tonic's generated server does: one unary
//! method, `UNIMPLEMENTED` for any other path.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;

use tonic::metadata::MetadataMap;

use super::RateLimitHandler;
use super::decode::decode_request;
use crate::grpc::unary;
use crate::storage::CounterStore;

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The rate-limit service for the gRPC router.
#[derive(Debug)]
pub struct RlsServer<S> {
    handler: Arc<RateLimitHandler<S>>,
}

impl<S> RlsServer<S> {
    /// Serves `handler`.
    pub fn new(handler: RateLimitHandler<S>) -> Self {
        Self {
            handler: Arc::new(handler),
        }
    }
}

impl<S> Clone for RlsServer<S> {
    fn clone(&self) -> Self {
        Self {
            handler: Arc::clone(&self.handler),
        }
    }
}

impl<S> NamedService for RlsServer<S> {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl<S, B> tower::Service<http::Request<B>> for RlsServer<S>
where
    S: CounterStore,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let handler = Arc::clone(&self.handler);
        Box::pin(async move { Ok(answer(&handler, request).await) })
    }
}

/// Answers one call: the request read (`grpc::unary`) and decoded (`decode`), the handler's
/// answer encoded.
async fn answer<S, B>(
    handler: &RateLimitHandler<S>,
    request: http::Request<B>,
) -> http::Response<Body>
where
    S: CounterStore,
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, body) = request.into_parts();
    // Messages after the first are decoded and dropped, as tonic does.
    let check = |more: &[u8]| match decode_request(more) {
        Ok(_) => Ok(()),
        Err(err) => Err(Status::internal(err.to_string())),
    };
    let message = match unary::read_request(&parts.headers, body, check).await {
        Ok(message) => message,
        Err(status) => return status.into_http(),
    };
    // Undecodable protobuf is INTERNAL, as tonic (and grpc-go) answer it.
    let request = match decode_request(&message) {
        Ok(request) => request,
        Err(err) => return Status::internal(err.to_string()).into_http(),
    };
    let span = handler.span(&MetadataMap::from_headers(parts.headers));
    match handler.should_rate_limit(request, span).await {
        Ok(response) => unary::respond(&response),
        Err(status) => status.into_http(),
    }
}
