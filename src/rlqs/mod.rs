//! The RLQS edge: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`.
//! Each stream is one [`QuotaStream`] driven by the stream itself (no task of its own, none per
//! bucket): a report is read, converted (`convert`), folded and assigned by `quota`, and the
//! assignments go back as one response. While it waits for the next report, a stream also
//! waits for the end of its buckets' window (plus its own phase, spreading streams over
//! `REFRESH_SPREAD_MS`) and then pushes the assignments that change. The state is dropped
//! when the stream ends. A report in work counts in its client's requests open and waits at
//! its client's gate first (`peers::requests`): one client's streams get its part, the next
//! report left unread meanwhile (HTTP/2 flow control pushes back on the client).
//!
//! Must not touch: YAML, store crates, the assignment arithmetic (that is `quota`'s).

mod convert;

pub use convert::{response_to_pb, usages_from_pb};

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::Stream;
use opentelemetry::Context;
use tonic::{Request, Response, Status, Streaming};

use crate::clock::UnixMillis;
use crate::metrics::top::Kind;
use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::peers::{ConnState, Peer};
use crate::quota::{BucketIdBytes, Decided, QuotaError, QuotaStream};
use crate::rls::ServiceState;
use crate::rules::RuleSet;
use crate::settings::RlqsSettings;
use crate::storage::CounterStore;
use crate::traces::Tracer;

pub use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer as RlqsServer;

/// The longest a stream waits for a window's end without reading the clock again.
const CLOCK_RECHECK: Duration = Duration::from_secs(1);

/// Streams refresh up to this long after a window's end, each at its own phase, so that
/// thousands of them do not take the CPU at the same instant (measured: 5,000 streams × 20
/// buckets at once held a store command back for 100 ms).
const REFRESH_SPREAD_MS: u64 = 250;

/// The `RateLimitQuotaService` implementation.
#[derive(Debug)]
pub struct RlqsHandler<S> {
    state: Arc<ServiceState<S>>,
    settings: RlqsSettings,
    opened: AtomicU64,
    /// The bytes of bucket ids all streams hold (`RLQS_MAX_BUCKET_BYTES`).
    held: Arc<BucketIdBytes>,
}

impl<S> RlqsHandler<S> {
    /// A handler over the shared state.
    pub fn new(state: Arc<ServiceState<S>>, settings: RlqsSettings) -> Self {
        Self {
            state,
            settings,
            opened: AtomicU64::new(0),
            held: Arc::new(BucketIdBytes::new(settings.max_bucket_bytes)),
        }
    }
}

type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: CounterStore> RateLimitQuotaService for RlqsHandler<S> {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Responses>, Status> {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        // The client, from its connection (none in-process).
        let peer = (request.extensions().get::<Arc<ConnState>>()).map(|c| Arc::clone(c.peer()));
        // The stream's trace parent: every report's span hangs from it.
        let parent = self
            .state
            .tracer
            .as_ref()
            .map(|tracer| (Arc::clone(tracer), tracer.parent(request.metadata())));
        let session = Session::new(
            Arc::clone(&self.state),
            QuotaStream::sharing(self.settings, Arc::clone(&self.held)),
            request.into_inner(),
            // Spread evenly: consecutive streams 61 ms apart, modulo the spread.
            Duration::from_millis(n.wrapping_mul(61) % REFRESH_SPREAD_MS),
            parent,
            peer,
        );
        let responses = futures_util::stream::unfold(session, |mut session| async move {
            let next = session.next().await?;
            Some((next, session))
        });
        Ok(Response::new(Box::pin(responses)))
    }
}

/// One stream: its quota state and its inbound reports. Counted in metrics while it lives.
struct Session<S> {
    state: Arc<ServiceState<S>>,
    quota: QuotaStream,
    inbound: Streaming<RateLimitQuotaUsageReports>,
    ended: bool,
    /// How long after a window's end this stream refreshes (< [`REFRESH_SPREAD_MS`]).
    phase: Duration,
    /// The tracer and the stream's parent context, when tracing is on.
    parent: Option<(Arc<Tracer>, Context)>,
    /// The client, whose gate each report passes before its work.
    peer: Option<Arc<Peer>>,
}

impl<S: CounterStore> Session<S> {
    fn new(
        state: Arc<ServiceState<S>>,
        quota: QuotaStream,
        inbound: Streaming<RateLimitQuotaUsageReports>,
        phase: Duration,
        parent: Option<(Arc<Tracer>, Context)>,
        peer: Option<Arc<Peer>>,
    ) -> Self {
        state.metrics.rlqs.stream_opened();
        Self {
            state,
            quota,
            inbound,
            ended: false,
            phase,
            parent,
            peer,
        }
    }

    /// The next response: reports are read until one yields assignments; `None` once the
    /// client has closed its side (or broke the stream) or after an error status was sent.
    async fn next(&mut self) -> Option<Result<RateLimitQuotaResponse, Status>> {
        while !self.ended {
            let inbound = match self.wake_at() {
                None => self.inbound.message().await,
                Some(wait) => tokio::select! {
                    inbound = self.inbound.message() => inbound,
                    () = tokio::time::sleep(wait) => match self.refresh() {
                        Some(response) => return Some(Ok(response)),
                        None => continue,
                    },
                },
            };
            let answer = match inbound {
                Ok(Some(report)) => {
                    let _open = match &self.peer {
                        Some(peer) => Some(peer.request_turn().await),
                        None => None,
                    };
                    self.traced_answer(report).await
                }
                Ok(None) => return None,
                Err(status) => match refusal(status) {
                    Some(refused) => Err(refused),
                    None => return None,
                },
            };
            match answer {
                Ok(Some(response)) => return Some(Ok(response)),
                Ok(None) => continue,
                Err(status) => {
                    self.ended = true;
                    self.state.metrics.rlqs.refused();
                    tracing::warn!(code = ?status.code(), reason = status.message(), "RLQS stream refused");
                    return Some(Err(status));
                }
            }
        }
        None
    }

    /// How long to wait for the next window's end of a counted bucket: at most
    /// [`CLOCK_RECHECK`], so that a clock that steps (NTP, or a test's) is followed.
    fn wake_at(&self) -> Option<Duration> {
        let at = self.refresh_at()?;
        let now = self.state.limiter.now();
        Some(at.since(now).min(CLOCK_RECHECK))
    }

    /// When this stream refreshes next: its phase after the next window's end.
    fn refresh_at(&self) -> Option<UnixMillis> {
        Some(self.quota.next_window_end()?.after(self.phase))
    }

    /// Assignments that change because a window has ended; `None` when none did.
    fn refresh(&mut self) -> Option<RateLimitQuotaResponse> {
        let now = self.state.limiter.now();
        if self.refresh_at().is_none_or(|at| now < at) {
            return None;
        }
        let rules = self.rules();
        let shadow = self.state.limiter.shadow_mode();
        let decided = self.quota.refresh(&rules, shadow, now);
        if decided.is_empty() {
            return None;
        }
        self.state.metrics.rlqs.window_refresh();
        Some(self.sent(&decided))
    }

    /// The rules in force (none before the first load).
    fn rules(&self) -> Arc<RuleSet> {
        self.state
            .rules
            .load()
            .unwrap_or_else(|| Arc::new(RuleSet::default()))
    }

    /// Counts what is sent and converts it.
    fn sent(&self, decided: &[Decided]) -> RateLimitQuotaResponse {
        let metrics = &self.state.metrics;
        for d in decided {
            tracing::debug!(bucket = ?d.bucket, assignment = ?d.assignment, usage = ?d.usage, "RLQS assignment sent");
            metrics.rlqs.assigned(d.assignment.kind());
            if let Some(u) = &d.usage {
                metrics.rlqs_usage(&u.rule, u.used, u.limit);
                // Who is limited: the requests the data plane denied, by bucket.
                let pairs = d.bucket.pairs().iter();
                let entries = pairs.map(|(k, v)| (k.as_str(), v.as_str()));
                metrics.top.record(&u.rule, entries, Kind::Over, u.denied);
            }
        }
        convert::response_to_pb(decided)
    }

    /// [`Session::answer`] inside a span (`RLQS Report Execution`) when tracing is on and the
    /// sampler keeps it.
    async fn traced_answer(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<Option<RateLimitQuotaResponse>, Status> {
        let span = match &self.parent {
            Some((tracer, parent)) => tracer.server_span("RLQS Report Execution", parent),
            None => None,
        };
        let Some(span) = span else {
            return self.answer(report).await;
        };
        span.set("ratelimit.domain", report.domain.clone());
        span.set(
            "rlqs.buckets_reported",
            report.bucket_quota_usages.len() as i64,
        );
        let answer = span.run(self.answer(report)).await;
        match &answer {
            Ok(sent) => {
                let n = sent.as_ref().map_or(0, |r| r.bucket_action.len());
                span.set("rlqs.assignments_sent", n as i64);
            }
            Err(status) => {
                span.set("rpc.grpc.status_code", status.code() as i64);
                span.fail(status.message().to_owned());
            }
        }
        span.end();
        answer
    }

    /// Assignments for one report; `None` when there is nothing to send (no buckets, or the
    /// counter store failed: Envoy keeps its assignments until they expire, and the next
    /// report tries again).
    async fn answer(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<Option<RateLimitQuotaResponse>, Status> {
        let metrics = &self.state.metrics;
        metrics.rlqs.report();
        let (domain, usages) =
            convert::usages_from_pb(report, self.quota.settings().max_bucket_id_bytes)?;
        tracing::debug!(?usages, "RLQS report");
        let rules = self.rules();
        let limiter = &self.state.limiter;
        let before = self.quota.buckets();
        let decided = self
            .quota
            .on_report(&domain, usages, &rules, limiter, limiter.now())
            .await;
        metrics.rlqs.buckets_added(self.quota.buckets() - before);
        let decided = match decided {
            Ok(decided) => decided,
            Err(QuotaError::Storage(err)) => {
                tracing::warn!(%err, "RLQS report not folded into the counter store");
                metrics.rlqs.store_error();
                return Ok(None);
            }
            Err(
                err @ (QuotaError::TooManyBuckets { .. } | QuotaError::TooManyBucketBytes { .. }),
            ) => {
                return Err(Status::resource_exhausted(err.to_string()));
            }
            Err(err) => return Err(Status::invalid_argument(err.to_string())),
        };
        if decided.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.sent(&decided)))
    }
}

/// What a report that could not be read is answered, as RLS answers the same input: one over
/// the message size limit `RESOURCE_EXHAUSTED`, bytes that do not decode `INVALID_ARGUMENT`,
/// both with the reason. `None` when the client broke or cancelled the stream itself (nothing
/// to answer).
pub fn refusal(status: Status) -> Option<Status> {
    use std::error::Error as _;
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => Some(
            Status::resource_exhausted(format!("report refused: {}", status.message())),
        ),
        // tonic's decoder reports a message it cannot read as INTERNAL without a source; a
        // broken transport carries its error as the source.
        tonic::Code::Internal if status.source().is_none() => Some(Status::invalid_argument(
            format!("report does not decode: {}", status.message()),
        )),
        _ => {
            tracing::debug!(%status, "RLQS stream broken by the client");
            None
        }
    }
}

impl<S> Drop for Session<S> {
    fn drop(&mut self) {
        self.state.metrics.rlqs.stream_closed(self.quota.buckets());
    }
}
