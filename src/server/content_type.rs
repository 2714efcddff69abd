//! The edge of the gRPC port, in the protocol's own terms. A request whose `content-type` is
//! not `application/grpc` (or a `application/grpc+…` variant) is answered `415 Unsupported
//! Media Type` before it reaches a service, as the gRPC over HTTP/2 protocol asks, instead of
//! being decoded as if it were gRPC. And a request message over the size limit is answered
//! `RESOURCE_EXHAUSTED`, the code gRPC specifies for it (tonic's decoder says `OUT_OF_RANGE`).

use std::task::{Context, Poll};

use futures_util::TryFutureExt;
use futures_util::future::{Either, MapOk, Ready, ready};
use tonic::body::Body;
use tower::{Layer, Service};

/// Adds [`GrpcOnly`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct GrpcOnlyLayer;

impl<S> Layer<S> for GrpcOnlyLayer {
    type Service = GrpcOnly<S>;

    fn layer(&self, inner: S) -> GrpcOnly<S> {
        GrpcOnly { inner }
    }
}

/// Refuses non-gRPC requests with 415.
#[derive(Debug, Clone)]
pub(super) struct GrpcOnly<S> {
    inner: S,
}

fn is_grpc(request: &http::Request<Body>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v == "application/grpc"
                || v.starts_with("application/grpc+")
                || v.starts_with("application/grpc;")
        })
}

/// A trailers-only answer `OUT_OF_RANGE` "decoded message length too large" becomes
/// `RESOURCE_EXHAUSTED` with the same message.
fn oversize_is_exhaustion(mut response: http::Response<Body>) -> http::Response<Body> {
    let headers = response.headers();
    let oversize = headers.get("grpc-status").is_some_and(|v| v == "11")
        && headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| {
                m.contains("message%20length%20too%20large")
                    || m.contains("message length too large")
            });
    if oversize {
        response
            .headers_mut()
            .insert("grpc-status", http::HeaderValue::from_static("8"));
    }
    response
}

impl<S> Service<http::Request<Body>> for GrpcOnly<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<
        Ready<Result<http::Response<Body>, S::Error>>,
        MapOk<S::Future, fn(http::Response<Body>) -> http::Response<Body>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if is_grpc(&request) {
            let fix: fn(http::Response<Body>) -> http::Response<Body> = oversize_is_exhaustion;
            return Either::Right(self.inner.call(request).map_ok(fix));
        }
        let mut refused = http::Response::new(Body::empty());
        *refused.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
        refused.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/grpc"),
        );
        Either::Left(ready(Ok(refused)))
    }
}
