//! A request as sent ([`Draft`], from the wire's `decode` or the official types) → the
//! limiter's request, with validation. The whole request is checked before anything is counted;
//! a malformed one gets `INVALID_ARGUMENT` naming the field.
//!
//! Must not touch: the wire format (`decode`, `wire`), the decision.

use std::borrow::Cow;

use crate::limiter::{Descriptor, Entry, LimitOverride, Request};
use crate::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use crate::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ResponseUnit;
use crate::pb::envoy::r#type::v3::RateLimitUnit;
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

/// The text of header-derived bytes, borrowed when they are valid UTF-8. Each byte of an invalid
/// sequence becomes the private-use character U+10FF00 + byte, so different byte strings stay
/// different texts (and different counters). Only a client that itself sends those private-use
/// characters could meet such a value, which costs nobody else anything.
pub fn text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                out.push_str(chunk.valid());
                for &b in chunk.invalid() {
                    out.push(char::from_u32(0x10_FF00 + u32::from(b)).unwrap_or('\u{FFFD}'));
                }
            }
            Cow::Owned(out)
        }
    }
}

/// A request as it was sent, before validation: its descriptors' hits not yet resolved (the
/// request's own `hits_addend` may come after them), the first descriptor whose `limit` has no
/// valid unit noted. Only [`Draft::validate`] makes a [`Request`] of it.
#[derive(Debug, Default)]
pub struct Draft<'a> {
    pub(super) domain: Cow<'a, str>,
    pub(super) descriptors: Vec<Descriptor<'a>>,
    pub(super) hits_addend: u32,
    /// The first descriptor sent with a `limit` of no known unit, and that unit's number.
    bad_unit: Option<(usize, i32)>,
}

impl<'a> Draft<'a> {
    /// Adds a descriptor and its `limit` as sent (requests per unit, the unit's number).
    pub(super) fn push(&mut self, mut descriptor: Descriptor<'a>, limit: Option<(u32, i32)>) {
        if let Some((requests_per_unit, unit)) = limit {
            match override_unit(unit) {
                Some(unit) => {
                    descriptor.limit_override = Some(LimitOverride {
                        requests_per_unit,
                        unit,
                        algorithm: Algorithm::default(),
                    });
                }
                None => {
                    self.bad_unit.get_or_insert((self.descriptors.len(), unit));
                }
            }
        }
        self.descriptors.push(descriptor);
    }

    /// Checks the whole request before anything is counted, and resolves each descriptor's
    /// hits: its own `hits_addend` when present (0 = check only); otherwise the request's,
    /// where 0 means 1. The first problem, in the order of the fields, is the answer.
    pub fn validate(mut self) -> Result<Request<'a>, InvalidRequest> {
        if self.domain.is_empty() {
            return Err(invalid("domain", "rate limit domain must not be empty"));
        }
        if self.descriptors.is_empty() {
            return Err(invalid(
                "descriptors",
                "rate limit descriptor list must not be empty",
            ));
        }
        let request_hits = u64::from(self.hits_addend.max(1));
        for (i, d) in self.descriptors.iter_mut().enumerate() {
            if d.entries.is_empty() {
                return Err(invalid(
                    format!("descriptors[{i}].entries"),
                    "must not be empty",
                ));
            }
            if let Some(j) = d.entries.iter().position(|e| e.key.is_empty()) {
                return Err(invalid(
                    format!("descriptors[{i}].entries[{j}].key"),
                    "must not be empty",
                ));
            }
            if let Some((_, unit)) = self.bad_unit.filter(|(at, _)| *at == i) {
                return Err(invalid(
                    format!("descriptors[{i}].limit.unit"),
                    format!(
                        "must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got {})",
                        unit_text(unit)
                    ),
                ));
            }
            d.hits = d.hits_addend.unwrap_or(request_hits);
        }
        Ok(Request {
            domain: self.domain,
            descriptors: self.descriptors,
            hits_addend: self.hits_addend,
        })
    }
}

/// Validates a request given in the official types (the `/json` endpoint); its texts are
/// borrowed.
pub fn request_from_pb(pb: &RateLimitRequest) -> Result<Request<'_>, InvalidRequest> {
    let mut draft = Draft {
        domain: Cow::Borrowed(&pb.domain),
        descriptors: Vec::with_capacity(pb.descriptors.len()),
        hits_addend: pb.hits_addend,
        bad_unit: None,
    };
    for d in &pb.descriptors {
        let descriptor = Descriptor {
            entries: d
                .entries
                .iter()
                .map(|e| Entry {
                    key: Cow::Borrowed(&e.key),
                    value: Cow::Borrowed(&e.value),
                })
                .collect(),
            limit_override: None,
            hits: 0,
            refund: d.is_negative_hits,
            hits_addend: d.hits_addend,
        };
        draft.push(descriptor, d.limit.map(|l| (l.requests_per_unit, l.unit)));
    }
    draft.validate()
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
        let req = request_from_pb(&pb).expect("valid");
        let hits: Vec<u64> = req.descriptors.iter().map(|d| d.hits).collect();
        assert_eq!(hits, vec![1, 0, 7]);
        let pb = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor("a", None)],
            hits_addend: 3,
        };
        assert_eq!(request_from_pb(&pb).expect("valid").descriptors[0].hits, 3);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |pb: RateLimitRequest| request_from_pb(&pb).expect_err("invalid").to_string();
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
        assert_eq!(text(b"plain"), "plain");
        assert!(matches!(text(b"plain"), std::borrow::Cow::Borrowed(_)));
        let a = text(b"caf\xe9");
        let b = text(b"caf\xe8");
        assert!(a.starts_with("caf") && b.starts_with("caf"));
        assert_ne!(a, b);
        assert_ne!(text(&[0xff]), text(&[0xfe, 0xff]));
    }
}
