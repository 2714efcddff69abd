//! No panic reachable from the network or from a config file: random rule-file text and random
//! requests (any strings, units, hit counts) either load / validate or fail with an error, and
//! every valid request gets one status per descriptor.

use std::sync::Arc;

use proptest::prelude::*;
use turnstile::clock::ManualClock;
use turnstile::config::{LoadOptions, parse_files};
use turnstile::limiter::Limiter;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor,
};
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use turnstile::rls::request_from_pb;
use turnstile::storage::memory::MemoryStore;

/// Fragments that make random text look like rule files, so the parser goes deep.
fn yaml_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("domain: d\n".to_owned()),
        Just("descriptors:\n".to_owned()),
        Just("  - key: k\n".to_owned()),
        Just("    value: \"a*b\"\n".to_owned()),
        Just("    rate_limit: { unit: minute, requests_per_unit: 5 }\n".to_owned()),
        Just("    rate_limit:\n      unlimited: true\n".to_owned()),
        Just("    share_threshold: true\n".to_owned()),
        Just("    metadata: { a: [1, {b: ~}] }\n".to_owned()),
        Just("      replaces:\n        - name: x\n".to_owned()),
        Just("&a [*a]\n".to_owned()),
        "[ -~\t\n]{0,20}",
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|parts| parts.concat())
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    (
        proptest::collection::vec(("\\PC{0,6}", "\\PC{0,6}"), 0..4),
        proptest::option::of((any::<u32>(), -2i32..10)),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_map(|(entries, limit, hits, negative)| RateLimitDescriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| rate_limit_descriptor::Entry { key, value })
                .collect(),
            limit: limit.map(|(n, unit)| rate_limit_descriptor::RateLimitOverride {
                requests_per_unit: n,
                unit,
            }),
            hits_addend: hits,
            is_negative_hits: negative,
        })
}

const RULES: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 3 }\n  - key: w\n    value: \"a*\"\n    share_threshold: true\n    rate_limit: { unit: year, requests_per_unit: 1 }\n";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_rule_text_loads_or_fails_cleanly(text in yaml_like()) {
        match parse_files(&[("f.yaml".into(), text)], LoadOptions::default()) {
            Ok(loaded) => prop_assert!(loaded.rules.domain_count() <= 1),
            Err(errors) => prop_assert!(errors.0.iter().all(|e| e.to_string().starts_with("f.yaml"))),
        }
    }

    #[test]
    fn any_request_is_rejected_or_answered_in_full(
        domain in prop_oneof![Just("d".to_owned()), "\\PC{0,4}"],
        descriptors in proptest::collection::vec(descriptor(), 0..5),
        hits in any::<u32>(),
    ) {
        let rules = crate::support::rules(&[("d.yaml", RULES)], false);
        let clock = ManualClock::new(1_796_000_000);
        let limiter = Limiter::new(MemoryStore::new(10_000, Arc::new(clock.clone())), Arc::new(clock), Default::default());
        let count = descriptors.len();
        let pb = RateLimitRequest { domain, descriptors, hits_addend: hits };
        if let Ok(request) = request_from_pb(&pb) {
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let verdict = runtime.block_on(limiter.check(&rules, &request)).expect("memory store");
            prop_assert_eq!(verdict.statuses.len(), count);
        }
    }
}
