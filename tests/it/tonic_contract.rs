//! The contract of what Turnstile writes in place of tonic (`turnstile::grpc`: the unary
//! exchange, the routing by service name): the same bytes sent over raw HTTP/2 to a server that
//! tonic generates (the official `RateLimitService` and the health service, on tonic's own
//! transport) and to Turnstile get the same answer, in every part a client reads: the HTTP
//! status, the content type, whether the status comes as trailers-only headers or as trailers
//! after the message, `grpc-status`, `grpc-message`, `grpc-accept-encoding`, and a message
//! framed as one uncompressed length-prefixed `RateLimitResponse`. Good requests and bad:
//! split at every byte, with bytes after the message, empty, truncated, compressed, oversized,
//! not protobuf, and paths no service serves. When a tonic upgrade changes an answer, this
//! fails and names the case.
//!
//! What differs on purpose is not compared: the decision itself (tonic's oracle answers a fixed
//! OK), the code of an oversized message (`as_grpc_specifies`), and the wording of an undecodable message's `INTERNAL` (Turnstile's names the field,
//! `bad_requests.rs`); both answer `INTERNAL`.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use prost::Message;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor,
};
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use turnstile::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use crate::semantics::BASIC;
use crate::support::{Options, start_memory};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// tonic's generated server, answering every decodable request with a fixed OK.
struct Fixed;

#[tonic::async_trait]
impl RateLimitService for Fixed {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: 1,
            ..RateLimitResponse::default()
        }))
    }
}

/// The oracle: tonic's transport serving the generated rate-limit service and health.
async fn tonic_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (_reporter, health) = tonic_health::server::health_reporter();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Fixed))
            .add_service(health)
            .serve_with_incoming(incoming),
    );
    addr
}

/// What a client reads of one answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    http: u16,
    content_type: Option<String>,
    /// `grpc-status` in the response's headers (a trailers-only answer).
    trailers_only: bool,
    status: Option<String>,
    message: Option<String>,
    accept_encoding: Option<String>,
    /// Each data frame's messages: (compressed flag, decodes as a `RateLimitResponse`).
    framed: Vec<(u8, bool)>,
}

fn header(map: &HeaderMap, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// The length-prefixed messages of `data`.
fn messages(mut data: &[u8]) -> Vec<(u8, bool)> {
    let mut out = Vec::new();
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        let end = (5 + len).min(data.len());
        out.push((data[0], RateLimitResponse::decode(&data[5..end]).is_ok()));
        data = &data[end..];
    }
    out
}

/// Sends `chunks` as the body of a call to `path` with `headers` over a new connection.
async fn exchange(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    chunks: &[&[u8]],
) -> Answer {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready");
    let mut request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).expect("request");
    let (response, mut body) = client.send_request(request, false).expect("send");
    for chunk in chunks {
        body.send_data(Bytes::copy_from_slice(chunk), false)
            .expect("data");
    }
    body.send_data(Bytes::new(), true).expect("end");
    let response = response.await.expect("response");
    let (parts, mut recv) = response.into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.expect("data frame");
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.expect("trailers").unwrap_or_default();
    let trailers_only = parts.headers.contains_key("grpc-status");
    let status_from = if trailers_only {
        &parts.headers
    } else {
        &trailers
    };
    Answer {
        http: parts.status.as_u16(),
        content_type: header(&parts.headers, "content-type"),
        trailers_only,
        status: header(status_from, "grpc-status"),
        // As a client reads it: percent-decoded.
        message: tonic::Status::from_header_map(status_from)
            .map(|s| s.message().to_owned())
            .filter(|m| !m.is_empty()),
        accept_encoding: header(status_from, "grpc-accept-encoding"),
        framed: messages(&data),
    }
}

fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&u32::try_from(message.len()).expect("len").to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A request the basic rules match.
fn good_request() -> Vec<u8> {
    RateLimitRequest {
        domain: "test-domain".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![rate_limit_descriptor::Entry {
                key: "key2".into(),
                value: "x".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
    .encode_to_vec()
}

/// One case: a name, the path, extra headers and the body's chunks.
type Case = (
    String,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<Vec<u8>>,
);

/// Cases of messages after the first: good, not protobuf, cut short, compressed, and two in
/// one body split at every byte.
fn later_messages(good: &[u8]) -> Vec<Case> {
    let good = good.to_vec();
    let mut cases: Vec<Case> = Vec::new();
    let twice = [good.clone(), good.clone()].concat();
    let more: [(&str, Vec<u8>); 5] = [
        ("a second good message", good.clone()),
        ("a second message that is not protobuf", framed(0, b"more")),
        (
            "a second message cut short",
            good[..good.len() - 2].to_vec(),
        ),
        ("a second message compressed", framed(1, &good_request())),
        ("two good messages in one frame", twice.clone()),
    ];
    for (name, second) in more {
        cases.push((name.into(), PATH, vec![], vec![good.clone(), second]));
    }
    for cut in 1..twice.len() {
        let (a, b) = twice.split_at(cut);
        cases.push((
            format!("two messages split at byte {cut}"),
            PATH,
            vec![],
            vec![a.to_vec(), b.to_vec()],
        ));
    }
    cases
}

/// A good request split in two at every byte.
fn splits(good: &[u8]) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for cut in 1..good.len() {
        let (a, b) = good.split_at(cut);
        cases.push((
            format!("a good request split at byte {cut}"),
            PATH,
            vec![],
            vec![a.to_vec(), b.to_vec()],
        ));
    }
    cases
}

fn cases() -> Vec<Case> {
    let good = framed(0, &good_request());
    let mut cases: Vec<Case> = vec![
        ("a good request".into(), PATH, vec![], vec![good.clone()]),
        (
            "identity encoding named".into(),
            PATH,
            vec![("grpc-encoding", "identity")],
            vec![good.clone()],
        ),
        ("an empty body".into(), PATH, vec![], vec![]),
        (
            "a truncated prefix".into(),
            PATH,
            vec![],
            vec![good[..3].to_vec()],
        ),
        (
            "a truncated message".into(),
            PATH,
            vec![],
            vec![good[..good.len() - 1].to_vec()],
        ),
        (
            "the compressed flag without an encoding".into(),
            PATH,
            vec![],
            vec![framed(1, &good_request())],
        ),
        (
            "an invalid compression flag".into(),
            PATH,
            vec![],
            vec![framed(2, &good_request())],
        ),
        (
            "a gzip encoding".into(),
            PATH,
            vec![("grpc-encoding", "gzip")],
            vec![good.clone()],
        ),
        (
            "a length over 4 MiB".into(),
            PATH,
            vec![],
            vec![vec![0, 0, 0x40, 0, 1]],
        ),
        (
            "an unknown method".into(),
            "/envoy.service.ratelimit.v3.RateLimitService/Nope",
            vec![],
            vec![good.clone()],
        ),
        (
            "an unknown service".into(),
            "/no.such.Service/Method",
            vec![],
            vec![good.clone()],
        ),
        (
            "a path without a method".into(),
            "/envoy.service.ratelimit.v3.RateLimitService",
            vec![],
            vec![good.clone()],
        ),
        (
            "health's unknown method".into(),
            "/grpc.health.v1.Health/Nope",
            vec![],
            vec![good.clone()],
        ),
    ];
    cases.extend(later_messages(&good));
    cases.extend(splits(&good));
    cases
}

/// tonic's answer where Turnstile answers as the gRPC specification and grpc-go (the
/// reference's server) do instead (`server::content_type`): a message over the size limit is
/// `RESOURCE_EXHAUSTED` (8), where tonic says `OUT_OF_RANGE` (11), with the same message.
fn as_grpc_specifies(mut tonic: Answer) -> Answer {
    let oversize = tonic
        .message
        .as_deref()
        .is_some_and(|m| m.contains("message length too large"));
    if oversize && tonic.status.as_deref() == Some("11") {
        tonic.status = Some("8".into());
    }
    tonic
}

#[tokio::test]
async fn turnstile_answers_every_exchange_as_tonics_generated_server_does() {
    let tonic = tonic_server().await;
    let turnstile = start_memory(&[("basic.yaml", BASIC)], Options::default()).await;
    for (name, path, headers, chunks) in cases() {
        let chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let expected = as_grpc_specifies(exchange(tonic, path, &headers, &chunks).await);
        let got = exchange(turnstile.addr, path, &headers, &chunks).await;
        assert_eq!(
            got, expected,
            "{name}: Turnstile (left) and tonic (right) differ"
        );
    }
}

/// Undecodable protobuf: `INTERNAL` from both, trailers-only, Turnstile's message naming the
/// field where prost's names the type.
#[tokio::test]
async fn undecodable_protobuf_is_internal_from_both() {
    let tonic = tonic_server().await;
    let turnstile = start_memory(&[("basic.yaml", BASIC)], Options::default()).await;
    // Field 2 (descriptors) as a varint.
    let body = framed(0, &[0x10, 0x01]);
    let expected = exchange(tonic, PATH, &[], &[&body]).await;
    let got = exchange(turnstile.addr, PATH, &[], &[&body]).await;
    assert_eq!(expected.status.as_deref(), Some("13"), "{expected:?}");
    let message = got.message.clone().unwrap_or_default();
    assert!(
        message.contains("descriptors: invalid wire type"),
        "{got:?}"
    );
    let without_message = |a: Answer| Answer { message: None, ..a };
    assert_eq!(without_message(got), without_message(expected));
}
