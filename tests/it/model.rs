//! Property test: the limiter (over the memory store, with a manual clock) against a simple
//! reference model of fixed windows, for random sequences of requests, hit counts, refunds and
//! clock moves.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use turnstile::clock::{Clock, ManualClock};
use turnstile::limiter::{Code, Descriptor, Entry, Limiter, Request};
use turnstile::storage::memory::MemoryStore;

const RULES: &str = "domain: m\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: s\n    rate_limit: { unit: second, requests_per_unit: 2 }\n";

use crate::algorithms::Step;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..90).prop_map(Step::Advance),
        (
            prop_oneof![Just("k"), Just("s")],
            0u8..3,
            0u64..4,
            proptest::bool::weighted(0.15)
        )
            .prop_map(|(key, value, hits, refund)| Step::Call {
                key,
                value,
                hits,
                refund
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn limiter_matches_the_fixed_window_model(steps in proptest::collection::vec(step(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let rules = crate::support::rules(&[("m.yaml", RULES)], false);
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::new(10_000, Arc::new(clock.clone()));
        let limiter = Limiter::new(store, Arc::new(clock.clone()), Default::default());
        let mut model: HashMap<(&str, u8, u64), u64> = HashMap::new();
        for step in steps {
            match step {
                Step::Advance(secs) => clock.advance(secs),
                Step::Call { key, value, hits, refund } => {
                    let (limit, period) = if key == "k" { (5u64, 60u64) } else { (2, 1) };
                    let now = clock.now_secs();
                    let window = now - now % period;
                    let count = model.entry((key, value, window)).or_insert(0);
                    *count = if refund { count.saturating_sub(hits) } else { *count + hits };
                    let want_over = !refund && *count > limit;
                    let want_remaining = if want_over { 0 } else { limit.saturating_sub(*count) };

                    let request = Request {
                        domain: "m".into(),
                        descriptors: vec![Descriptor {
                            entries: vec![Entry { key: key.into(), value: format!("v{value}").into() }],
                            limit_override: None,
                            hits,
                            refund,
                            hits_addend: Some(hits),
                        }],
                        hits_addend: 0,
                    };
                    let verdict = runtime.block_on(limiter.check(&rules, &request)).expect("memory store");
                    let status = &verdict.statuses[0];
                    prop_assert_eq!(status.code == Code::OverLimit, want_over);
                    prop_assert_eq!(u64::from(status.remaining), want_remaining);
                    prop_assert_eq!(status.reset_in, Some(std::time::Duration::from_secs(period - now % period)));
                }
            }
        }
    }
}
