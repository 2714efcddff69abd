//! Any bytes as a ShouldRateLimit request body, decoded as the server decodes it (lenient: the
//! header-derived texts as bytes) and as Envoy's official types, then validated and converted
//! as the gRPC edge does; an invalid request names the field, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use turnstile::rls::{request_from_pb, request_from_wire};
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::pb::turnstile::wire::v1::LenientRequest;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = LenientRequest::decode(data) {
        let descriptors = request.descriptors.len();
        match request_from_wire(request) {
            Ok(converted) => assert_eq!(converted.descriptors.len(), descriptors),
            Err(invalid) => assert!(!invalid.to_string().is_empty()),
        }
    }
    if let Ok(request) = RateLimitRequest::decode(data) {
        // Every request the official types accept, the server accepts the same way.
        let official = request_from_pb(request.clone());
        let lenient = LenientRequest::decode(data).map(request_from_wire);
        assert_eq!(official, lenient.expect("a valid request decodes leniently too"));
    }
});
