//! The local mode (`BACKEND_FAILURE_MODE=local`) against the models: a limiter whose store
//! cannot be reached (a memcached address nothing listens on, refused at once) decides every
//! algorithm in its own memory with a share of 1/N of each limit, which the models state as
//! every hit counting N times; random sequences of calls and clock steps on an injected clock
//! must give the models' answers exactly, for N = 1, 2 and 3.

use std::num::NonZeroU64;
use std::sync::Arc;

use proptest::prelude::*;
use turnstile::clock::ManualClock;
use turnstile::limiter::{Limiter, LimiterSettings, StoreFailure};

use crate::support::memcached::unreachable_memcached_store;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]
    #[test]
    fn every_algorithm_matches_its_model_with_the_share_when_the_store_is_down(
        share in 1u64..4,
        steps in proptest::collection::vec(super::step(), 1..60),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let clock = ManualClock::new(1_000_000);
        let settings = LimiterSettings {
            on_store_failure: StoreFailure::Local,
            local_replicas: NonZeroU64::new(share),
            ..Default::default()
        };
        let store = runtime.block_on(async { unreachable_memcached_store(&clock) });
        let limiter = Limiter::new(store, Arc::new(clock.clone()), settings);
        let calls = steps.iter().filter(|s| matches!(s, super::Step::Call { .. })).count();
        super::run_with_share(&runtime, &limiter, &clock, super::Expiry::TestClock, share, steps)?;
        let readings = limiter.outage_readings();
        prop_assert_eq!(readings.replicas, Some(share));
        prop_assert_eq!(readings.local_decisions, calls as u64, "every call decided locally");
    }
}
