//! The oracle for the server's request decoder (`turnstile::rls::decode_request`): prost's
//! generated decoder of the same layout (`turnstile.wire.v1.LenientRequest`), its texts mapped
//! as the server maps them and validated by the official types' path. Shared by
//! `wire_decode.rs` and the `request_protobuf` fuzz target.

use prost::Message;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor,
};
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::pb::turnstile::wire::v1::LenientRequest;
use turnstile::rls::{decode_request, request_from_pb, text};

/// Whether the server reads `data` as prost does: both refuse it, or both accept it and it
/// validates to the same request (or the same error). The difference, said, when not.
pub fn check(data: &[u8]) -> Result<(), String> {
    match (decode_request(data), LenientRequest::decode(data)) {
        (Err(_), Err(_)) => Ok(()),
        (Ok(_), Err(e)) => Err(format!(
            "prost refuses {data:02x?} ({e}), the server accepts it"
        )),
        (Err(e), Ok(_)) => Err(format!(
            "the server refuses {data:02x?} ({e}), prost accepts it"
        )),
        (Ok(draft), Ok(lenient)) => {
            let official = official(&lenient);
            let expected = request_from_pb(&official);
            let got = draft.validate();
            if got == expected {
                Ok(())
            } else {
                Err(format!(
                    "{data:02x?}: the server reads {got:?}, prost {expected:?}"
                ))
            }
        }
    }
}

/// The official request of what prost decoded, each text as the server makes it.
fn official(lenient: &LenientRequest) -> RateLimitRequest {
    RateLimitRequest {
        domain: text(&lenient.domain).into_owned(),
        descriptors: lenient
            .descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| rate_limit_descriptor::Entry {
                        key: text(&e.key).into_owned(),
                        value: text(&e.value).into_owned(),
                    })
                    .collect(),
                limit: d.limit,
                hits_addend: d.hits_addend,
                is_negative_hits: d.is_negative_hits,
            })
            .collect(),
        hits_addend: lenient.hits_addend,
    }
}
