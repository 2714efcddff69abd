//! Any bytes as an RLQS usage report, decoded, validated and converted as the RLQS edge does,
//! then folded into an in-process store and assigned on a fresh stream, and the assignments
//! encoded: a report is refused naming the field or answered for every bucket; nothing panics.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use prost::Message;
use turnstile::clock::ManualClock;
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::Limiter;
use turnstile::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use turnstile::quota::QuotaStream;
use turnstile::rlqs::{response_to_pb, usages_from_pb};
use turnstile::rules::RuleSet;
use turnstile::storage::memory::MemoryStore;

const RULES: &str = "domain: rlqs\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: path\n    value: /api\n    descriptors:\n      - key: user\n        rate_limit: { unit: second, unit_multiplier: 30, requests_per_unit: 10 }\n  - key: file\n    value: a*\n    rate_limit: { unlimited: true }\n";

fn rules() -> &'static RuleSet {
    static RULES_SET: OnceLock<RuleSet> = OnceLock::new();
    RULES_SET.get_or_init(|| {
        parse_files(&[("rlqs.yaml".into(), RULES.into())], LoadOptions::default())
            .expect("rules")
            .rules
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(report) = RateLimitQuotaUsageReports::decode(data) else {
        return;
    };
    let reported = report.bucket_quota_usages.len();
    let (domain, usages) = match usages_from_pb(report) {
        Ok(ok) => ok,
        Err(status) => {
            assert!(status.message().starts_with("bucket_quota_usages["));
            return;
        }
    };
    assert_eq!(usages.len(), reported);
    let clock = ManualClock::new(1_796_000_000);
    let store = MemoryStore::new(10_000, Arc::new(clock.clone()));
    let limiter = Limiter::new(store, Arc::new(clock), Default::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut stream = QuotaStream::new(Default::default());
    match runtime.block_on(stream.on_report(&domain, usages, rules(), &limiter, 1_796_000_000_500)) {
        Ok(decided) => {
            assert!(decided.len() <= reported);
            assert_eq!(response_to_pb(&decided).bucket_action.len(), decided.len());
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    }
});
