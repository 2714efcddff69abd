//! Domain verdict → protobuf response: statuses in request order, the optional `RateLimit-*`
//! response headers and the optional dynamic metadata, shaped as the reference shapes them.

use std::collections::BTreeMap;

use prost_types::{ListValue, Struct, Value, value::Kind};

use crate::limiter::{Code, Counting, Request, Status, Verdict};
use crate::pb::envoy::config::core::v3::HeaderValue;
use crate::pb::envoy::service::ratelimit::v3::{RateLimitResponse, rate_limit_response};
use crate::rules::{MetaValue, Unit};
pub use crate::settings::{HeaderNames, ResponseSettings};

fn code(c: Code) -> i32 {
    match c {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

fn unit(u: Unit) -> i32 {
    use rate_limit_response::rate_limit::Unit as PbUnit;
    (match u {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }) as i32
}

fn status(s: &Status<'_>) -> rate_limit_response::DescriptorStatus {
    rate_limit_response::DescriptorStatus {
        code: code(s.code),
        current_limit: s.limit.map(|l| rate_limit_response::RateLimit {
            name: l.applied.name().to_owned(),
            requests_per_unit: l.rate.requests_per_unit,
            unit: unit(l.rate.unit()),
        }),
        limit_remaining: s.remaining,
        duration_until_reset: s.reset_in.map(|d| prost_types::Duration {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
        }),
        quota: None,
    }
}

/// Builds the response for a verdict.
pub fn response_to_pb(
    verdict: &Verdict<'_>,
    request: &Request<'_>,
    settings: &ResponseSettings,
) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code(verdict.overall),
        statuses: verdict.statuses.iter().map(status).collect(),
        response_headers_to_add: settings
            .headers
            .as_ref()
            .map(|names| headers(verdict, names))
            .unwrap_or_default(),
        dynamic_metadata: settings
            .dynamic_metadata
            .then(|| dynamic_metadata(verdict, request)),
        ..Default::default()
    }
}

/// The descriptor closest to its limit; a non-quota OVER_LIMIT one wins (the last such).
fn headers(verdict: &Verdict<'_>, names: &HeaderNames) -> Vec<HeaderValue> {
    let mut chosen: Option<&Status<'_>> = None;
    for s in verdict.statuses.iter().filter(|s| s.limit.is_some()) {
        if chosen.is_none_or(|c| s.remaining < c.remaining) {
            chosen = Some(s);
        }
    }
    for s in &verdict.statuses {
        if s.code == Code::OverLimit && !s.quota {
            chosen = Some(s);
        }
    }
    let Some(s) = chosen else { return Vec::new() };
    let Some(limit) = s.limit else {
        return Vec::new();
    };
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        header(&names.limit, limit.rate.requests_per_unit.to_string()),
        header(&names.remaining, s.remaining.to_string()),
        header(
            &names.reset,
            // Whole seconds, rounded up: a client never retries too early.
            s.reset_in
                .map_or(0, |d| d.as_millis().div_ceil(1000))
                .to_string(),
        ),
    ]
}

fn kind(k: Kind) -> Value {
    Value { kind: Some(k) }
}

fn string(s: String) -> Value {
    kind(Kind::StringValue(s))
}

fn meta(v: &MetaValue) -> Value {
    kind(match v {
        MetaValue::Null => Kind::NullValue(0),
        MetaValue::Bool(b) => Kind::BoolValue(*b),
        MetaValue::Number(n) => Kind::NumberValue(*n),
        MetaValue::String(s) => Kind::StringValue(s.clone()),
        MetaValue::List(items) => Kind::ListValue(ListValue {
            values: items.iter().map(meta).collect(),
        }),
        MetaValue::Map(map) => Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), meta(v))).collect(),
        }),
    })
}

fn dynamic_metadata(verdict: &Verdict<'_>, request: &Request<'_>) -> Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_owned(), string(request.domain.to_string()));
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut f = BTreeMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| string(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert(
                "entries".to_owned(),
                kind(Kind::ListValue(ListValue { values: entries })),
            );
            if let Some(o) = d.limit_override {
                f.insert(
                    "limit".to_owned(),
                    string(format!(
                        "requests_per_unit:{} unit:{}",
                        o.requests_per_unit,
                        o.unit.name()
                    )),
                );
            }
            if let Some(h) = d.hits_addend {
                f.insert("hitsAddend".to_owned(), kind(Kind::NumberValue(h as f64)));
            }
            kind(Kind::StructValue(Struct { fields: f }))
        })
        .collect();
    fields.insert(
        "descriptors".to_owned(),
        kind(Kind::ListValue(ListValue {
            values: descriptors,
        })),
    );
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            kind(Kind::NumberValue(f64::from(request.hits_addend))),
        );
    }
    let mut merged: Option<MetaValue> = None;
    for s in verdict
        .statuses
        .iter()
        .filter(|s| s.code == Code::Ok && s.counting != Counting::Unlimited)
    {
        if let Some(m) = s.limit.and_then(|l| l.applied.metadata()) {
            match merged.as_mut() {
                Some(acc) => acc.merge_from(m),
                None => merged = Some(m.clone()),
            }
        }
    }
    if let Some(m) = merged {
        fields.insert("metadata".to_owned(), meta(&m));
    }
    Struct { fields }
}
