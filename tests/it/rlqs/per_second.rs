//! `REDIS_PERSECOND`: a SECOND limit that RLS counts in the per-second Redis is counted there by
//! RLQS too, in the very same counter (it had been counted in the main Redis: two counts of one
//! limit).

use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

use crate::process::{Process, rules_root};
use crate::rlqs::stream::Quotas;
use crate::support::redis_server::{RedisProcess, count_keys, per_second_env};
use crate::support::{desc, missing, req, unique};

/// A SECOND limit (over an hour, so that a report and a call share one window) and a MINUTE one.
const RULES: &str = "\
domain: split
descriptors:
  - key: burst
    rate_limit: { unit: second, unit_multiplier: 3600, requests_per_unit: 100 }
  - key: steady
    rate_limit: { unit: minute, unit_multiplier: 60, requests_per_unit: 100 }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rls_and_rlqs_count_a_second_limit_in_one_counter_of_the_per_second_redis() {
    let (Some(main), Some(second)) = (RedisProcess::start(), RedisProcess::start()) else {
        return missing("redis-server");
    };
    let root = rules_root(RULES);
    let (main_url, second_url) = (main.addr(), second.addr());
    let p = Process::start(&root, &per_second_env(&main_url, &second_url));
    let value = unique("v");
    // RLQS: one report of 3 allowed requests in each bucket.
    let usage = |key: &str| BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: [(key.to_owned(), value.clone())].into(),
        }),
        time_elapsed: None,
        num_requests_allowed: 3,
        num_requests_denied: 0,
    };
    let report = RateLimitQuotaUsageReports {
        domain: "split".into(),
        bucket_quota_usages: vec![usage("burst"), usage("steady")],
    };
    Quotas::one_report(p.grpc, report).await;
    // RLS then reads the same counters: 100 - 3 - 1 in both.
    let call = req(
        "split",
        vec![desc(&[("burst", &value)]), desc(&[("steady", &value)])],
    );
    let answer = p
        .client()
        .await
        .should_rate_limit(call)
        .await
        .expect("answer")
        .into_inner();
    let remaining: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(
        remaining,
        [96, 96],
        "RLS reads what RLQS counted, on each store"
    );
    let keys = |port: u16, key: &str| count_keys(port, &format!("split_{key}_{value}_*"));
    assert_eq!(
        keys(second.port, "burst"),
        Some(1),
        "one SECOND counter, in the second Redis"
    );
    assert_eq!(
        keys(main.port, "burst"),
        Some(0),
        "and none in the main one"
    );
    assert_eq!(keys(main.port, "steady"), Some(1));
    assert_eq!(keys(second.port, "steady"), Some(0));
}
