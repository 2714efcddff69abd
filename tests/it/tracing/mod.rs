//! OpenTelemetry traces (`TRACING_ENABLED`), received by a real OTLP receiver (gRPC and HTTP)
//! from a running service: the `ShouldRateLimit` span joins the caller's trace (W3C, B3 multi
//! and single headers), carries the decision's attributes (values only with
//! `TRACING_INCLUDE_VALUES`), the store call is its child; the sampler follows the caller's
//! flag and the rate; with the collector away or stuck, every call is answered and the drops
//! are counted. `envoy` runs the same through a real Envoy with its OpenTelemetry tracer.

mod envoy;
mod receiver;

use std::net::TcpListener;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, metric, rules_root};
use crate::support::{req1, until};
use receiver::{Got, Receiver};

const RULES: &str = "domain: traced\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// One `ShouldRateLimit` for `user`, with these headers.
async fn call(p: &Process, user: &str, headers: &[(&'static str, String)]) -> Code {
    let mut client = p.client().await;
    let mut request = tonic::Request::new(req1("traced", &[("user", user)]));
    for (k, v) in headers {
        request
            .metadata_mut()
            .insert(*k, v.parse().expect("ascii header"));
    }
    client
        .should_rate_limit(request)
        .await
        .expect("answered")
        .into_inner()
        .overall_code()
}

fn traced_env<'a>(protocol: &'a str, endpoint: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", protocol),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "20"),
    ]
}

fn named<'a>(spans: &'a [Got], name: &str) -> Vec<&'a Got> {
    spans.iter().filter(|g| g.name() == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_w3c_caller_is_joined_over_grpc_and_the_store_call_is_a_child() {
    let receiver = Receiver::grpc().await;
    let endpoint = format!("http://{}", receiver.addr);
    let p = Process::start(&rules_root(RULES), &traced_env("grpc", &endpoint));
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    for _ in 0..3 {
        call(&p, "ann", &[("traceparent", traceparent.clone())]).await;
    }
    let spans = receiver
        .until("three decisions and their store calls", |s| {
            named(s, "ShouldRateLimit Execution").len() == 3
                && named(s, "Memory Store Execution").len() == 3
        })
        .await;
    let decisions = named(&spans, "ShouldRateLimit Execution");
    for d in &decisions {
        assert_eq!(
            (d.trace_id().as_str(), d.parent_id().as_str()),
            (TRACE, PARENT)
        );
        assert_eq!(d.service, "RateLimit");
        assert_eq!(
            d.resource_attr("service.instance.id").map(|id| id.len()),
            Some(36)
        );
        assert_eq!(d.attr("ratelimit.domain").as_deref(), Some("traced"));
        assert_eq!(d.attr("ratelimit.descriptors").as_deref(), Some("1"));
        // Without TRACING_INCLUDE_VALUES the keys only.
        assert_eq!(
            d.attr("ratelimit.descriptor_entries").as_deref(),
            Some("user")
        );
        assert_eq!(d.attr("ratelimit.rules").as_deref(), Some("traced.user"));
    }
    let verdicts: Vec<_> = decisions
        .iter()
        .map(|d| d.attr("ratelimit.verdict").unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["OK", "OK", "OVER_LIMIT"]);
    for store in named(&spans, "Memory Store Execution") {
        let parent = decisions
            .iter()
            .find(|d| d.span_id() == store.parent_id())
            .expect("each store span hangs from a decision span");
        assert_eq!(store.trace_id(), parent.trace_id());
        assert_eq!(store.attr("db.system").as_deref(), Some("memory"));
        assert_eq!(
            store.attr("turnstile.store.operations").as_deref(),
            Some("1")
        );
        assert_eq!(store.attr("turnstile.store.outcome").as_deref(), Some("ok"));
        assert_eq!(store.attr("turnstile.store.role").as_deref(), Some("main"));
    }
    until(
        std::time::Duration::from_secs(20),
        "six spans counted as exported",
        || metric(&p.metrics(), "turnstile_trace_spans_exported_total") == Some(6),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_callers_are_joined_over_http_with_values_when_allowed() {
    let receiver = Receiver::http().await;
    let endpoint = format!("http://{}", receiver.addr);
    let mut env = traced_env("http", &endpoint);
    env.extend([
        ("TRACING_INCLUDE_VALUES", "true"),
        ("TRACING_SERVICE_NAME", "edge-limits"),
        ("TRACING_SERVICE_NAMESPACE", "payments"),
        ("TRACING_SERVICE_INSTANCE_ID", "pod-7"),
    ]);
    let p = Process::start(&rules_root(RULES), &env);
    let multi = [
        (
            "x-b3-traceid",
            "463ac35c9f6413ad48485a3953bb6124".to_owned(),
        ),
        ("x-b3-spanid", "a2fb4a1d1a96d312".to_owned()),
        ("x-b3-sampled", "1".to_owned()),
    ];
    call(&p, "bob", &multi).await;
    let single = [(
        "b3",
        "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1".to_owned(),
    )];
    call(&p, "cat", &single).await;
    let spans = receiver
        .until("two decisions", |s| {
            named(s, "ShouldRateLimit Execution").len() == 2
        })
        .await;
    let decisions = named(&spans, "ShouldRateLimit Execution");
    let joined: Vec<_> = decisions
        .iter()
        .map(|d| {
            (
                d.trace_id(),
                d.parent_id(),
                d.attr("ratelimit.descriptor_entries"),
            )
        })
        .collect();
    assert_eq!(
        joined,
        [
            (
                "463ac35c9f6413ad48485a3953bb6124".to_owned(),
                "a2fb4a1d1a96d312".to_owned(),
                Some("user=bob".to_owned())
            ),
            (
                "80f198ee56343ba864fe8b2a57d3eff7".to_owned(),
                "e457b5a2e4d86bd1".to_owned(),
                Some("user=cat".to_owned())
            ),
        ]
    );
    let d = decisions[0];
    assert_eq!(d.service, "edge-limits");
    assert_eq!(
        d.resource_attr("service.namespace").as_deref(),
        Some("payments")
    );
    assert_eq!(
        d.resource_attr("service.instance.id").as_deref(),
        Some("pod-7")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampler_follows_the_callers_flag_then_the_rate() {
    let receiver = Receiver::grpc().await;
    let endpoint = format!("http://{}", receiver.addr);
    let mut env = traced_env("grpc", &endpoint);
    env.push(("TRACING_SAMPLING_RATE", "0"));
    let p = Process::start(&rules_root(RULES), &env);
    // Rate 0: roots and callers that say "not sampled" make no span ...
    for i in 0..20 {
        call(&p, &format!("u{i}"), &[]).await;
    }
    call(
        &p,
        "v",
        &[("traceparent", format!("00-{TRACE}-{PARENT}-00"))],
    )
    .await;
    // ... a sampled caller does (ParentBased, as the reference).
    call(
        &p,
        "w",
        &[("traceparent", format!("00-{TRACE}-{PARENT}-01"))],
    )
    .await;
    let spans = receiver
        .until("the sampled caller's decision", |s| {
            !named(s, "ShouldRateLimit Execution").is_empty()
        })
        .await;
    // Spans are exported in the order they end: anything from the earlier calls came first.
    let decisions = named(&spans, "ShouldRateLimit Execution");
    assert_eq!(decisions.len(), 1, "only the sampled caller is traced");
    assert_eq!(decisions[0].trace_id(), TRACE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_away_or_stuck_calls_are_answered_and_drops_counted() {
    // Away: nothing listens on the port.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let away = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let p = Process::start(&rules_root(RULES), &traced_env("grpc", &away));
    for i in 0..30 {
        assert_eq!(call(&p, &format!("a{i}"), &[]).await, Code::Ok);
    }
    until(
        std::time::Duration::from_secs(20),
        "export failures counted",
        || {
            let m = p.metrics();
            metric(
                &m,
                "turnstile_trace_spans_dropped_total{reason=\"export_failed\"}",
            )
            .is_some_and(|n| n > 0)
        },
    )
    .await;
    assert_eq!(
        metric(&p.metrics(), "turnstile_trace_spans_exported_total"),
        Some(0)
    );

    // Stuck: accepts connections and never answers; the queue (2 spans) fills and the rest
    // are dropped at once instead of holding decisions up.
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let stuck_url = format!("http://{}", stuck.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = stuck.accept().await {
            open.push(conn);
        }
    });
    let mut env = traced_env("http", &stuck_url);
    env.extend([
        ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000"),
    ]);
    let q = Process::start(&rules_root(RULES), &env);
    for i in 0..40 {
        assert_eq!(call(&q, &format!("s{i}"), &[]).await, Code::Ok);
    }
    let m = q.metrics();
    let full = metric(
        &m,
        "turnstile_trace_spans_dropped_total{reason=\"queue_full\"}",
    );
    // 80 spans (decision + store call each), at most 1 in export and 2 queued.
    assert!(full.is_some_and(|n| n >= 77), "queue-full drops: {full:?}");
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rlqs_report_is_a_span_under_the_streams_parent() {
    use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
    use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use turnstile::pb::envoy::service::rate_limit_quota::v3::{
        BucketId, RateLimitQuotaUsageReports,
    };

    let receiver = Receiver::grpc().await;
    let endpoint = format!("http://{}", receiver.addr);
    let p = Process::start(&rules_root(RULES), &traced_env("grpc", &endpoint));
    let mut client = RateLimitQuotaServiceClient::connect(format!("http://127.0.0.1:{}", p.grpc))
        .await
        .expect("connect");
    let report = RateLimitQuotaUsageReports {
        domain: "traced".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user".to_owned(), "eve".to_owned())].into(),
            }),
            time_elapsed: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    };
    // The report, then the stream stays open (an Envoy keeps its stream).
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(report).await.expect("queued");
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{TRACE}-{PARENT}-01").parse().expect("ascii"),
    );
    let mut responses = client
        .stream_rate_limit_quotas(request)
        .await
        .expect("stream")
        .into_inner();
    let first = responses
        .message()
        .await
        .expect("answer")
        .expect("a response");
    assert_eq!(first.bucket_action.len(), 1);
    let spans = receiver
        .until("the report's span and its store call", |s| {
            !named(s, "RLQS Report Execution").is_empty()
                && !named(s, "Memory Store Execution").is_empty()
        })
        .await;
    let report = named(&spans, "RLQS Report Execution")[0];
    assert_eq!(
        (report.trace_id().as_str(), report.parent_id().as_str()),
        (TRACE, PARENT)
    );
    assert_eq!(report.attr("ratelimit.domain").as_deref(), Some("traced"));
    assert_eq!(report.attr("rlqs.buckets_reported").as_deref(), Some("1"));
    assert_eq!(report.attr("rlqs.assignments_sent").as_deref(), Some("1"));
    let store = named(&spans, "Memory Store Execution")[0];
    assert_eq!(store.parent_id(), report.span_id());
    drop(tx);
}
