//! The tower layer in front of the services: holds `ShouldRateLimit` calls to the limit's
//! places (a semaphore resized as the limit moves); a call that finds none is admitted anyway
//! when its peer is within its allotment (`peers`), refused at once when its peer is over its allotment
//! while others are active, and otherwise waits for a place (parked, not polled: waiting costs
//! no CPU) while it can still be answered within its deadline (or the default one) and
//! `max_wait`, refused with `RESOURCE_EXHAUSTED` after that. It times the admitted calls and,
//! once per period, hands the period's measurements to the controller. Every call, decision or
//! not, is counted open on its connection (idle means no call), and RLQS streams per peer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use futures_util::future::Either;
use tonic::body::Body;
use tower::{Layer, Service};

use super::deadline::grpc_timeout;
use super::places::{Permit, Shared};
use crate::metrics::AdmissionReadings;
use crate::peers::{CallGuard, ConnState, Decision, Fair, Peers};
use crate::settings::AdaptiveConcurrency;

/// The calls the limit applies to: the rate-limit decision (any of its methods).
const DECISION_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/";
/// RLQS streams, bounded per peer.
const RLQS_PATH: &str = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/";

/// Adds the limit on decisions in flight, and fairness between peers, in front of a service.
#[derive(Debug, Clone)]
pub(in crate::server) struct AdmissionLayer {
    shared: Arc<Shared>,
}

impl AdmissionLayer {
    /// A limit with these bounds (`fixed` when the adaptive one is off; calls without a
    /// deadline wait as if they had `default_timeout`), fair between `peers`, reporting to
    /// `readings`.
    pub(in crate::server) fn new(
        bounds: AdaptiveConcurrency,
        fixed: u32,
        default_timeout: Duration,
        peers: Arc<Peers>,
        readings: Arc<AdmissionReadings>,
    ) -> AdmissionLayer {
        let shared = Shared::new(bounds, fixed, default_timeout, peers, readings);
        AdmissionLayer {
            shared: Arc::new(shared),
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

/// Holds decisions to the limit, fairly between peers; counts every call on its connection;
/// bounds RLQS streams per peer.
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
        let call = request
            .extensions()
            .get::<Arc<ConnState>>()
            .map(|c| c.call());
        // The peer, borrowed from the call's guard (an owned copy only for calls that wait, or
        // that came without a connection, in-process).
        let local;
        let peer = match &call {
            Some(call) => call.peer(),
            None => {
                local = self.shared.local_peer();
                &local
            }
        };
        let path = request.uri().path();
        if !path.starts_with(DECISION_PATH) {
            let stream = match path.starts_with(RLQS_PATH) {
                true => match self.shared.open_stream(peer) {
                    Ok(stream) => Some(stream),
                    // At once: a stream's client does not end its side before an answer, so
                    // waiting for its body (as `refuse` does) would hold it until it gives up.
                    Err(status) => {
                        return Either::Right(Box::pin(std::future::ready(Ok(status.into_http()))));
                    }
                },
                false => None,
            };
            return Either::Right(Box::pin(counted_open(
                self.inner.call(request),
                (call, stream),
            )));
        }
        let shared = &self.shared;
        let inner = &mut self.inner;
        if !shared.enabled {
            return match shared.fixed_admits(peer) {
                Ok(()) => Either::Left(Admitted::new(inner.call(request), None, call, shared)),
                Err(status) => Either::Right(Box::pin(refuse(request, status))),
            };
        }
        if let Ok(place) = Arc::clone(&shared.places).try_acquire_owned() {
            let permit = Some(Permit::new(shared, place));
            return Either::Left(Admitted::new(inner.call(request), permit, call, shared));
        }
        match shared.fair(peer) {
            Ok(Fair::Within) => {
                return Either::Left(Admitted::new(inner.call(request), None, call, shared));
            }
            Ok(_) => {}
            Err(status) => return Either::Right(Box::pin(refuse(request, status))),
        }
        // Alone over its allotment, no place now: wait for one, as long as the call can still be
        // answered within its deadline (the service was readied for this call, so it goes
        // along).
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| grpc_timeout(v.as_bytes()));
        let budget = shared.wait_budget(deadline);
        let peer = Arc::clone(peer);
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let shared = Arc::clone(shared);
        Either::Right(Box::pin(async move {
            let place = Arc::clone(&shared.places).acquire_owned();
            match tokio::time::timeout(budget, place).await {
                Ok(Ok(place)) => {
                    let permit = Some(Permit::new(&shared, place));
                    Admitted::new(inner.call(request), permit, call, &shared).await
                }
                _ => {
                    let status = shared.refusal(&peer, deadline);
                    refuse(request, status).await
                }
            }
        }))
    }
}

/// The answer to a refused call, once its request is read: answered before its body ended,
/// the stream would be reset under a client still sending it, which tonic's client reports
/// as a transport error instead of this status.
async fn refuse<E>(
    request: http::Request<Body>,
    status: tonic::Status,
) -> Result<http::Response<Body>, E> {
    let mut body = std::pin::pin!(request.into_body());
    while let Some(Ok(_)) =
        futures_util::future::poll_fn(|cx| http_body::Body::poll_frame(body.as_mut(), cx)).await
    {
    }
    Ok(status.into_http())
}

/// A call that is not a decision: its connection counts it open (and its peer the RLQS
/// stream) until its response body ends.
async fn counted_open<F, E, G>(call: F, guards: G) -> Result<http::Response<Body>, E>
where
    F: Future<Output = Result<http::Response<Body>, E>>,
    G: Send + Unpin + 'static,
{
    let response = call.await?;
    Ok(response.map(|body| {
        Body::new(Holding {
            body,
            _guards: guards,
        })
    }))
}

pin_project_lite::pin_project! {
    /// A response body that holds its call's guards until it ends.
    struct Holding<G> {
        #[pin]
        body: Body,
        _guards: G,
    }
}

impl<G> http_body::Body for Holding<G> {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// An admitted call's answer: releases its place (if it took one) and its peer's count when
    /// done (or dropped), and times it.
    pub(in crate::server) struct Admitted<F> {
        #[pin]
        inner: F,
        permit: Option<Permit>,
        decision: Option<Decision>,
        call: Option<CallGuard>,
    }
}

impl<F> Admitted<F> {
    /// `inner`, counted for its peer (and holding `permit`'s place, when it took one): by the
    /// call's guard when it came on a connection, else as a decision of the local peer.
    fn new(
        inner: F,
        permit: Option<Permit>,
        call: Option<CallGuard>,
        shared: &Shared,
    ) -> Admitted<F> {
        let (decision, call) = match call {
            Some(call) => (None, Some(call.deciding())),
            None => (Some(shared.local_peer().enter()), None),
        };
        Admitted {
            inner,
            permit,
            decision,
            call,
        }
    }
}

impl<F: Future> Future for Admitted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = std::task::ready!(this.inner.poll(cx));
        // Answered: the place is given back now, not when hyper drops the future.
        this.permit.take();
        this.decision.take();
        this.call.take();
        Poll::Ready(output)
    }
}
