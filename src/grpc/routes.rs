//! Which service a gRPC request goes to: the service name in its path (`/{service}/{method}`),
//! compared with each service's name, `UNIMPLEMENTED` for any other. This is what tonic's
//! `Routes` does through an axum router, which captures the method as a URL parameter and boxes
//! the request's and the response's bodies on every call; dispatching here costs neither
//! (BENCHMARKS.md, "The gRPC path"). The first service (the rate-limit service, whose calls
//! are nearly all of them) is called straight, its own future returned; the others (RLQS
//! streams, health, reflection) are boxed once.
//!
//! Must not touch: what any service answers, the layers in front (`server` adds them).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, ready};
use tonic::body::Body;
use tonic::server::NamedService;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

/// A service behind the dispatch, boxed.
type Boxed = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>;

/// What a service's call returns.
type Answer = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

/// Every gRPC service of the port, found by the service name in the request's path: `first`,
/// a service that is always ready (its `poll_ready` is `Ready`), and the others.
pub(crate) struct Routes<F> {
    first: F,
    /// Shared: hyper clones the service for every request, and a list of boxed services would
    /// cost an allocation per service per request.
    others: Arc<Vec<(&'static str, Boxed)>>,
}

impl<F: Clone> Clone for Routes<F> {
    fn clone(&self) -> Self {
        Routes {
            first: self.first.clone(),
            others: Arc::clone(&self.others),
        }
    }
}

impl<F: NamedService> std::fmt::Debug for Routes<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.others.iter().map(|(name, _)| *name).collect();
        f.debug_struct("Routes")
            .field("first", &F::NAME)
            .field("others", &names)
            .finish()
    }
}

impl<F> Routes<F>
where
    F: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService,
{
    /// `first` (always ready), and no other service yet.
    pub(crate) fn new(first: F) -> Routes<F> {
        Routes {
            first,
            others: Arc::new(Vec::new()),
        }
    }

    /// Adds `service` under its name.
    pub(crate) fn with<T>(mut self, service: T) -> Routes<F>
    where
        T: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        T::Future: Send + 'static,
    {
        Arc::make_mut(&mut self.others).push((T::NAME, BoxCloneSyncService::new(service)));
        self
    }
}

/// The service name of a gRPC path, `/{service}/{method}`.
fn service_name(path: &str) -> Option<&str> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    (!method.is_empty()).then_some(service)
}

/// What tonic's router answers for a path no service serves.
fn unimplemented() -> Answer {
    Box::pin(ready(Ok(tonic::Status::unimplemented("").into_http())))
}

impl<F> Service<http::Request<Body>> for Routes<F>
where
    F: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Service<http::Request<Body>, Future = Answer>
        + NamedService,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Every service here is always ready; each is readied below as it is called.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some(name) = service_name(request.uri().path()) else {
            return unimplemented();
        };
        if name == F::NAME {
            // Always ready (its `poll_ready` is `Ready`), so called directly.
            return self.first.call(request);
        }
        match self.others.iter().find(|(n, _)| *n == name) {
            Some((_, service)) => Box::pin(service.clone().oneshot(request)),
            None => unimplemented(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::service_name;

    #[test]
    fn service_names_come_from_the_path() {
        assert_eq!(
            service_name("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
            Some("envoy.service.ratelimit.v3.RateLimitService")
        );
        assert_eq!(
            service_name("/grpc.health.v1.Health/Check"),
            Some("grpc.health.v1.Health")
        );
        assert_eq!(service_name("/only-a-service"), None);
        assert_eq!(service_name("/service/"), None);
        assert_eq!(service_name("no-slash/Method"), None);
        assert_eq!(service_name(""), None);
    }
}
