//! Any bytes as an RLQS usage report, decoded, validated and converted as the RLQS edge does,
//! then folded into an in-process store and assigned on a fresh stream (three times: first,
//! next, and across a window's end), and the assignments encoded: a report is refused naming
//! the field or answered for every bucket; nothing panics.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tonic::{Code, Status};
use turnstile::clock::{ManualClock, UnixMillis};
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::Limiter;
use turnstile::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use turnstile::quota::{QuotaError, QuotaStream};
use turnstile::rlqs::{refusal, response_to_pb, usages_from_pb};
use turnstile::rules::RuleSet;
use turnstile::settings::RlqsSettings;
use turnstile::storage::memory::MemoryStore;

const RULES: &str = "domain: rlqs\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: path\n    value: /api\n    descriptors:\n      - key: user\n        rate_limit: { unit: second, unit_multiplier: 30, requests_per_unit: 10 }\n  - key: file\n    value: a*\n    rate_limit: { unlimited: true }\n";

fn rules() -> &'static RuleSet {
    static RULES_SET: OnceLock<RuleSet> = OnceLock::new();
    RULES_SET.get_or_init(|| {
        parse_files(
            &[("rlqs.yaml".into(), RULES.into())],
            LoadOptions::default(),
        )
        .expect("rules")
        .rules
    })
}

/// Small bounds, so that the fuzzer reaches them with short inputs.
fn settings() -> RlqsSettings {
    RlqsSettings {
        max_bucket_id_bytes: 64,
        max_bucket_bytes: 256,
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let report = match RateLimitQuotaUsageReports::decode(data) {
        Ok(report) => report,
        Err(e) => {
            // What tonic's decoder says of such bytes, as the RLQS edge answers it.
            let refused = refusal(Status::internal(e.to_string())).expect("answered");
            assert_eq!(refused.code(), Code::InvalidArgument);
            return;
        }
    };
    let reported = report.bucket_quota_usages.len();
    let settings = settings();
    let (domain, usages) = match usages_from_pb(report, settings.max_bucket_id_bytes) {
        Ok(ok) => ok,
        Err(status) => {
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(status.message().starts_with("bucket_quota_usages["));
            return;
        }
    };
    assert_eq!(usages.len(), reported);
    assert!(
        usages
            .iter()
            .all(|u| u.bucket.bytes() <= settings.max_bucket_id_bytes)
    );
    let clock = ManualClock::new(1_796_000_000);
    let store = MemoryStore::new(10_000, Arc::new(clock.clone()));
    let limiter = Limiter::new(store, Arc::new(clock), Default::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut stream = QuotaStream::new(settings);
    // The same report three times on one stream: as a first report, 4.9 s later (a second
    // report, measured from the first), and after a window's end and its refresh (a report
    // straddling that start).
    for at_ms in [1_796_000_000_500, 1_796_000_005_400, 1_796_000_062_000] {
        if at_ms == 1_796_000_062_000 {
            let refreshed = stream.refresh(rules(), false, UnixMillis::new(1_796_000_060_000));
            assert!(refreshed.len() <= reported);
        }
        match runtime.block_on(stream.on_report(
            &domain,
            usages.clone(),
            rules(),
            &limiter,
            UnixMillis::new(at_ms),
        )) {
            Ok(decided) => {
                assert!(decided.len() <= reported);
                assert_eq!(response_to_pb(&decided).bucket_action.len(), decided.len());
            }
            Err(err @ QuotaError::TooManyBucketBytes { .. }) => {
                assert!(err.to_string().contains("RLQS_MAX_BUCKET_BYTES"));
            }
            Err(err) => assert!(!err.to_string().is_empty()),
        }
        assert!(stream.held_bytes() <= settings.max_bucket_bytes);
    }
});
