//! Settings of the Rate Limit Quota Service (`RLQS_*`; Turnstile only, the reference has no
//! RLQS).

use std::time::Duration;

use super::reader::{LONGEST, Reader, Span, err};

/// What a bucket that matches no limit (or an unknown domain) is assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// `ALLOW_ALL` (as RLS answers OK for a descriptor without a limit).
    #[default]
    Allow,
    /// `DENY_ALL`.
    Deny,
}

/// How quotas are shared out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RlqsSettings {
    /// `RLQS_UNMATCHED_ACTION` (`allow` or `deny`).
    pub unmatched: Unmatched,
    /// `RLQS_ASSIGNMENT_TTL`: how long Envoy applies an assignment without hearing from us
    /// (whole seconds, at least 1: Envoy ignores fractions).
    pub assignment_ttl: Duration,
    /// `RLQS_MIN_SHARE`: the smallest part of a bucket's pace a stream is given (0..=1).
    pub min_share: f64,
    /// `RLQS_MAX_BUCKETS_PER_STREAM`: a stream reporting more buckets is ended.
    pub max_buckets_per_stream: usize,
    /// `RLQS_MAX_BUCKET_ID_BYTES`: the most bytes (keys and values) of one bucket id; a
    /// report with a longer one is refused.
    pub max_bucket_id_bytes: usize,
    /// `RLQS_MAX_BUCKET_BYTES`: the most bytes of bucket ids held for all streams together; a
    /// report that would add past it is refused.
    pub max_bucket_bytes: usize,
}

impl Default for RlqsSettings {
    fn default() -> Self {
        Self {
            unmatched: Unmatched::Allow,
            assignment_ttl: Duration::from_secs(10),
            min_share: 0.05,
            max_buckets_per_stream: 1_000,
            max_bucket_id_bytes: 4_096,
            max_bucket_bytes: 64 << 20,
        }
    }
}

pub(super) fn rlqs(r: &Reader<'_>) -> RlqsSettings {
    let d = RlqsSettings::default();
    let unmatched = match r.string("RLQS_UNMATCHED_ACTION", "allow").as_str() {
        "allow" => Unmatched::Allow,
        "deny" => Unmatched::Deny,
        other => r.or(
            Err(err("RLQS_UNMATCHED_ACTION", other, "allow or deny")),
            d.unmatched,
        ),
    };
    // At most 10 years: well inside protobuf's Duration (315,576,000,000 s).
    let mut assignment_ttl = r.duration(
        "RLQS_ASSIGNMENT_TTL",
        d.assignment_ttl,
        Span::within(Duration::from_secs(1), LONGEST),
    );
    if assignment_ttl.subsec_nanos() != 0 {
        r.report(err(
            "RLQS_ASSIGNMENT_TTL",
            &humantime::format_duration(assignment_ttl).to_string(),
            "whole seconds, at least 1s (Envoy reads only the seconds)",
        ));
        assignment_ttl = d.assignment_ttl;
    }
    let mut min_share: f64 = r.parsed("RLQS_MIN_SHARE", d.min_share);
    if !(0.0..=1.0).contains(&min_share) {
        r.report(err(
            "RLQS_MIN_SHARE",
            &min_share.to_string(),
            "between 0 and 1",
        ));
        min_share = d.min_share;
    }
    RlqsSettings {
        unmatched,
        assignment_ttl,
        min_share,
        max_buckets_per_stream: r.number(
            "RLQS_MAX_BUCKETS_PER_STREAM",
            d.max_buckets_per_stream,
            1,
            1_000_000,
        ),
        max_bucket_id_bytes: r.number(
            "RLQS_MAX_BUCKET_ID_BYTES",
            d.max_bucket_id_bytes,
            64,
            1 << 20,
        ),
        max_bucket_bytes: r.number(
            "RLQS_MAX_BUCKET_BYTES",
            d.max_bucket_bytes,
            1 << 16,
            1 << 36,
        ),
    }
}
