//! Hostile clients (issue 12), each against the service on loopback: streams that never send
//! their body are cut off by the request deadline and bounded by SETTINGS_MAX_CONCURRENT_STREAMS,
//! connections that never send the HTTP/2 preface are closed, open connections are counted and
//! capped, and the binary raises its open-files limit and does not spin when it runs out.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::process::{Process, RULES, metric, rules_root};

mod connections;
mod flood;
mod json_flood;
mod mtls_peers;
mod peers;
mod rlqs_flood;

/// An HTTP/2 client connection to `port` (the h2 crate: frames as a hostile client sends them).
async fn h2_client(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.ready().await.expect("ready")
}

/// Opens a ShouldRateLimit stream whose body never comes (HEADERS without END_STREAM).
fn open_stream(
    client: &mut h2::client::SendRequest<Bytes>,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let request = http::Request::post(
        "http://localhost/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("request");
    client.send_request(request, false).expect("stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_a_body_are_bounded_and_cut_off() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("GRPC_REQUEST_TIMEOUT", "300ms"),
            ("GRPC_MAX_CONCURRENT_STREAMS", "8"),
        ],
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let honest = tokio::spawn(honest_latencies(p.grpc, std::sync::Arc::clone(&stop)));
    let mut client = h2_client(p.grpc).await;
    // The server's SETTINGS arrive with the handshake; wait until the client has applied them.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.current_max_send_streams() != 8 {
        assert!(
            Instant::now() < deadline,
            "SETTINGS_MAX_CONCURRENT_STREAMS was not advertised: {}",
            client.current_max_send_streams()
        );
        tokio::task::yield_now().await;
        client = client.ready().await.expect("ready");
    }
    let mut streams = Vec::new();
    for _ in 0..8 {
        client = client.ready().await.expect("ready");
        streams.push(open_stream(&mut client));
    }
    // Every stream is answered (cancelled by the deadline) although no body ever came.
    for (response, _body) in streams {
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .expect("the stream was cut off by the request deadline")
            .expect("a response");
        let status = response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap_or("").to_owned());
        assert_eq!(status.as_deref(), Some("1"), "CANCELLED by the deadline");
    }
    // Meanwhile an honest client was answered, promptly.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (calls, median, slowest) = honest.await.expect("honest client");
    eprintln!(
        "during the bodiless streams: {calls} honest calls, median {median:?}, slowest {slowest:?}"
    );
    assert!(calls > 0, "the honest client made no call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_request_values_make_bounded_stats() {
    let rules = "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let s = crate::support::start_memory(&[("d.yaml", rules)], Default::default()).await;
    for i in 0..20 {
        let huge = format!("{i}{}", "x".repeat(1 << 20));
        // An unknown domain of 1 MiB, and a 1 MiB value in a detailed_metric key.
        s.call(crate::support::req1(&huge, &[("k", "v")])).await;
        s.call(crate::support::req1("d", &[("k", &huge)])).await;
    }
    let text = s.metrics.render(&[]);
    assert!(
        text.len() < 64 * 1024,
        "40 MiB of request values made {} bytes of metrics",
        text.len()
    );
    assert_eq!(
        metric(&text, "turnstile_stats_labels_shortened_total"),
        Some(40),
        "every oversized value is counted"
    );
    let series = text
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_domain_not_found{"))
        .count();
    assert_eq!(series, 20, "distinct values stay distinct series");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_is_not_grpc_gets_415() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[]);
    let mut client = h2_client(p.grpc).await;
    for content_type in ["text/plain", "application/json", ""] {
        client = client.ready().await.expect("ready");
        let mut request = http::Request::post(
            "http://localhost/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        );
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        let (response, _) = client
            .send_request(request.body(()).expect("request"), true)
            .expect("send");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 415, "content-type {content_type:?}");
    }
    // gRPC itself is served as before.
    let mut grpc = p.client().await;
    assert!(
        grpc.should_rate_limit(crate::support::req1("ops", &[("user", "x")]))
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_resource_exhausted() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[]);
    let mut client = p.client().await;
    let huge = "x".repeat(5 << 20);
    let status = client
        .should_rate_limit(crate::support::req1("ops", &[("user", &huge)]))
        .await
        .expect_err("over the 4 MiB limit");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
}

/// The deadline an honest client gives each call during an attack, as Envoy gives its own
/// (Envoy's default is 20 ms; this leaves a busy test machine room).
const HONEST_DEADLINE: Duration = Duration::from_millis(500);

/// An honest client's calls during an attack, each with [`HONEST_DEADLINE`]: every one answered
/// within it (a call past it fails, as it would behind Envoy). Returns how many, and the median
/// and slowest times, printed as figures only.
async fn honest_latencies(
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (usize, Duration, Duration) {
    let mut client = crate::support::connect(port).await;
    let mut took = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let started = Instant::now();
        let mut call = tonic::Request::new(crate::support::req1("ops", &[("user", "honest")]));
        call.set_timeout(HONEST_DEADLINE);
        let answer = tokio::time::timeout(HONEST_DEADLINE, client.should_rate_limit(call)).await;
        assert!(
            matches!(answer, Ok(Ok(_))),
            "an honest call was not answered within its deadline during the attack: {answer:?}"
        );
        took.push(started.elapsed());
    }
    took.sort();
    let median = took.get(took.len() / 2).copied().unwrap_or_default();
    (took.len(), median, took.last().copied().unwrap_or_default())
}

/// Calls ShouldRateLimit with a request whose texts are raw bytes (as Envoy's HTTP/1 codec can
/// pass them from headers), through a generic gRPC client.
pub(crate) async fn call_with_bytes(
    port: u16,
    domain: &[u8],
    value: &[u8],
) -> Result<turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse, tonic::Status> {
    use turnstile::pb::turnstile::wire::v1::{
        LenientDescriptor, LenientRequest, lenient_descriptor,
    };
    let mut grpc = crate::support::raw_grpc(([127, 0, 0, 1], port).into()).await;
    let request = LenientRequest {
        domain: domain.to_vec(),
        descriptors: vec![LenientDescriptor {
            entries: vec![lenient_descriptor::Entry {
                key: b"user".to_vec(),
                value: value.to_vec(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    crate::support::should_rate_limit_raw(&mut grpc, request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_utf8_are_counted_like_any_value() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[]);
    // Before the fix: INTERNAL "invalid string value: data is not UTF-8 encoded".
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let answer = call_with_bytes(p.grpc, b"ops", b"caf\xe9 \xff")
            .await
            .expect("answered");
        remaining.push((answer.statuses[0].code, answer.statuses[0].limit_remaining));
    }
    assert_eq!(remaining, [(1, 1), (1, 0), (2, 0)], "OK, OK, OVER_LIMIT");
    // Another invalid byte string is another counter.
    let other = call_with_bytes(p.grpc, b"ops", b"caf\xe9 \xfe")
        .await
        .expect("answered");
    assert_eq!(other.statuses[0].limit_remaining, 1);
    // An invalid domain is an unknown domain: OK without a limit.
    let unknown = call_with_bytes(p.grpc, b"op\xffs", b"x")
        .await
        .expect("answered");
    assert_eq!(
        (
            unknown.overall_code,
            unknown.statuses[0].current_limit.is_none()
        ),
        (1, true)
    );
}
