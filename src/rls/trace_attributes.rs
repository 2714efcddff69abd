//! What a `ShouldRateLimit` span says about its decision: the domain, each descriptor's keys
//! (with values only when `TRACING_INCLUDE_VALUES` allows: they can be personal data), the
//! limits that matched and the codes.

use crate::limiter::{Code, Request, Verdict};
use crate::traces::Traced;

/// Records the decision on its span.
pub(super) fn decided(span: &Traced, request: &Request<'_>, verdict: &Verdict<'_>, values: bool) {
    span.set("ratelimit.domain", request.domain.to_string());
    span.set("ratelimit.descriptors", request.descriptors.len() as i64);
    let entries: Vec<opentelemetry::StringValue> = request
        .descriptors
        .iter()
        .map(|d| {
            let parts: Vec<String> = d
                .entries
                .iter()
                .map(|e| {
                    if values {
                        format!("{}={}", e.key, e.value)
                    } else {
                        e.key.to_string()
                    }
                })
                .collect();
            parts.join(",").into()
        })
        .collect();
    span.set(
        "ratelimit.descriptor_entries",
        opentelemetry::Value::Array(entries.into()),
    );
    let rules: Vec<opentelemetry::StringValue> = verdict
        .statuses
        .iter()
        .map(|s| match s.limit.and_then(|l| l.applied.rule()) {
            Some(rule) => rule.full_key.clone().into(),
            None if s.limit.is_some() => "request override".into(),
            None => "".into(),
        })
        .collect();
    span.set("ratelimit.rules", opentelemetry::Value::Array(rules.into()));
    let codes: Vec<opentelemetry::StringValue> = verdict
        .statuses
        .iter()
        .map(|s| code(s.code).into())
        .collect();
    span.set(
        "ratelimit.descriptor_codes",
        opentelemetry::Value::Array(codes.into()),
    );
    span.set("ratelimit.verdict", code(verdict.overall));
    span.set("ratelimit.domain_found", verdict.domain_found);
}

fn code(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}
