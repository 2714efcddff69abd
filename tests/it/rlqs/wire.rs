//! RLQS against Envoy's own generated code (Python `xds-protos` + `grpcio`): a report encoded
//! there decodes here field by field; a response with every kind of assignment encoded here
//! decodes there as sent; and a live stream from Envoy's generated client.

use prost::Message;
use serde_json::Value;
use turnstile::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use turnstile::quota::{Assignment, BucketId, Decided};
use turnstile::rlqs::{response_to_pb, usages_from_pb};

use super::RULES;
use crate::peers::peer_script;
use crate::support::{Options, start_memory};

fn hex_decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

fn bucket(pairs: &[(&str, &str)]) -> BucketId {
    BucketId::new(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    )
    .expect("bucket")
}

#[test]
fn a_report_encoded_by_envoy_code_decodes_as_sent() {
    let Some(hex) = peer_script("rlqs_check.py", &["encode-report"]) else {
        return;
    };
    let report =
        RateLimitQuotaUsageReports::decode(hex_decode(hex.trim()).as_slice()).expect("decodes");
    assert_eq!(report.domain, "rlqs");
    assert_eq!(report.bucket_quota_usages.len(), 2);
    let first = &report.bucket_quota_usages[0];
    let elapsed = first.time_elapsed.expect("time_elapsed");
    assert_eq!((elapsed.seconds, elapsed.nanos), (2, 250_000_000));
    assert_eq!(
        (first.num_requests_allowed, first.num_requests_denied),
        (7, 3)
    );
    let second = &report.bucket_quota_usages[1];
    assert_eq!(
        second.num_requests_denied,
        u64::MAX,
        "the full range of a uint64"
    );
    let (domain, usages) = usages_from_pb(report, 4_096).expect("valid");
    assert_eq!(domain, "rlqs");
    assert_eq!(
        usages[0].bucket,
        bucket(&[("path", "/api"), ("user", "alice")])
    );
    assert_eq!(usages[1].bucket, bucket(&[("name", "catch-all")]));
    assert_eq!((usages[0].allowed, usages[0].denied), (7, 3));
}

#[test]
fn a_response_encoded_by_turnstile_decodes_in_envoy_code() {
    let decided = [
        Decided {
            bucket: bucket(&[("user", "alice"), ("path", "/api")]),
            assignment: Assignment::TokenBucket {
                max_tokens: 3,
                tokens_per_fill: 96,
                fill_interval_seconds: 60,
                ttl_seconds: 10,
            },
            usage: None,
        },
        Decided {
            bucket: bucket(&[("user", "bob")]),
            assignment: Assignment::DenyAll { ttl_seconds: 42 },
            usage: None,
        },
        Decided {
            bucket: bucket(&[("name", "x")]),
            assignment: Assignment::AllowAll { ttl_seconds: 10 },
            usage: None,
        },
    ];
    let bytes = response_to_pb(&decided).encode_to_vec();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let Some(out) = peer_script("rlqs_check.py", &["decode-response", &hex]) else {
        return;
    };
    let json: Value = serde_json::from_str(out.trim()).expect("json");
    let actions = json["bucket_action"].as_array().expect("actions");
    assert_eq!(actions.len(), 3);
    assert_eq!(actions[0]["bucket_id"]["bucket"]["user"], "alice");
    assert_eq!(actions[0]["bucket_id"]["bucket"]["path"], "/api");
    let first = &actions[0]["quota_assignment_action"];
    assert_eq!(first["assignment_time_to_live"], "10s");
    let tb = &first["rate_limit_strategy"]["token_bucket"];
    assert_eq!(tb["max_tokens"], 3);
    assert_eq!(tb["tokens_per_fill"], 96);
    assert_eq!(tb["fill_interval"], "60s");
    let second = &actions[1]["quota_assignment_action"];
    assert_eq!(second["rate_limit_strategy"]["blanket_rule"], "DENY_ALL");
    assert_eq!(second["assignment_time_to_live"], "42s");
    // ALLOW_ALL is the enum's zero: proto3 JSON prints the set oneof member all the same.
    let third = &actions[2]["quota_assignment_action"];
    assert_eq!(third["rate_limit_strategy"]["blanket_rule"], "ALLOW_ALL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_from_envoys_generated_client() {
    let s = start_memory(&[("rlqs.yaml", RULES)], Options::default()).await;
    let Some(out) = peer_script("rlqs_check.py", &["stream", &s.addr.to_string()]) else {
        return;
    };
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3, "two responses and the refusal: {out}");
    // First sighting: alice (5 per minute) gets a token bucket, the unmatched bucket ALLOW_ALL.
    let first = lines[0]["bucket_action"].as_array().expect("actions");
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["bucket_id"]["bucket"]["user"], "alice");
    let tb = &first[0]["quota_assignment_action"]["rate_limit_strategy"]["token_bucket"];
    assert!(tb["max_tokens"].as_u64().is_some_and(|n| n >= 1), "{tb}");
    assert_eq!(tb["fill_interval"], "60s");
    assert_eq!(first[1]["bucket_id"]["bucket"]["name"], "nothing");
    assert_eq!(
        first[1]["quota_assignment_action"]["rate_limit_strategy"]["blanket_rule"],
        "ALLOW_ALL"
    );
    // 1 + 3 allowed of 5 ... then the window's budget is not yet spent: 4 of 5.
    let second = &lines[1]["bucket_action"][0]["quota_assignment_action"];
    assert!(
        second["rate_limit_strategy"]["token_bucket"].is_object(),
        "4 of 5 used: still a token bucket: {second}"
    );
    assert_eq!(lines[2]["code"], "INVALID_ARGUMENT");
    let details = lines[2]["details"].as_str().expect("details");
    assert!(
        details.starts_with("domain:") && details.contains("another"),
        "{details}"
    );
}
