//! Peers nobody here wrote: Envoy's own generated code (Python `xds-protos` + `grpcio`) in both
//! directions and over a live call, grpc.health.v1 and server reflection from Python's grpcio
//! tools, and `grpcurl` (list, describe and a call, with no proto files).

use std::path::PathBuf;
use std::process::Command;

use prost::Message;
use turnstile::pb::envoy::config::core::v3::HeaderValue;
use turnstile::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response as rr,
};
use turnstile::rls::{HeaderNames, ResponseSettings};

use crate::support::{Options, TestServer, peers_venv, start_memory};

const WIRE: &str = "domain: wire\ndescriptors:\n  - key: user\n    rate_limit: { unit: week, requests_per_unit: 3, name: weekly }\n    metadata: { tier: gold }\n";

/// Runs the RLS peer script; `None` when the peer virtualenv is missing (reported).
pub(crate) fn python(args: &[&str]) -> Option<String> {
    peer_script("wire_check.py", args)
}

/// Runs `tests/peers/<name>`; `None` when the peer virtualenv is missing (reported).
pub(crate) fn peer_script(name: &str, args: &[&str]) -> Option<String> {
    let Some(venv) = peers_venv() else {
        crate::support::missing("the peer virtualenv (.venv-peers with grpcio and xds-protos)");
        return None;
    };
    let out = Command::new(venv.join("bin/python"))
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/peers")
                .join(name),
        )
        .args(args)
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

async fn wire_server() -> TestServer {
    let response = ResponseSettings {
        headers: Some(HeaderNames::default()),
        dynamic_metadata: true,
    };
    start_memory(
        &[("wire.yaml", WIRE)],
        Options {
            response,
            ..Default::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_generated_client_live_call() {
    let s = wire_server().await;
    if let Some(out) = python(&["call", &s.addr.to_string()]) {
        assert_eq!(out.trim(), "wire call ok");
    }
}

#[test]
fn request_encoded_by_envoy_code_decodes_as_sent() {
    let Some(hex) = python(&["encode-request"]) else {
        return;
    };
    let bytes: Vec<u8> = (0..hex.trim().len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex.trim()[i..i + 2], 16).expect("hex"))
        .collect();
    let request = RateLimitRequest::decode(bytes.as_slice()).expect("decode");
    assert_eq!(
        (
            request.domain.as_str(),
            request.hits_addend,
            request.descriptors.len()
        ),
        ("wire", 1, 3)
    );
    let [alice, bob, carol] = &request.descriptors[..] else {
        panic!("three descriptors")
    };
    assert_eq!(
        (
            alice.entries[0].key.as_str(),
            alice.entries[0].value.as_str(),
            alice.hits_addend
        ),
        ("user", "alice", Some(2))
    );
    let over = bob.limit.expect("override");
    assert_eq!(
        (over.requests_per_unit, over.unit, bob.hits_addend),
        (7, 2, None)
    );
    assert_eq!((carol.is_negative_hits, carol.hits_addend), (true, Some(1)));
}

#[test]
fn response_encoded_by_turnstile_decodes_in_envoy_code() {
    let quota = rr::Quota {
        requests: 5,
        id: "q".into(),
        expiration_specifier: Some(rr::quota::ExpirationSpecifier::ValidUntil(
            prost_types::Timestamp {
                seconds: 1234,
                nanos: 0,
            },
        )),
    };
    let mut metadata = prost_types::Struct::default();
    metadata.fields.insert(
        "x".into(),
        prost_types::Value {
            kind: Some(prost_types::value::Kind::BoolValue(true)),
        },
    );
    let response = RateLimitResponse {
        overall_code: rr::Code::OverLimit as i32,
        statuses: vec![rr::DescriptorStatus {
            code: rr::Code::OverLimit as i32,
            current_limit: Some(rr::RateLimit {
                name: "n".into(),
                requests_per_unit: 9,
                unit: rr::rate_limit::Unit::Week as i32,
            }),
            limit_remaining: 4,
            duration_until_reset: Some(prost_types::Duration {
                seconds: 42,
                nanos: 0,
            }),
            quota: Some(quota),
        }],
        response_headers_to_add: vec![HeaderValue {
            key: "k".into(),
            value: "v".into(),
            raw_value: vec![],
        }],
        request_headers_to_add: vec![HeaderValue {
            key: "r".into(),
            value: String::new(),
            raw_value: b"\0raw".to_vec(),
        }],
        raw_body: b"body".to_vec(),
        dynamic_metadata: Some(metadata),
        quota: Some(rr::Quota {
            requests: 1,
            ..Default::default()
        }),
    };
    let hex: String = response
        .encode_to_vec()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(out) = python(&["decode-response", &hex]) {
        assert_eq!(out.trim(), "decode ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_from_grpcio() {
    let s = wire_server().await;
    if let Some(out) = python(&["health", &s.addr.to_string()]) {
        assert_eq!(out.trim(), "health ok");
    }
    if let Some(out) = python(&["reflect", &s.addr.to_string()]) {
        assert_eq!(out.trim(), "reflection ok");
    }
}

fn grpcurl(args: &[&str]) -> Option<String> {
    let Some(venv) = peers_venv() else {
        crate::support::missing("grpcurl (.venv-peers/bin/grpcurl)");
        return None;
    };
    let out = Command::new(venv.join("bin/grpcurl"))
        .args(args)
        .output()
        .expect("grpcurl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "grpcurl {args:?}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_list_describe_and_call_without_proto_files() {
    let s = wire_server().await;
    let addr = s.addr.to_string();
    let Some(list) = grpcurl(&["-plaintext", &addr, "list"]) else {
        return;
    };
    for service in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
        "grpc.health.v1.Health",
    ] {
        assert!(list.lines().any(|l| l == service), "{service} in:\n{list}");
    }
    let describe = grpcurl(&[
        "-plaintext",
        &addr,
        "describe",
        "envoy.service.ratelimit.v3.RateLimitService",
    ])
    .expect("grpcurl");
    assert!(describe.contains("rpc ShouldRateLimit ( .envoy.service.ratelimit.v3.RateLimitRequest ) returns ( .envoy.service.ratelimit.v3.RateLimitResponse )"), "{describe}");
    let body = r#"{"domain":"wire","descriptors":[{"entries":[{"key":"user","value":"dave"}]}]}"#;
    let call = grpcurl(&[
        "-plaintext",
        "-d",
        body,
        &addr,
        "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    ])
    .expect("grpcurl");
    for want in [
        r#""overallCode": "OK""#,
        r#""requestsPerUnit": 3"#,
        r#""unit": "WEEK""#,
        r#""name": "weekly""#,
        r#""limitRemaining": 2"#,
    ] {
        assert!(call.contains(want), "{want} in:\n{call}");
    }
}
