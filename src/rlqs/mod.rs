//! The RLQS edge: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`.
//! Each stream is one [`QuotaStream`] driven by the stream itself (no task of its own, none per
//! bucket): a report is read, converted (`convert`), folded and assigned by `quota`, and the
//! assignments go back as one response. The state is dropped when the stream ends.
//!
//! Must not touch: YAML, store crates, the assignment arithmetic (that is `quota`'s).

mod convert;

pub use convert::{response_to_pb, usages_from_pb};

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::grpc::ServiceState;
use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::quota::{Decided, QuotaError, QuotaStream};
use crate::rules::RuleSet;
use crate::settings::RlqsSettings;
use crate::storage::CounterStore;

pub use crate::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaServiceServer as RlqsServer;

/// The longest a stream waits for a window's end without reading the clock again.
const CLOCK_RECHECK: Duration = Duration::from_secs(1);

/// The `RateLimitQuotaService` implementation.
#[derive(Debug)]
pub struct RlqsHandler<S> {
    state: Arc<ServiceState<S>>,
    settings: RlqsSettings,
}

impl<S> RlqsHandler<S> {
    /// A handler over the shared state.
    pub fn new(state: Arc<ServiceState<S>>, settings: RlqsSettings) -> Self {
        Self { state, settings }
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
        let session = Session::new(Arc::clone(&self.state), self.settings, request.into_inner());
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
    /// A failed refresh is not retried before this (ms since the epoch).
    refresh_not_before: u64,
}

impl<S: CounterStore> Session<S> {
    fn new(
        state: Arc<ServiceState<S>>,
        settings: RlqsSettings,
        inbound: Streaming<RateLimitQuotaUsageReports>,
    ) -> Self {
        state.metrics.rlqs.stream_opened();
        Self {
            state,
            quota: QuotaStream::new(settings),
            inbound,
            ended: false,
            refresh_not_before: 0,
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
                    () = tokio::time::sleep(wait) => match self.refresh().await {
                        Some(response) => return Some(Ok(response)),
                        None => continue,
                    },
                },
            };
            let report = match inbound {
                Ok(Some(report)) => report,
                Ok(None) => return None,
                Err(status) => {
                    tracing::debug!(%status, "RLQS stream broken by the client");
                    return None;
                }
            };
            match self.answer(report).await {
                Ok(Some(response)) => return Some(Ok(response)),
                Ok(None) => continue,
                Err(status) => {
                    self.ended = true;
                    self.state.metrics.rlqs.refused();
                    return Some(Err(status));
                }
            }
        }
        None
    }

    /// How long to wait before the next window boundary of a counted bucket: at most
    /// [`CLOCK_RECHECK`], so that a clock that steps (NTP, or a test's) is followed, and not
    /// before a failed refresh's back-off has passed.
    fn wake_at(&self) -> Option<Duration> {
        let end = self.quota.next_window_end_ms()?;
        let now = self.state.limiter.now_millis();
        let at = end.max(self.refresh_not_before);
        Some(Duration::from_millis(at.saturating_sub(now)).min(CLOCK_RECHECK))
    }

    /// Assignments that change because a window has ended; `None` when none did, or when the
    /// counter store failed (retried after [`CLOCK_RECHECK`]).
    async fn refresh(&mut self) -> Option<RateLimitQuotaResponse> {
        let rules = self.rules();
        let limiter = &self.state.limiter;
        let now = limiter.now_millis();
        if now
            < self
                .quota
                .next_window_end_ms()?
                .max(self.refresh_not_before)
        {
            return None;
        }
        let metrics = &self.state.metrics;
        match self.quota.refresh(&rules, limiter, now).await {
            Ok(decided) if decided.is_empty() => None,
            Ok(decided) => {
                metrics.rlqs.window_refresh();
                Some(self.sent(&decided))
            }
            Err(err) => {
                tracing::warn!(%err, "RLQS assignments not refreshed at a window's end");
                metrics.rlqs.store_error();
                self.refresh_not_before = now + CLOCK_RECHECK.as_millis() as u64;
                None
            }
        }
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
            metrics.rlqs.assigned(d.assignment.kind());
            if let Some(u) = &d.usage {
                metrics.rlqs_usage(&u.rule, u.used, u.limit);
            }
        }
        convert::response_to_pb(decided)
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
        let (domain, usages) = convert::usages_from_pb(report)?;
        let rules = self.rules();
        let limiter = &self.state.limiter;
        let before = self.quota.buckets();
        let decided = self
            .quota
            .on_report(&domain, usages, &rules, limiter, limiter.now_millis())
            .await;
        metrics.rlqs.buckets_added(self.quota.buckets() - before);
        let decided = match decided {
            Ok(decided) => decided,
            Err(QuotaError::Storage(err)) => {
                tracing::warn!(%err, "RLQS report not folded into the counter store");
                metrics.rlqs.store_error();
                return Ok(None);
            }
            Err(err @ QuotaError::TooManyBuckets { .. }) => {
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

impl<S> Drop for Session<S> {
    fn drop(&mut self) {
        self.state.metrics.rlqs.stream_closed(self.quota.buckets());
    }
}
