//! The proto3 JSON mapping of `RateLimitRequest` (in) and `RateLimitResponse` (out), for the
//! HTTP `/json` endpoint: camelCase or original field names accepted, enum names or numbers,
//! 64-bit integers as numbers or strings, defaults omitted on output, durations as `"12s"`.

use prost_types::value::Kind;
use serde_json::{Map, Value, json};

use crate::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor,
};
use crate::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response,
};

/// A JSON body that is not a `RateLimitRequest`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct JsonError(String);

fn bad(what: impl Into<String>) -> JsonError {
    JsonError(what.into())
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, JsonError> {
    value
        .as_object()
        .ok_or_else(|| bad(format!("{what}: expected an object")))
}

/// Looks a field up by its JSON (camelCase) or proto name; rejects unknown fields.
fn fields<'a>(
    map: &'a Map<String, Value>,
    known: &[(&str, &str)],
    what: &str,
) -> Result<Vec<Option<&'a Value>>, JsonError> {
    for key in map.keys() {
        if !known
            .iter()
            .any(|(json, proto)| key == json || key == proto)
        {
            return Err(bad(format!("{what}: unknown field '{key}'")));
        }
    }
    Ok(known
        .iter()
        .map(|(json, proto)| {
            map.get(*json)
                .or_else(|| map.get(*proto))
                .filter(|v| !v.is_null())
        })
        .collect())
}

fn string(value: Option<&Value>, what: &str) -> Result<String, JsonError> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(bad(format!("{what}: expected a string"))),
    }
}

fn uint(value: Option<&Value>, what: &str) -> Result<u64, JsonError> {
    match value {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| bad(format!("{what}: expected an unsigned integer"))),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| bad(format!("{what}: expected an unsigned integer"))),
        Some(_) => Err(bad(format!("{what}: expected an unsigned integer"))),
    }
}

fn u32_field(value: Option<&Value>, what: &str) -> Result<u32, JsonError> {
    u32::try_from(uint(value, what)?).map_err(|_| bad(format!("{what}: out of range")))
}

fn unit(value: Option<&Value>, what: &str) -> Result<i32, JsonError> {
    const NAMES: [&str; 7] = [
        "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR",
    ];
    match value {
        None => Ok(0),
        Some(Value::String(s)) => match NAMES.iter().position(|n| n == s) {
            Some(i) => Ok(i as i32),
            None => Err(bad(format!("{what}: unknown unit '{s}'"))),
        },
        Some(Value::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| bad(format!("{what}: bad unit"))),
        Some(_) => Err(bad(format!("{what}: expected a unit name"))),
    }
}

/// Parses a JSON `RateLimitRequest`.
pub(crate) fn request(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let map = object(&value, "request")?;
    let f = fields(
        map,
        &[
            ("domain", "domain"),
            ("descriptors", "descriptors"),
            ("hitsAddend", "hits_addend"),
        ],
        "request",
    )?;
    let mut descriptors = Vec::new();
    if let Some(list) = f[1] {
        let list = list
            .as_array()
            .ok_or_else(|| bad("descriptors: expected a list"))?;
        for (i, d) in list.iter().enumerate() {
            descriptors.push(descriptor(d, &format!("descriptors[{i}]"))?);
        }
    }
    Ok(RateLimitRequest {
        domain: string(f[0], "domain")?,
        descriptors,
        hits_addend: u32_field(f[2], "hitsAddend")?,
    })
}

fn descriptor(value: &Value, what: &str) -> Result<RateLimitDescriptor, JsonError> {
    let map = object(value, what)?;
    let f = fields(
        map,
        &[
            ("entries", "entries"),
            ("limit", "limit"),
            ("hitsAddend", "hits_addend"),
            ("isNegativeHits", "is_negative_hits"),
        ],
        what,
    )?;
    let mut entries = Vec::new();
    if let Some(list) = f[0] {
        let list = list
            .as_array()
            .ok_or_else(|| bad(format!("{what}.entries: expected a list")))?;
        for (j, e) in list.iter().enumerate() {
            let at = format!("{what}.entries[{j}]");
            let ef = fields(object(e, &at)?, &[("key", "key"), ("value", "value")], &at)?;
            entries.push(rate_limit_descriptor::Entry {
                key: string(ef[0], &at)?,
                value: string(ef[1], &at)?,
            });
        }
    }
    let limit = match f[1] {
        None => None,
        Some(l) => {
            let at = format!("{what}.limit");
            let lf = fields(
                object(l, &at)?,
                &[("requestsPerUnit", "requests_per_unit"), ("unit", "unit")],
                &at,
            )?;
            Some(rate_limit_descriptor::RateLimitOverride {
                requests_per_unit: u32_field(lf[0], &at)?,
                unit: unit(lf[1], &at)?,
            })
        }
    };
    let hits_addend = match f[2] {
        None => None,
        Some(v) => Some(uint(Some(v), &format!("{what}.hitsAddend"))?),
    };
    let is_negative_hits = match f[3] {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad(format!("{what}.isNegativeHits: expected a boolean"))),
    };
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

fn code_name(code: i32) -> &'static str {
    match rate_limit_response::Code::try_from(code) {
        Ok(rate_limit_response::Code::Ok) => "OK",
        Ok(rate_limit_response::Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

fn struct_json(s: &prost_types::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(v: &prost_types::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_json).collect()),
    }
}

/// The JSON form of a response.
pub(crate) fn response(resp: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code_name(resp.overall_code)));
    let statuses: Vec<Value> = resp
        .statuses
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("code".into(), json!(code_name(s.code)));
            if let Some(l) = &s.current_limit {
                let mut lm = Map::new();
                if !l.name.is_empty() {
                    lm.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lm.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                lm.insert("unit".into(), json!(l.unit().as_str_name()));
                m.insert("currentLimit".into(), Value::Object(lm));
            }
            if s.limit_remaining != 0 {
                m.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                m.insert(
                    "durationUntilReset".into(),
                    json!(format!("{}s", d.seconds)),
                );
            }
            Value::Object(m)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !resp.response_headers_to_add.is_empty() {
        let headers = resp
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(md) = &resp.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_json(md));
    }
    Value::Object(out)
}
