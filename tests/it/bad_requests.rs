//! Malformed requests get INVALID_ARGUMENT naming the field; nothing of such a request is
//! counted; the server keeps serving. No configuration loaded → UNAVAILABLE.

use crate::semantics::BASIC;
use crate::support::{Options, desc, req, req1, start_memory};
use std::sync::Arc;
use tonic::Code as GrpcCode;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;

#[tokio::test]
async fn malformed_requests_name_the_field_and_count_nothing() {
    let s = start_memory(&[("basic.yaml", BASIC)], Options::default()).await;
    let mut unknown_unit = desc(&[("key2", "x")]);
    unknown_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 0,
    });
    let mut undefined_unit = desc(&[("key2", "x")]);
    undefined_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 42,
    });
    let cases = vec![
        (
            req1("", &[("key2", "x")]),
            "domain: rate limit domain must not be empty",
        ),
        (
            req("test-domain", vec![]),
            "descriptors: rate limit descriptor list must not be empty",
        ),
        (
            req("test-domain", vec![desc(&[("key2", "x")]), desc(&[])]),
            "descriptors[1].entries: must not be empty",
        ),
        (
            req("test-domain", vec![desc(&[("key2", "x"), ("", "v")])]),
            "descriptors[0].entries[1].key: must not be empty",
        ),
        (
            req("test-domain", vec![desc(&[("key2", "x")]), unknown_unit]),
            "descriptors[1].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got UNKNOWN)",
        ),
        (
            req("test-domain", vec![undefined_unit]),
            "descriptors[0].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got 42)",
        ),
    ];
    for (request, message) in cases {
        let status = s.try_call(request).await.expect_err(message);
        assert_eq!(
            (status.code(), status.message()),
            (GrpcCode::InvalidArgument, message)
        );
    }
    // The valid first descriptors of the rejected requests were not counted.
    let resp = s.call(req1("test-domain", &[("key2", "x")])).await;
    assert_eq!(resp.statuses[0].limit_remaining, 19);
}

#[tokio::test]
async fn no_configuration_loaded_is_unavailable() {
    // The only rule file is broken, and the service starts anyway, with no rules.
    let options = Options {
        env: vec![("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")],
        ..Options::default()
    };
    let s = start_memory(&[("broken.yaml", "domain: [\n")], options).await;
    let status = s
        .try_call(req1("d", &[("k", "v")]))
        .await
        .expect_err("no config");
    assert_eq!(
        (status.code(), status.message()),
        (GrpcCode::Unavailable, "no rate limit configuration loaded")
    );
}

#[tokio::test]
async fn the_memory_store_refuses_new_counters_when_full_instead_of_forgetting() {
    let clock = turnstile::clock::ManualClock::new(crate::support::T0);
    // 64 shards × 1 counter each.
    let store = turnstile::storage::memory::MemoryStore::new(64, Arc::new(clock.clone()));
    let s = crate::support::start_with(
        store,
        clock.clone(),
        &[("basic.yaml", BASIC)],
        Options::default(),
    )
    .await;
    let mut full = None;
    for i in 0..200 {
        match s
            .try_call(req1("test-domain", &[("key2", &format!("v{i}"))]))
            .await
        {
            Ok(_) => {}
            Err(status) => {
                full = Some(status);
                break;
            }
        }
    }
    let status = full.expect("the bound is enforced");
    assert_eq!(status.code(), GrpcCode::Unavailable);
    assert!(
        status.message().contains("counter store full"),
        "{}",
        status.message()
    );
    // Once the windows expire, the store accepts new counters again.
    clock.advance(61);
    let resp = s.call(req1("test-domain", &[("key2", "fresh")])).await;
    assert_eq!(resp.statuses[0].limit_remaining, 19);
}

#[tokio::test]
async fn stats_cardinality_is_bounded() {
    let rules = "domain: d\ndescriptors:\n  - key: unspec\n    detailed_metric: true\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n";
    let options = Options {
        env: vec![("STATS_MAX_KEYS", "1000")],
        ..Options::default()
    };
    let s = start_memory(&[("d.yaml", rules)], options).await;
    for i in 0..1_100 {
        s.call(req1("d", &[("unspec", &format!("v{i}"))])).await;
    }
    let text = s.metrics.render(&[]);
    let series = text
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_rate_limit_total_hits{"))
        .count();
    assert!(series <= 1_001, "{series} series");
    assert!(
        text.contains(r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="__overflow__"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"ratelimit_service_rate_limit_total_hits{domain="d",key1="unspec_v7"} 1"#)
    );
}

/// `message` sent as a `ShouldRateLimit` request, whatever its type; the status it is refused
/// with.
async fn refused<M>(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    message: M,
) -> tonic::Status
where
    M: prost::Message + Send + Sync + 'static,
{
    crate::support::should_rate_limit_raw(grpc, message)
        .await
        .expect_err("refused")
}

/// A body that is not protobuf of the request's layout: `INTERNAL` (as tonic and the reference
/// answer it) naming the field the decoder was reading, nothing counted, the server still
/// serving.
#[tokio::test]
async fn undecodable_protobuf_is_internal_and_names_the_field() {
    /// A request whose `descriptors` field (2) is a varint.
    #[derive(Clone, PartialEq, prost::Message)]
    struct VarintDescriptors {
        #[prost(uint64, tag = "2")]
        descriptors: u64,
    }
    /// A request whose first descriptor's `entries` field (1) is a varint.
    #[derive(Clone, PartialEq, prost::Message)]
    struct VarintEntries {
        #[prost(bytes = "vec", tag = "1")]
        domain: Vec<u8>,
        #[prost(message, optional, tag = "2")]
        descriptor: Option<VarintDescriptors1>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct VarintDescriptors1 {
        #[prost(uint64, tag = "1")]
        entries: u64,
    }
    let s = start_memory(&[("basic.yaml", BASIC)], Options::default()).await;
    let mut grpc = crate::support::raw_grpc(s.addr).await;
    let status = refused(&mut grpc, VarintDescriptors { descriptors: 1 }).await;
    assert_eq!(status.code(), GrpcCode::Internal);
    assert_eq!(
        status.message(),
        "failed to decode Protobuf message: descriptors: invalid wire type: Varint (expected LengthDelimited)"
    );
    let request = VarintEntries {
        domain: b"test-domain".to_vec(),
        descriptor: Some(VarintDescriptors1 { entries: 3 }),
    };
    let status = refused(&mut grpc, request).await;
    assert_eq!(status.code(), GrpcCode::Internal);
    assert_eq!(
        status.message(),
        "failed to decode Protobuf message: descriptors[0].entries: invalid wire type: Varint (expected LengthDelimited)"
    );
    // Still serving (key2 allows 20 a minute: this is its first hit).
    let answer = s.call(req1("test-domain", &[("key2", "x")])).await;
    assert_eq!(answer.statuses[0].limit_remaining, 19);
}

/// Paths no service serves are `UNIMPLEMENTED`, as tonic's router answered them, and every
/// other service is still found by its name (`grpc::routes`).
#[tokio::test]
async fn unknown_services_and_methods_are_unimplemented() {
    use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    let s = start_memory(&[("basic.yaml", BASIC)], Options::default()).await;
    let mut grpc = crate::support::raw_grpc(s.addr).await;
    for path in [
        "/no.such.Service/Method",
        "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod",
        "/grpc.health.v1.Health/NoSuchMethod",
    ] {
        grpc.ready().await.expect("ready");
        let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitRequest>::default();
        let answer = grpc
            .unary(
                tonic::Request::new(RateLimitRequest::default()),
                http::uri::PathAndQuery::from_static(path),
                codec,
            )
            .await;
        let status = answer.expect_err(path);
        assert_eq!(status.code(), GrpcCode::Unimplemented, "{path}: {status:?}");
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Endpoint::from_shared(format!("http://{}", s.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect"),
    );
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health answers through the dispatch");
    assert_eq!(
        serving.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}
