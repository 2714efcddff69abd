//! Any bytes as a ShouldRateLimit request body: decoded by prost, then validated and converted
//! as the gRPC edge does; an invalid request names the field, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use turnstile::grpc::request_from_pb;
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = RateLimitRequest::decode(data) {
        let descriptors = request.descriptors.len();
        match request_from_pb(request) {
            Ok(converted) => assert_eq!(converted.descriptors.len(), descriptors),
            Err(invalid) => assert!(!invalid.to_string().is_empty()),
        }
    }
});
