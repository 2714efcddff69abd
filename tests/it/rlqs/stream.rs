//! RLQS streams from a tonic client over loopback against the real server: reports fold into
//! the counters RLS counts in, bucket ids match the tree in any order, refusals name the field,
//! and streams outlive the request deadline and leave nothing behind (two replicas sharing one
//! store: `replicas`).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use turnstile::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use turnstile::settings::{RlqsSettings, Unmatched};

use super::RULES;
use crate::support::{Options, req1, start_memory, until};

/// One open stream.
pub(crate) struct Quotas {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: Streaming<RateLimitQuotaResponse>,
}

type Bucket<'a> = &'a [(&'a str, &'a str)];

impl Quotas {
    pub(crate) async fn open(addr: std::net::SocketAddr) -> Quotas {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(8);
        let rx = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        Quotas { tx, rx }
    }

    /// Opens a stream to the service on `port`, sends `report` and returns the first answer.
    pub(crate) async fn one_report(
        port: u16,
        report: RateLimitQuotaUsageReports,
    ) -> RateLimitQuotaResponse {
        let mut quotas = Quotas::open(([127, 0, 0, 1], port).into()).await;
        quotas.tx.send(report).await.expect("send");
        let answer = quotas.rx.message().await.expect("answered");
        answer.expect("assignments")
    }

    /// Sends one report of `(bucket, allowed, denied)` and reads the answer.
    pub(super) async fn report(
        &mut self,
        domain: &str,
        usages: &[(Bucket<'_>, u64, u64)],
    ) -> Result<RateLimitQuotaResponse, tonic::Status> {
        let report = RateLimitQuotaUsageReports {
            domain: domain.to_owned(),
            bucket_quota_usages: usages
                .iter()
                .map(|(bucket, allowed, denied)| BucketQuotaUsage {
                    bucket_id: Some(bucket_id(bucket)),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    num_requests_allowed: *allowed,
                    num_requests_denied: *denied,
                })
                .collect(),
        };
        self.send(report).await
    }

    async fn send(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, tonic::Status> {
        self.tx.send(report).await.expect("send");
        self.rx.message().await.map(|m| m.expect("a response"))
    }
}

fn bucket_id(pairs: Bucket<'_>) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// `allow`, `deny` or `tb <tokens_per_fill>/<fill_interval>s max <max_tokens> ttl <ttl>s` for
/// the response's action `i`.
pub(super) fn kind(response: &RateLimitQuotaResponse, i: usize) -> String {
    let action = &response.bucket_action[i];
    let Some(BucketAction::QuotaAssignmentAction(a)) = &action.bucket_action else {
        panic!("not an assignment: {action:?}");
    };
    let ttl = a.assignment_time_to_live.expect("ttl").seconds;
    match a
        .rate_limit_strategy
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
    {
        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::AllowAll as i32 => {
            format!("allow ttl {ttl}s")
        }
        Some(Strategy::BlanketRule(_)) => format!("deny ttl {ttl}s"),
        Some(Strategy::TokenBucket(tb)) => format!(
            "tb {}/{}s max {} ttl {ttl}s",
            tb.tokens_per_fill.unwrap_or(0),
            tb.fill_interval.map(|d| d.seconds).unwrap_or(0),
            tb.max_tokens
        ),
        other => panic!("unexpected strategy {other:?}"),
    }
}

/// Server options with these RLQS settings.
pub(super) fn with_rlqs(rlqs: RlqsSettings) -> Options {
    Options {
        server: turnstile::server::ServerOptions {
            rlqs,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_fold_into_the_counters_rls_reads_and_a_spent_window_denies() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let mut q = Quotas::open(s.addr).await;
    // T0 is 40 s into its minute: 20 s left. 2 of 5 used: 3 left, all demand ours. A first
    // bucket starts full with two tokens (the least sent): the third over 20 s, 3 a minute.
    let r = q
        .report("rlqs", &[(&[("user", "alice")], 2, 0)])
        .await
        .expect("answer");
    assert_eq!(
        r.bucket_action[0].bucket_id,
        Some(bucket_id(&[("user", "alice")]))
    );
    assert_eq!(kind(&r, 0), "tb 3/60s max 2 ttl 10s");
    // RLS counts in the same counter: 2 reported + this call = 3 of 5.
    let rls = s.call(req1("rlqs", &[("user", "alice")])).await;
    assert_eq!(rls.statuses[0].limit_remaining, 2);
    // Two more reported: the window's 5 are spent, deny until it ends (20 s).
    let r = q
        .report("rlqs", &[(&[("user", "alice")], 2, 7)])
        .await
        .expect("answer");
    assert_eq!(kind(&r, 0), "deny ttl 20s");
    // When the window ends the stream is told at once, without waiting for its next report:
    // all 5 of the new window, all demand ours: a bucket that replaces a deny-all starts full
    // (2 tokens), the other 3 over 60 s (the stream reads the clock again at least every
    // second, so this arrives within about one).
    s.clock.advance(20);
    let pushed = tokio::time::timeout(Duration::from_secs(10), q.rx.message())
        .await
        .expect("a push within 10 s")
        .expect("stream")
        .expect("a response");
    assert_eq!(kind(&pushed, 0), "tb 3/60s max 2 ttl 10s");
    // Reports go on as before in the new window.
    let r = q
        .report("rlqs", &[(&[("user", "alice")], 0, 3)])
        .await
        .expect("answer");
    assert!(kind(&r, 0).starts_with("tb "), "{}", kind(&r, 0));
    let metrics = s.metrics.render(&[]);
    for line in [
        "turnstile_rlqs_streams_open 1",
        "turnstile_rlqs_buckets_tracked 1",
        "turnstile_rlqs_reports_total 3",
        "turnstile_rlqs_assignments_total{kind=\"token_bucket\"} 3",
        "turnstile_rlqs_window_refreshes_total 1",
        "turnstile_rlqs_assignments_total{kind=\"deny_all\"} 1",
        "turnstile_rlqs_window_limit{rule=\"rlqs.user\"} 5",
    ] {
        let (name, value) = line.rsplit_once(' ').expect("line");
        let found = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{}} ")));
        assert!(
            found.is_some_and(|l| l.ends_with(&format!(" {value}"))),
            "{line} in\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_ids_match_the_tree_in_any_order() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let mut q = Quotas::open(s.addr).await;
    let r = q
        .report(
            "rlqs",
            &[
                // `path: /api` → `user` (10 a minute), whatever order the pairs come in.
                (&[("user", "carol"), ("path", "/api")], 0, 0),
                // `user` alone: 5 a minute.
                (&[("user", "carol")], 0, 0),
                // Unlimited, shadow mode, and no such path (the default action: allow).
                (&[("plan", "free")], 0, 0),
                (&[("team", "red")], 5, 0),
                (&[("path", "/other"), ("user", "carol")], 0, 0),
            ],
        )
        .await
        .expect("answer");
    // 20 s left, and new buckets start with their two tokens: the other 8 of 10 over 20 s is
    // 24 a minute; 3 of 5 over 20 s is 9 a minute.
    assert_eq!(kind(&r, 0), "tb 24/60s max 2 ttl 10s");
    assert_eq!(kind(&r, 1), "tb 9/60s max 2 ttl 10s");
    assert_eq!(kind(&r, 2), "allow ttl 10s");
    assert_eq!(
        kind(&r, 3),
        "allow ttl 10s",
        "shadow mode counts but never denies"
    );
    assert_eq!(kind(&r, 4), "allow ttl 10s");
    // The shadow-mode team was counted all the same.
    let metrics = s.metrics.render(&[]);
    assert!(
        metrics.contains("turnstile_rlqs_window_usage{rule=\"rlqs.team\"} 5"),
        "{metrics}"
    );

    // With RLQS_UNMATCHED_ACTION=deny an unmatched bucket is refused.
    let options = with_rlqs(RlqsSettings {
        unmatched: Unmatched::Deny,
        ..RlqsSettings::default()
    });
    let deny = start_memory(&[("rlqs.yaml", RULES)], options).await;
    let mut q = Quotas::open(deny.addr).await;
    let r = q
        .report("nosuchdomain", &[(&[("user", "carol")], 1, 0)])
        .await
        .expect("answer");
    assert_eq!(kind(&r, 0), "deny ttl 10s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_field_and_end_the_stream() {
    let options = with_rlqs(RlqsSettings {
        max_buckets_per_stream: 2,
        ..RlqsSettings::default()
    });
    let s = start_memory(&[("rlqs.yaml", RULES)], options).await;
    let mut q = Quotas::open(s.addr).await;
    let err = q
        .report("", &[(&[("user", "a")], 1, 0)])
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().starts_with("domain:"), "{}", err.message());

    let mut q = Quotas::open(s.addr).await;
    let mut report = RateLimitQuotaUsageReports {
        domain: "rlqs".into(),
        bucket_quota_usages: vec![BucketQuotaUsage::default()],
    };
    let err = q.send(report.clone()).await.expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.message(), "bucket_quota_usages[0].bucket_id: required");
    report.bucket_quota_usages[0].bucket_id = Some(BucketId::default());
    let mut q = Quotas::open(s.addr).await;
    let err = q.send(report).await.expect_err("refused");
    assert!(err.message().contains("1 to 32 pairs"), "{}", err.message());

    let mut q = Quotas::open(s.addr).await;
    q.report(
        "rlqs",
        &[(&[("user", "a")], 1, 0), (&[("user", "b")], 1, 0)],
    )
    .await
    .expect("two buckets are allowed");
    let err = q
        .report("rlqs", &[(&[("user", "c")], 1, 0)])
        .await
        .expect_err("a third is not");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message().contains("more than 2 buckets"),
        "{}",
        err.message()
    );
    // Every refused stream ended, and its state went with it.
    until(Duration::from_secs(5), "refused streams end", || {
        s.metrics.rlqs.streams_open() == 0 && s.metrics.rlqs.buckets_tracked() == 0
    })
    .await;
    assert!(
        s.metrics
            .render(&[])
            .contains("turnstile_rlqs_refused_total{} 4")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_the_request_deadline_and_leaves_no_state() {
    let options = Options {
        server: turnstile::server::ServerOptions {
            limits: turnstile::settings::GrpcLimits {
                request_timeout: Duration::from_millis(200),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let s = start_memory(&[("rlqs.yaml", RULES)], options).await;
    let mut q = Quotas::open(s.addr).await;
    // Ten reports paced 100 ms apart on one stream: it lives at least five times the request
    // deadline, and every report is answered.
    for _ in 0..10 {
        q.report(
            "rlqs",
            &[(&[("user", "dave")], 0, 1), (&[("plan", "free")], 1, 0)],
        )
        .await
        .expect("the stream is not cut by the request deadline");
        tokio::time::sleep(Duration::from_millis(100)).await; // pacing, not synchronisation
    }
    assert_eq!(s.metrics.rlqs.streams_open(), 1);
    assert_eq!(s.metrics.rlqs.buckets_tracked(), 2);
    drop(q);
    until(
        Duration::from_secs(5),
        "the stream's state goes with it",
        || s.metrics.rlqs.streams_open() == 0 && s.metrics.rlqs.buckets_tracked() == 0,
    )
    .await;
}
