//! The local mode (`BACKEND_FAILURE_MODE=local`) against the models: a limiter whose store
//! cannot be reached (a memcached address nothing listens on, refused at once) decides every
//! algorithm in its own memory with a share of 1/N of each limit, which the models state as
//! every hit counting N times; random sequences of calls and clock steps on an injected clock
//! must give the models' answers exactly, for N = 1, 2 and 3.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use turnstile::clock::ManualClock;
use turnstile::limiter::{Limiter, LimiterSettings, StoreFailure};
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore, MemcachedTransport};

/// An address on this machine where nothing listens.
fn nothing_listens() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    address.to_string()
}

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
        let store = runtime.block_on(async {
            let options = MemcachedOptions {
                servers: vec![nothing_listens()],
                client: turnstile::storage::memcached::MemcachedClient {
                    transport: MemcachedTransport::Pipelined,
                    pool_size: 2,
                    pipelined_connections: Some(std::num::NonZeroUsize::MIN),
                    timeout: Duration::from_secs(1),
                    jitter_max_seconds: 0,
                },
                tls: None,
            };
            MemcachedStore::new(options, Arc::new(clock.clone())).expect("store")
        });
        let limiter = Limiter::new(store, Arc::new(clock.clone()), settings);
        let calls = steps.iter().filter(|s| matches!(s, super::Step::Call { .. })).count();
        super::run_with_share(&runtime, &limiter, &clock, super::Expiry::TestClock, share, steps)?;
        let readings = limiter.outage_readings();
        prop_assert_eq!(readings.replicas, Some(share));
        prop_assert_eq!(readings.local_decisions, calls as u64, "every call decided locally");
    }
}
