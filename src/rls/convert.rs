//! Protobuf → domain request, with validation. The whole request is checked before anything is
//! counted; a malformed one gets `INVALID_ARGUMENT` naming the field.

use crate::limiter::{Descriptor, Entry, LimitOverride, Request};
use crate::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ResponseUnit;
use crate::pb::envoy::r#type::v3::RateLimitUnit;
use crate::pb::turnstile::wire::v1::{LenientDescriptor, LenientRequest, lenient_descriptor};
use crate::rules::{Algorithm, Unit};

/// A request field that is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidRequest {
    /// The field path, e.g. `descriptors[1].entries[0].key`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> InvalidRequest {
    InvalidRequest {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The unit of an override. `envoy.type.v3.RateLimitUnit` has no WEEK; the response enum's
/// WEEK value is accepted too, so a proxy that sends it is not refused.
fn override_unit(value: i32) -> Option<Unit> {
    if value == ResponseUnit::Week as i32 {
        return Some(Unit::Week);
    }
    match RateLimitUnit::try_from(value).ok()? {
        RateLimitUnit::Second => Some(Unit::Second),
        RateLimitUnit::Minute => Some(Unit::Minute),
        RateLimitUnit::Hour => Some(Unit::Hour),
        RateLimitUnit::Day => Some(Unit::Day),
        RateLimitUnit::Month => Some(Unit::Month),
        RateLimitUnit::Year => Some(Unit::Year),
        RateLimitUnit::Unknown => None,
    }
}

/// The text of header-derived bytes. Valid UTF-8 is kept as it is; each byte of an invalid
/// sequence becomes the private-use character U+10FF00 + byte, so different byte strings stay
/// different texts (and different counters). Only a client that itself sends those private-use
/// characters could meet such a value, which costs nobody else anything.
pub fn text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let bytes = err.into_bytes();
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
                for &b in chunk.invalid() {
                    out.push(char::from_u32(0x10_FF00 + u32::from(b)).unwrap_or('\u{FFFD}'));
                }
            }
            out
        }
    }
}

/// Validates and converts a request given in the official types (the `/json` endpoint).
pub fn request_from_pb(pb: RateLimitRequest) -> Result<Request, InvalidRequest> {
    let descriptors = pb
        .descriptors
        .into_iter()
        .map(|d| LenientDescriptor {
            entries: d
                .entries
                .into_iter()
                .map(|e| lenient_descriptor::Entry {
                    key: e.key.into_bytes(),
                    value: e.value.into_bytes(),
                })
                .collect(),
            limit: d.limit,
            hits_addend: d.hits_addend,
            is_negative_hits: d.is_negative_hits,
        })
        .collect();
    request_from_wire(LenientRequest {
        domain: pb.domain.into_bytes(),
        descriptors,
        hits_addend: pb.hits_addend,
    })
}

/// Validates and converts a request as it came off the wire. Take are resolved here: a
/// descriptor's own `hits_addend` wins when present (0 = check only); otherwise the request's,
/// where 0 means 1.
pub fn request_from_wire(pb: LenientRequest) -> Result<Request, InvalidRequest> {
    if pb.domain.is_empty() {
        return Err(invalid("domain", "rate limit domain must not be empty"));
    }
    if pb.descriptors.is_empty() {
        return Err(invalid(
            "descriptors",
            "rate limit descriptor list must not be empty",
        ));
    }
    let request_hits = u64::from(pb.hits_addend.max(1));
    let mut descriptors = Vec::with_capacity(pb.descriptors.len());
    for (i, d) in pb.descriptors.into_iter().enumerate() {
        if d.entries.is_empty() {
            return Err(invalid(
                format!("descriptors[{i}].entries"),
                "must not be empty",
            ));
        }
        let mut entries = Vec::with_capacity(d.entries.len());
        for (j, e) in d.entries.into_iter().enumerate() {
            if e.key.is_empty() {
                return Err(invalid(
                    format!("descriptors[{i}].entries[{j}].key"),
                    "must not be empty",
                ));
            }
            entries.push(Entry {
                key: text(e.key),
                value: text(e.value),
            });
        }
        let limit_override = match d.limit {
            None => None,
            Some(o) => {
                let unit = override_unit(o.unit).ok_or_else(|| {
                    invalid(
                        format!("descriptors[{i}].limit.unit"),
                        format!(
                            "must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got {})",
                            unit_text(o.unit)
                        ),
                    )
                })?;
                Some(LimitOverride {
                    requests_per_unit: o.requests_per_unit,
                    unit,
                    algorithm: Algorithm::default(),
                })
            }
        };
        descriptors.push(Descriptor {
            entries,
            limit_override,
            hits: d.hits_addend.unwrap_or(request_hits),
            refund: d.is_negative_hits,
            hits_addend: d.hits_addend,
        });
    }
    Ok(Request {
        domain: text(pb.domain),
        descriptors,
        hits_addend: pb.hits_addend,
    })
}

fn unit_text(value: i32) -> String {
    if value == 0 {
        "UNKNOWN".to_owned()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{request_from_pb, text};
    use crate::pb::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor,
    };
    use crate::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    fn descriptor(key: &str, hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: vec![rate_limit_descriptor::Entry {
                key: key.into(),
                value: "v".into(),
            }],
            hits_addend: hits,
            ..Default::default()
        }
    }

    #[test]
    fn hits_resolution() {
        let pb = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![
                descriptor("a", None),
                descriptor("b", Some(0)),
                descriptor("c", Some(7)),
            ],
            hits_addend: 0,
        };
        let req = request_from_pb(pb).expect("valid");
        let hits: Vec<u64> = req.descriptors.iter().map(|d| d.hits).collect();
        assert_eq!(hits, vec![1, 0, 7]);
        let pb = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor("a", None)],
            hits_addend: 3,
        };
        assert_eq!(request_from_pb(pb).expect("valid").descriptors[0].hits, 3);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |pb| request_from_pb(pb).expect_err("invalid").to_string();
        assert!(err(RateLimitRequest::default()).starts_with("domain: "));
        let pb = RateLimitRequest {
            domain: "d".into(),
            ..Default::default()
        };
        assert!(err(pb).starts_with("descriptors: "));
        let pb = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor("a", None), descriptor("", None)],
            hits_addend: 0,
        };
        assert_eq!(err(pb), "descriptors[1].entries[0].key: must not be empty");
        let mut d = descriptor("a", None);
        d.limit = Some(rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 0,
        });
        let pb = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![d],
            hits_addend: 0,
        };
        assert!(err(pb).starts_with("descriptors[0].limit.unit: "));
    }

    #[test]
    fn invalid_utf8_becomes_distinct_text() {
        assert_eq!(text(b"plain".to_vec()), "plain");
        let a = text(b"caf\xe9".to_vec());
        let b = text(b"caf\xe8".to_vec());
        assert!(a.starts_with("caf") && b.starts_with("caf"));
        assert_ne!(a, b);
        assert_ne!(text(vec![0xff]), text(vec![0xfe, 0xff]));
    }
}
