//! The proto3 JSON mapping of `RateLimitRequest` (in) and `RateLimitResponse` (out), for the
//! HTTP `/json` endpoint, done by prost-reflect over the descriptor set that reflection serves:
//! camelCase or original field names, enum names or numbers, 64-bit integers as numbers or
//! strings, unknown fields refused, defaults omitted on output, durations as `"12s"`, metadata
//! as plain JSON objects — the mapping every protobuf runtime implements, so `/json` answers
//! what grpc-gateway or the reference's protojson would.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};

use crate::pb::FILE_DESCRIPTOR_SET;
use crate::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// A JSON body that is not a `RateLimitRequest`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct JsonError(String);

const REQUEST: &str = "envoy.service.ratelimit.v3.RateLimitRequest";
const RESPONSE: &str = "envoy.service.ratelimit.v3.RateLimitResponse";

/// The request and response descriptors, decoded once from the embedded descriptor set.
fn descriptors() -> Result<&'static (MessageDescriptor, MessageDescriptor), JsonError> {
    static DESCRIPTORS: OnceLock<Option<(MessageDescriptor, MessageDescriptor)>> = OnceLock::new();
    DESCRIPTORS
        .get_or_init(|| {
            let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).ok()?;
            Some((
                pool.get_message_by_name(REQUEST)?,
                pool.get_message_by_name(RESPONSE)?,
            ))
        })
        .as_ref()
        .ok_or_else(|| JsonError("the embedded descriptor set lacks the RLS messages".into()))
}

/// Parses a JSON `RateLimitRequest` (the `/json` body; public for the fuzz targets).
pub fn request(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    let (request, _) = descriptors()?;
    let mut json = serde_json::Deserializer::from_slice(body);
    let message = DynamicMessage::deserialize(request.clone(), &mut json)
        .map_err(|e| JsonError(e.to_string()))?;
    json.end().map_err(|e| JsonError(e.to_string()))?;
    message
        .transcode_to::<RateLimitRequest>()
        .map_err(|e| JsonError(e.to_string()))
}

/// The JSON text of a response.
pub(crate) fn response(resp: &RateLimitResponse) -> Result<String, JsonError> {
    let (_, response) = descriptors()?;
    let mut message = DynamicMessage::new(response.clone());
    message
        .transcode_from(resp)
        .map_err(|e| JsonError(e.to_string()))?;
    serde_json::to_string(&message).map_err(|e| JsonError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{request, response};
    use crate::pb::envoy::service::ratelimit::v3::RateLimitResponse;
    use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        Code, DescriptorStatus, RateLimit, rate_limit::Unit,
    };

    #[test]
    fn requests_in_either_field_naming_and_bad_bodies() {
        let body = br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],
            "limit":{"requests_per_unit":5,"unit":"MINUTE"},"hitsAddend":"3","isNegativeHits":true}],
            "hits_addend":2}"#;
        let r = request(body).expect("valid");
        assert_eq!((r.domain.as_str(), r.hits_addend), ("d", 2));
        let d = &r.descriptors[0];
        assert_eq!(d.entries[0].value, "v");
        assert_eq!(
            d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit)),
            Some((5, 2))
        );
        assert_eq!(d.hits_addend, Some(3));
        assert!(d.is_negative_hits);
        for bad in [
            &br#"{nope"#[..],
            br#"{"domain":"d","bogus":1}"#,
            br#"{"domain":1}"#,
            br#"{} {}"#,
        ] {
            assert!(request(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn responses_in_proto3_json() {
        let resp = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![DescriptorStatus {
                code: Code::OverLimit as i32,
                current_limit: Some(RateLimit {
                    name: String::new(),
                    requests_per_unit: 3,
                    unit: Unit::Minute as i32,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(prost_types::Duration {
                    seconds: 12,
                    nanos: 0,
                }),
                quota: None,
            }],
            ..Default::default()
        };
        let text = response(&resp).expect("json");
        assert_eq!(
            text,
            r#"{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":3,"unit":"MINUTE"},"durationUntilReset":"12s"}]}"#
        );
    }
}
