//! Two replicas sharing memcached (or Redis, in the reference's key layout), one RLQS stream
//! on each over loopback: they share one count with each other and with RLS.

use std::time::Duration;

use turnstile::limiter::{KeyLayout, LimiterSettings};
use turnstile::storage::redis::RedisTarget;

use super::RULES;
use super::stream::{Quotas, kind};
use crate::support::redis_server::{RedisProcess, redis_store};
use crate::support::{Memcached, Options, T0, memcached_store, req1, start_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_memcached_share_one_count() {
    let Some(mc) = Memcached::start() else { return };
    let clock = turnstile::clock::ManualClock::new(T0);
    let store = || memcached_store(&[&mc], &clock, Duration::from_secs(1));
    replicas_share_one_count(store(), store(), &clock, Options::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_redis_share_one_count() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let clock = turnstile::clock::ManualClock::new(T0);
    let store = || redis_store(RedisTarget::Tcp(redis.addr()), &clock);
    // Redis's default key layout: the reference's bytes for window counters.
    let options = Options {
        limiter: LimiterSettings {
            key_layout: KeyLayout::Reference,
            ..Default::default()
        },
        ..Default::default()
    };
    replicas_share_one_count(store(), store(), &clock, options).await;
}

/// Two replicas over two store clients of one shared store, one Envoy stream on each.
async fn replicas_share_one_count<S: Into<turnstile::app::Store>>(
    a: S,
    b: S,
    clock: &turnstile::clock::ManualClock,
    options: Options,
) {
    let files = [("rlqs.yaml", RULES)];
    let a = start_with(a, clock.clone(), &files, options.clone()).await;
    let b = start_with(b, clock.clone(), &files, options).await;
    let user = crate::support::unique("erin");
    let bucket = [("user", user.as_str())];
    let mut on_a = Quotas::open(a.addr).await;
    let mut on_b = Quotas::open(b.addr).await;
    // An Envoy on replica A allowed 3 and wants 4 more; one on B allowed 1 and wants 4 more.
    let r = on_a
        .report("rlqs", &[(&bucket, 3, 4)])
        .await
        .expect("answer");
    assert!(kind(&r, 0).starts_with("tb "));
    let r = on_b
        .report("rlqs", &[(&bucket, 1, 4)])
        .await
        .expect("answer");
    // B sees A's count: 4 of 5 used, one left. B's stream had not seen A before, so A also
    // counts as having asked as much as B since its report (5 more): B's share of demand is
    // 5/17, its part of the window 5 × 5/17 ≈ 1.5, of which it used 1: less than a request
    // left of its part, denied until the window ends. (Alone, B's part would be all 5, 4 of
    // them left: a token bucket.)
    assert_eq!(kind(&r, 0), "deny ttl 20s");
    // A reports the last one: the budget is spent on both replicas.
    let r = on_a
        .report("rlqs", &[(&bucket, 1, 0)])
        .await
        .expect("answer");
    assert_eq!(kind(&r, 0), "deny ttl 20s");
    let r = on_b
        .report("rlqs", &[(&bucket, 0, 2)])
        .await
        .expect("answer");
    assert_eq!(kind(&r, 0), "deny ttl 20s");
    // RLS on replica B reads the same counter: nothing left.
    let rls = b.call(req1("rlqs", &[("user", user.as_str())])).await;
    assert_eq!(rls.statuses[0].limit_remaining, 0);
}
