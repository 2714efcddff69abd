//! The size of a decision's future on the service's store type (`Instrumented<Store>`, the
//! enum over every backend). A request's future is built on the stack and moved into its
//! caller's at every `.await` layer, so its size is paid in `memmove` on every call. What keeps
//! it small: PostgreSQL's futures are boxed (its transaction state is large), a lane awaits its
//! one kind of operation without a join, and memcached's call to one server is boxed whole.
//! The bound is today's size; lower it when a change shrinks it (BENCHMARKS.md has what each
//! step measured).

use std::sync::Arc;

use turnstile::app::Store;
use turnstile::clock::ManualClock;
use turnstile::limiter::{Limiter, Request};
use turnstile::metrics::{Instrumented, Metrics};
use turnstile::rules::RuleSet;
use turnstile::storage::memory::MemoryStore;

/// The decision future's bound, in bytes.
const CHECK_FUTURE_BOUND: usize = 1_144;

#[test]
fn the_decision_future_on_the_service_store_stays_small() {
    let clock = Arc::new(ManualClock::new(1_800_000_000));
    let store: Store = MemoryStore::new(100, clock.clone()).into();
    let metrics = Arc::new(Metrics::new(100, 0.8, &[]));
    let limiter = Limiter::new(Instrumented::new(store, metrics), clock, Default::default());
    let (rules, request) = (
        RuleSet::default(),
        Request {
            domain: "d".into(),
            descriptors: Vec::new(),
            hits_addend: 0,
        },
    );
    let size = std::mem::size_of_val(&limiter.check(&rules, &request));
    println!("Limiter::check on Instrumented<Store>: {size} bytes");
    assert!(
        size <= CHECK_FUTURE_BOUND,
        "the decision's future is {size} bytes, over {CHECK_FUTURE_BOUND}: box the large \
         store future that grew it"
    );
}
