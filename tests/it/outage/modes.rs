//! Each rule's own mode when its store fails (`on_store_failure`, `fail_open`), beside the
//! process's: over a memcached address nothing listens on (refused at once), with N pinned.

use std::num::NonZeroU64;
use std::sync::Arc;

use turnstile::clock::ManualClock;
use turnstile::limiter::{
    Code, Descriptor, Entry, Limiter, LimiterSettings, Request, StoreFailure,
};
use turnstile::storage::ErrorKind;
use turnstile::storage::memcached::MemcachedStore;

use crate::support::memcached::unreachable_memcached_store;

const RULES: &str = "domain: m\ndescriptors:\n\
  \x20 - key: local\n    rate_limit: { unit: hour, requests_per_unit: 5, on_store_failure: local }\n\
  \x20 - key: open\n    rate_limit: { unit: hour, requests_per_unit: 5, on_store_failure: open }\n\
  \x20 - key: legacy\n    rate_limit: { unit: hour, requests_per_unit: 5, fail_open: true }\n\
  \x20 - key: strict\n    rate_limit: { unit: hour, requests_per_unit: 5, on_store_failure: unavailable }\n\
  \x20 - key: default\n    rate_limit: { unit: hour, requests_per_unit: 5 }\n";

fn request(keys: &[&str]) -> Request<'static> {
    Request {
        domain: "m".into(),
        descriptors: keys
            .iter()
            .map(|k| Descriptor {
                entries: vec![Entry {
                    key: (*k).to_owned().into(),
                    value: "v".into(),
                }],
                limit_override: None,
                hits: 1,
                refund: false,
                hits_addend: None,
            })
            .collect(),
        hits_addend: 0,
    }
}

fn limiter(clock: &ManualClock, process: StoreFailure) -> Limiter<MemcachedStore> {
    let store = unreachable_memcached_store(clock);
    let settings = LimiterSettings {
        on_store_failure: process,
        local_replicas: NonZeroU64::new(2),
        ..Default::default()
    };
    Limiter::new(store, Arc::new(clock.clone()), settings)
}

#[tokio::test]
async fn a_rule_s_mode_wins_over_the_process_s() {
    let clock = ManualClock::new(1_800_000_000);
    let rules = crate::support::rules(&[("m.yaml", RULES)], false);
    let l = limiter(&clock, StoreFailure::Unavailable);
    // local: 5 / 2 = 2 admitted here; open and fail_open: OK, uncounted.
    let mut codes = Vec::new();
    for _ in 0..3 {
        let v = l
            .check(&rules, &request(&["local", "open", "legacy"]))
            .await;
        let v = v.expect("local and open descriptors answer");
        assert!(v.failed_open);
        codes.push(v.statuses.iter().map(|s| s.code).collect::<Vec<_>>());
    }
    let ok3 = vec![Code::Ok, Code::Ok, Code::Ok];
    assert_eq!(codes[..2], [ok3.clone(), ok3]);
    assert_eq!(codes[2], [Code::OverLimit, Code::Ok, Code::Ok]);
    assert_eq!(l.outage_readings().local_decisions, 3);
    // One descriptor in the unavailable mode (its rule's, or the process's) fails the call.
    for keys in [["local", "strict"], ["open", "default"]] {
        let err = l
            .check(&rules, &request(&keys))
            .await
            .expect_err("unavailable");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{keys:?}: {err}");
    }
    // The process in the local mode: a rule without a mode is decided locally too.
    let l = limiter(&clock, StoreFailure::Local);
    let v = l
        .check(&rules, &request(&["default"]))
        .await
        .expect("local");
    assert_eq!((v.statuses[0].code, v.failed_open), (Code::Ok, false));
    let err = l
        .check(&rules, &request(&["strict"]))
        .await
        .expect_err("its rule says so");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
}
