//! RLQS protobuf ↔ quota types. A report that cannot be read is refused with
//! `INVALID_ARGUMENT` naming the field.

use std::collections::HashMap;

use tonic::Status;

use crate::clock::millis_of;
use crate::pb::envoy::service::rate_limit_quota::v3 as pb;
use crate::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket, rate_limit_strategy};
use crate::quota::{Assignment, BucketId, Decided, MAX_BUCKET_PAIRS, Usage};
use pb::rate_limit_quota_response::BucketAction;
use pb::rate_limit_quota_response::bucket_action::{self, QuotaAssignmentAction};

/// The domain and usages of one report, validated (`INVALID_ARGUMENT` naming the field).
pub fn usages_from_pb(
    report: pb::RateLimitQuotaUsageReports,
    max_id_bytes: usize,
) -> Result<(String, Vec<Usage>), Status> {
    let mut out = Vec::with_capacity(report.bucket_quota_usages.len());
    for (i, usage) in report.bucket_quota_usages.into_iter().enumerate() {
        let field = format!("bucket_quota_usages[{i}].bucket_id");
        let pairs = usage
            .bucket_id
            .ok_or_else(|| Status::invalid_argument(format!("{field}: required")))?
            .bucket;
        let bucket = BucketId::new(pairs).ok_or_else(|| {
            Status::invalid_argument(format!(
                "{field}: a bucket id has 1 to {MAX_BUCKET_PAIRS} pairs"
            ))
        })?;
        if bucket.bytes() > max_id_bytes {
            return Err(Status::invalid_argument(format!(
                "{field}: {} bytes of keys and values, more than the {max_id_bytes} a bucket id \
                 may have (RLQS_MAX_BUCKET_ID_BYTES)",
                bucket.bytes()
            )));
        }
        out.push(Usage {
            bucket,
            allowed: usage.num_requests_allowed,
            denied: usage.num_requests_denied,
            elapsed_ms: usage.time_elapsed.map_or(0, elapsed_ms),
        });
    }
    Ok((report.domain, out))
}

/// A duration in whole milliseconds; a negative one is unknown (0).
fn elapsed_ms(d: prost_types::Duration) -> u64 {
    std::time::Duration::try_from(d).map_or(0, millis_of)
}

/// The response carrying every decided assignment, in order.
pub fn response_to_pb(decided: &[Decided]) -> pb::RateLimitQuotaResponse {
    pb::RateLimitQuotaResponse {
        bucket_action: decided.iter().map(action).collect(),
    }
}

fn action(d: &Decided) -> BucketAction {
    let bucket: HashMap<String, String> = d.bucket.pairs().iter().cloned().collect();
    let strategy = match d.assignment {
        Assignment::AllowAll { .. } => rate_limit_strategy::Strategy::BlanketRule(
            rate_limit_strategy::BlanketRule::AllowAll.into(),
        ),
        Assignment::DenyAll { .. } => rate_limit_strategy::Strategy::BlanketRule(
            rate_limit_strategy::BlanketRule::DenyAll.into(),
        ),
        Assignment::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
            ..
        } => rate_limit_strategy::Strategy::TokenBucket(TokenBucket {
            max_tokens,
            tokens_per_fill: Some(tokens_per_fill),
            fill_interval: Some(seconds(u64::from(fill_interval_seconds))),
        }),
    };
    BucketAction {
        bucket_id: Some(pb::BucketId { bucket }),
        bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
            QuotaAssignmentAction {
                assignment_time_to_live: Some(seconds(d.assignment.ttl_seconds())),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            },
        )),
    }
}

fn seconds(n: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(n).unwrap_or(i64::MAX),
        nanos: 0,
    }
}
