//! What an RLQS stream may make the server hold, and how refusals are answered: a bucket id
//! over `RLQS_MAX_BUCKET_ID_BYTES` and bucket ids past `RLQS_MAX_BUCKET_BYTES` across all
//! streams are refused in words naming the setting; a report over the message size limit and
//! bytes that do not decode end the stream with the status RLS gives the same input
//! (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`) and the reason, counted and logged.

use std::time::Duration;

use bytes::{Buf, BufMut};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use turnstile::settings::RlqsSettings;

use super::RULES;
use crate::support::{Options, TestServer, start_memory, until};

/// A report of one bucket `{user: value}`.
fn report(value: &str) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "rlqs".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user".to_owned(), value.to_owned())].into(),
            }),
            time_elapsed: None,
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    }
}

/// An open stream.
struct Stream {
    tx: mpsc::Sender<RateLimitQuotaUsageReports>,
    rx: tonic::Streaming<RateLimitQuotaResponse>,
}

impl Stream {
    /// Opens a stream and sends `first`; returns it with what it answered.
    async fn open(
        s: &TestServer,
        first: RateLimitQuotaUsageReports,
    ) -> (Stream, Result<RateLimitQuotaResponse, Status>) {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", s.addr))
            .await
            .expect("connect")
            .max_encoding_message_size(usize::MAX);
        let (tx, rx) = mpsc::channel(4);
        tx.send(first).await.expect("send");
        let rx = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        let mut stream = Stream { tx, rx };
        let answer = stream.answer().await;
        (stream, answer)
    }

    /// Sends a report and reads its answer.
    async fn report(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        self.tx.send(report).await.expect("send");
        self.answer().await
    }

    async fn answer(&mut self) -> Result<RateLimitQuotaResponse, Status> {
        self.rx
            .message()
            .await
            .map(|m| m.expect("an answer or a status"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_bucket_id_is_refused_naming_the_bound() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let (_stream, answer) = Stream::open(&s, report(&"x".repeat(4_096))).await;
    let status = answer.expect_err("4 bytes of key and 4,096 of value: over 4,096");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("bucket_quota_usages[0].bucket_id: 4100 bytes")
            && status.message().contains("RLQS_MAX_BUCKET_ID_BYTES"),
        "{}",
        status.message()
    );
    let (_stream, answer) = Stream::open(&s, report(&"x".repeat(4_092))).await;
    answer.expect("4,096 bytes in all is within the bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_ids_of_all_streams_together_are_bounded() {
    let options = super::stream::with_rlqs(RlqsSettings {
        max_bucket_bytes: 10_000,
        ..RlqsSettings::default()
    });
    let s = start_memory(&[("rlqs.yaml", RULES)], options).await;
    let id = |c: char| c.to_string().repeat(4_000);
    let (mut first, answer) = Stream::open(&s, report(&id('a'))).await;
    answer.expect("4,004 bytes held");
    first
        .report(report(&id('b')))
        .await
        .expect("8,008 bytes held");
    let (_second, answer) = Stream::open(&s, report(&id('c'))).await;
    let refused = answer.expect_err("12,012 bytes would pass 10,000 across streams");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("RLQS_MAX_BUCKET_BYTES"),
        "{}",
        refused.message()
    );
    // The first stream ends: its bytes come back and a new stream may hold as much again.
    drop(first);
    until(Duration::from_secs(5), "the first stream ends", || {
        s.metrics.rlqs.streams_open() == 0
    })
    .await;
    let (_third, answer) = Stream::open(&s, report(&id('d'))).await;
    answer.expect("the bytes of ended streams are given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_the_size_limit_is_refused_with_resource_exhausted() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let (_stream, answer) = Stream::open(&s, report(&"x".repeat(5 << 20))).await;
    let status = answer.expect_err("5 MiB is over 4 MiB");
    refused_with(&s, &status, Code::ResourceExhausted, "too large").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_do_not_decode_are_refused_with_invalid_argument() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let mut grpc = crate::support::raw_grpc(s.addr).await;
    // Field 1 with wire type 7, which does not exist.
    let garbage = futures_util::stream::iter([vec![0x0f_u8, 0xff, 0xff]]);
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
    );
    let answer = grpc
        .streaming(tonic::Request::new(garbage), path, RawCodec)
        .await;
    let status = match answer {
        Err(status) => status,
        Ok(response) => response
            .into_inner()
            .message()
            .await
            .expect_err("garbage is refused"),
    };
    refused_with(&s, &status, Code::InvalidArgument, "report does not decode").await;
}

/// `status` has `code` and says `reason`, and the server counted it (its first refusal).
async fn refused_with(s: &TestServer, status: &Status, code: Code, reason: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert!(status.message().contains(reason), "{}", status.message());
    until(Duration::from_secs(5), "the refusal is counted", || {
        s.metrics
            .render(&[])
            .contains("turnstile_rlqs_refused_total{} 1")
    })
    .await;
}

/// Messages as the bytes given, unchecked: what a broken client sends.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_2_64_requests_saturates_the_count_rls_reads() {
    use turnstile::clock::{Clock, ManualClock, SystemClock};
    let Some(mc) = crate::support::Memcached::start() else {
        return crate::support::missing("memcached");
    };
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = crate::support::memcached_store(&[&mc], &clock, Duration::from_millis(500));
    let s =
        crate::support::start_with(store, clock, &[("rlqs.yaml", RULES)], Options::default()).await;
    let user = crate::support::unique("u");
    let mut huge = report(&user);
    huge.bucket_quota_usages[0].num_requests_allowed = u64::MAX;
    let (mut stream, answer) = Stream::open(&s, huge).await;
    answer.expect("answered");
    stream.report(report(&user)).await.expect("answered");
    let rls = s
        .call(crate::support::req1("rlqs", &[("user", &user)]))
        .await;
    assert_eq!(
        rls.statuses[0].code(),
        turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code::OverLimit,
        "the count did not wrap: {rls:?}"
    );
    assert_eq!(rls.statuses[0].limit_remaining, 0);
}

/// A stream over `RLQS_MAX_STREAMS_PER_PEER` is refused at once with `RESOURCE_EXHAUSTED`
/// naming the setting (issue 51: it waited for the client's side to end, so Envoy saw its own
/// timeout after 10 s), while the peer's streams within the cap keep their answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_the_per_peer_cap_is_refused_at_once() {
    let limits = turnstile::settings::GrpcLimits {
        rlqs_streams_per_peer: 2,
        ..Default::default()
    };
    let options = Options {
        server: turnstile::server::ServerOptions {
            peers: turnstile::server::peers_within(&limits, std::sync::Arc::default()),
            limits,
            ..Default::default()
        },
        ..Default::default()
    };
    let s = start_memory(&[("rlqs.yaml", RULES)], options).await;
    let (mut first, answer) = Stream::open(&s, report("a")).await;
    answer.expect("the first stream is within the cap");
    let (_second, answer) = Stream::open(&s, report("b")).await;
    answer.expect("the second stream is within the cap");
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", s.addr))
        .await
        .expect("connect");
    // The client's side stays open (as Envoy's does): only the server can end the call.
    let (tx, rx) = mpsc::channel(4);
    tx.send(report("c")).await.expect("send");
    let mut call = tonic::Request::new(ReceiverStream::new(rx));
    call.set_timeout(Duration::from_secs(10));
    // A guard against a hang, not a measure: a refusal that waits ends in the client's timeout.
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        client.stream_rate_limit_quotas(call),
    )
    .await
    .expect("refused before the client's own 10 s timeout");
    let refused = match answered {
        Ok(mut streaming) => streaming
            .get_mut()
            .message()
            .await
            .expect_err("a status, not an answer"),
        Err(status) => status,
    };
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("RLQS_MAX_STREAMS_PER_PEER"),
        "{}",
        refused.message()
    );
    first
        .report(report("a"))
        .await
        .expect("a stream within the cap is still answered");
    drop(tx);
}
