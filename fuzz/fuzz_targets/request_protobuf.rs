//! Any bytes as a ShouldRateLimit request body: the server's own decoder (`decode_request`)
//! reads them exactly as prost's generated decoder of the same layout does (the lenient one:
//! the header-derived texts as bytes), to the same validated request or to a refusal; every
//! request the official types accept, the server accepts the same way; an invalid request
//! names the field, and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::rls::{decode_request, request_from_pb};

#[path = "../../tests/it/wire_oracle.rs"]
mod wire_oracle;

fuzz_target!(|data: &[u8]| {
    if let Err(difference) = wire_oracle::check(data) {
        panic!("{difference}");
    }
    if let Ok(draft) = decode_request(data) {
        let descriptors = draft.validate();
        if let Err(invalid) = descriptors {
            assert!(!invalid.to_string().is_empty());
        }
    }
    if let Ok(request) = RateLimitRequest::decode(data) {
        let official = request_from_pb(&request);
        let served = decode_request(data).map(|d| d.validate());
        assert_eq!(
            official,
            served.expect("a valid request decodes leniently too")
        );
    }
});
