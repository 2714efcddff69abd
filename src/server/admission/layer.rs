//! The tower layer in front of the services: holds `ShouldRateLimit` calls to the limit's
//! places (a semaphore resized as the limit moves), lets a call beyond it wait for a place
//! (parked, not polled: waiting costs no CPU) while it can still be answered within its
//! caller's deadline and `max_wait`, refuses it with `RESOURCE_EXHAUSTED` after that, times the
//! admitted calls and, once per window, hands the window's measurements to the controller.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use tonic::body::Body;
use tower::{Layer, Service};

use super::deadline::grpc_timeout;
use super::places::{Permit, Shared};
use crate::metrics::AdmissionReadings;
use crate::settings::AdaptiveConcurrency;

/// The calls the limit applies to: the rate-limit decision (any of its methods).
const DECISION_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/";

/// Adds the adaptive limit in front of a service.
#[derive(Debug, Clone)]
pub(in crate::server) struct AdmissionLayer {
    shared: Arc<Shared>,
}

impl AdmissionLayer {
    /// A limit with these bounds, reporting to `readings`.
    pub(in crate::server) fn new(
        bounds: AdaptiveConcurrency,
        readings: Arc<AdmissionReadings>,
    ) -> AdmissionLayer {
        AdmissionLayer {
            shared: Arc::new(Shared::new(bounds, readings)),
        }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Admission<S> {
        Admission {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Holds decisions to the adaptive limit; refuses with `RESOURCE_EXHAUSTED` a call that found
/// no place while it could still be answered in time.
#[derive(Debug, Clone)]
pub(in crate::server) struct Admission<S> {
    inner: S,
    shared: Arc<Shared>,
}

type Waited<E> = Pin<Box<dyn Future<Output = Result<http::Response<Body>, E>> + Send>>;

impl<S> Service<http::Request<Body>> for Admission<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<Admitted<S::Future>, Waited<S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let shared = &self.shared;
        if !shared.enabled || !request.uri().path().starts_with(DECISION_PATH) {
            return Either::Left(Admitted::new(self.inner.call(request), None));
        }
        if let Ok(place) = Arc::clone(&shared.places).try_acquire_owned() {
            let permit = Permit::new(shared, place);
            return Either::Left(Admitted::new(self.inner.call(request), Some(permit)));
        }
        // No place now: wait for one, as long as the call can still be answered within the
        // caller's deadline (the service was readied for this call, so it goes along).
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| grpc_timeout(v.as_bytes()));
        let budget = shared.wait_budget(deadline);
        if budget.is_some_and(|b| b.is_zero()) {
            let shared = Arc::clone(shared);
            return Either::Right(Box::pin(
                async move { Ok(shared.shed(request, deadline).await) },
            ));
        }
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let shared = Arc::clone(shared);
        Either::Right(Box::pin(async move {
            let place = Arc::clone(&shared.places).acquire_owned();
            let place = match budget {
                Some(budget) => tokio::time::timeout(budget, place).await.ok(),
                None => Some(place.await),
            };
            match place {
                Some(Ok(place)) => {
                    let permit = Permit::new(&shared, place);
                    Admitted::new(inner.call(request), Some(permit)).await
                }
                _ => Ok(shared.shed(request, deadline).await),
            }
        }))
    }
}

pin_project_lite::pin_project! {
    /// An admitted call's answer: releases its place when done (or dropped), and times it.
    pub(in crate::server) struct Admitted<F> {
        #[pin]
        inner: F,
        permit: Option<Permit>,
    }
}

impl<F> Admitted<F> {
    fn new(inner: F, permit: Option<Permit>) -> Admitted<F> {
        Admitted { inner, permit }
    }
}

impl<F: Future> Future for Admitted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = std::task::ready!(this.inner.poll(cx));
        // Answered: the place is given back now, not when hyper drops the future.
        this.permit.take();
        Poll::Ready(output)
    }
}
