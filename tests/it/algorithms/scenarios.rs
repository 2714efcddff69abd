//! Each algorithm end to end over gRPC, on every backend: the behaviour an operator reads in
//! docs/algorithms.md, asserted on the wire (codes, limit_remaining, duration_until_reset).

use std::time::Duration;

use turnstile::clock::Clock;
use turnstile::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};

use crate::backends::{Backend, Harness};
use crate::on_every_backend;
use crate::support::{Options, desc, req, unique};

const RULES: &str = r#"
domain: alg
descriptors:
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 10, algorithm: sliding_window }
  - key: tb
    rate_limit: { unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 3 }
  - key: cc
    rate_limit: { unit: hour, requests_per_unit: 2, algorithm: concurrency }
  - key: fw
    rate_limit: { unit: minute, unit_multiplier: 5, requests_per_unit: 3 }
"#;

async fn start(backend: Backend) -> Option<Harness> {
    backend
        .start(&[("alg.yaml", RULES)], Options::default())
        .await
}

/// One call with `hits` (0 = check) or a refund of `hits`; returns (code, remaining, reset).
async fn call(
    s: &Harness,
    key: &str,
    value: &str,
    hits: u64,
    refund: bool,
) -> (Code, u32, Duration) {
    let mut d = desc(&[(key, value)]);
    d.hits_addend = Some(hits);
    d.is_negative_hits = refund;
    status(s.call(req("alg", vec![d])).await)
}

fn status(response: RateLimitResponse) -> (Code, u32, Duration) {
    let s = &response.statuses[0];
    let reset = s.duration_until_reset.map_or(Duration::ZERO, |d| {
        Duration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        )
    });
    (
        Code::try_from(s.code).unwrap_or(Code::Unknown),
        s.limit_remaining,
        reset,
    )
}

/// Moves the server's clock to `into` ms after the start of the next window of `period` s.
fn align(s: &Harness, period: u64, into: u64) {
    let now = s.clock.now_secs();
    s.clock
        .set_millis((now - now % period + period) * 1000 + into);
}

async fn sliding_window_holds_back_the_next_burst(backend: Backend) {
    let Some(s) = start(backend).await else {
        return;
    };
    let user = unique("sw");
    align(&s, 60, 50_000);
    for left in (0..10).rev() {
        let (code, remaining, reset) = call(&s, "sw", &user, 1, false).await;
        assert_eq!(
            (code, remaining),
            (Code::Ok, left),
            "a fresh key admits exactly the limit"
        );
        assert_eq!(
            reset,
            Duration::from_secs(10),
            "OK: time to the window's end"
        );
    }
    assert_eq!(call(&s, "sw", &user, 1, false).await.0, Code::OverLimit);
    // Half-way into the next window the previous window (11 counted) still weighs 5.5.
    s.clock.advance(40);
    let mut admitted = 0;
    while call(&s, "sw", &user, 1, false).await.0 == Code::Ok {
        admitted += 1;
    }
    assert_eq!(
        admitted, 4,
        "not a second full burst: 10 - 5.5 leaves room for 4"
    );
    let (_, _, wait) = call(&s, "sw", &user, 0, false).await;
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(90),
        "{wait:?}"
    );
}

async fn token_bucket_gives_capacity_then_the_rate(backend: Backend) {
    let Some(s) = start(backend).await else {
        return;
    };
    let user = unique("tb");
    align(&s, 1, 0);
    for left in (0..5).rev() {
        let (code, remaining, _) = call(&s, "tb", &user, 1, false).await;
        assert_eq!(
            (code, remaining),
            (Code::Ok, left),
            "capacity = 2 + burst 3 at once"
        );
    }
    let (code, _, wait) = call(&s, "tb", &user, 1, false).await;
    assert_eq!(
        (code, wait),
        (Code::OverLimit, Duration::from_millis(500)),
        "one token per 500 ms"
    );
    s.clock.advance_millis(500);
    assert_eq!(call(&s, "tb", &user, 1, false).await.0, Code::Ok);
    assert_eq!(call(&s, "tb", &user, 1, false).await.0, Code::OverLimit);
    assert_eq!(
        call(&s, "tb", &user, 2, false).await.0,
        Code::OverLimit,
        "all or nothing"
    );
    s.clock.advance_millis(2_500);
    let (code, remaining, full_in) = call(&s, "tb", &user, 2, false).await;
    assert_eq!(
        (code, remaining, full_in),
        (Code::Ok, 3, Duration::from_secs(1)),
        "refilled to 5, took 2"
    );
}

async fn concurrency_leases_balance(backend: Backend) {
    let Some(s) = start(backend).await else {
        return;
    };
    let route = unique("cc");
    assert_eq!(call(&s, "cc", &route, 1, false).await.0, Code::Ok);
    assert_eq!(call(&s, "cc", &route, 1, false).await.0, Code::Ok);
    let (code, _, lease) = call(&s, "cc", &route, 1, false).await;
    assert_eq!(
        code,
        Code::OverLimit,
        "a third request in flight is refused"
    );
    assert_eq!(
        lease,
        Duration::from_secs(3600),
        "reset: how long an unreleased count lives"
    );
    // Envoy releases every request at stream end, the refused one included.
    for _ in 0..3 {
        assert_eq!(call(&s, "cc", &route, 1, true).await.0, Code::Ok);
    }
    assert_eq!(
        call(&s, "cc", &route, 0, false).await.1,
        2,
        "0 in flight after every end"
    );
    assert_eq!(
        call(&s, "cc", &route, 1, true).await.1,
        2,
        "never below zero"
    );
    assert_eq!(
        call(&s, "cc", &route, 1, false).await,
        (Code::Ok, 1, Duration::from_secs(3600))
    );
}

async fn unit_multiplier_makes_longer_windows(backend: Backend) {
    let Some(s) = start(backend).await else {
        return;
    };
    let user = unique("fw");
    align(&s, 300, 299_000);
    let response = s.call(req("alg", vec![desc(&[("fw", &user)])])).await;
    let limit = response.statuses[0]
        .current_limit
        .clone()
        .expect("current_limit");
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (3, Unit::Minute as i32)
    );
    assert_eq!(
        status(response),
        (Code::Ok, 2, Duration::from_secs(1)),
        "5-minute window ends in 1 s"
    );
    call(&s, "fw", &user, 2, false).await;
    assert_eq!(call(&s, "fw", &user, 1, false).await.0, Code::OverLimit);
    s.clock.advance(1);
    assert_eq!(
        call(&s, "fw", &user, 1, false).await,
        (Code::Ok, 2, Duration::from_secs(300))
    );
}

async fn override_keeps_the_rules_algorithm(backend: Backend) {
    let Some(s) = start(backend).await else {
        return;
    };
    let user = unique("ov");
    align(&s, 1, 0);
    let mut d = desc(&[("tb", &user)]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: Unit::Second as i32,
    });
    let mut admitted = 0;
    while status(s.call(req("alg", vec![d.clone()])).await).0 == Code::Ok {
        admitted += 1;
    }
    assert_eq!(
        admitted, 4,
        "a token bucket of 1 per second plus the rule's burst of 3"
    );
}

const COMPOSED: &str = r#"
domain: composed
descriptors:
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1, algorithm: token_bucket }
  - key: quota
    quota_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1, algorithm: concurrency }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_window }
  - key: replacer
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_window, replaces: [{ name: bucket }] }
  - key: replaced
    rate_limit: { unit: second, requests_per_unit: 1, algorithm: token_bucket, name: bucket }
"#;

/// Existing features work with the new algorithms: shadow mode answers OK when a bucket is
/// empty, a quota-mode concurrency limit alone refuses only when every quota descriptor is over,
/// `replaces` drops a token bucket, and the local over-limit cache (on) never holds a sliding
/// window over once its estimate has room again.
async fn features_compose_with_algorithms(backend: Backend) {
    let limiter = turnstile::limiter::LimiterSettings {
        local_cache_bytes: 1 << 20,
        ..Default::default()
    };
    let Some(s) = backend.start(&[("c.yaml", COMPOSED)], limiter.into()).await else {
        return;
    };
    let one = |key: &str, value: &str| req("composed", vec![desc(&[(key, value)])]);
    let user = unique("c");
    align(&s, 60, 0);
    assert_eq!(status(s.call(one("shadow", &user)).await).0, Code::Ok);
    let shadowed = s.call(one("shadow", &user)).await;
    assert_eq!(
        shadowed.overall_code(),
        Code::Ok,
        "shadow mode: an empty bucket still answers OK"
    );
    assert_eq!(s.call(one("quota", &user)).await.overall_code(), Code::Ok);
    assert_eq!(
        s.call(one("quota", &user)).await.overall_code(),
        Code::OverLimit,
        "the only quota descriptor is over"
    );
    let both = req(
        "composed",
        vec![desc(&[("replacer", &user)]), desc(&[("replaced", &user)])],
    );
    for _ in 0..3 {
        let response = s.call(both.clone()).await;
        assert_eq!(
            response.overall_code(),
            Code::Ok,
            "the replaced bucket is not counted"
        );
        assert!(response.statuses[1].current_limit.is_none(), "{response:?}");
    }
    // Sliding window with the local cache on: a full minute ...
    s.clock.advance(59);
    for _ in 0..3 {
        assert_eq!(status(s.call(one("sliding", &user)).await).0, Code::Ok);
    }
    // ... holds the next one over at its start (0 + 3 × 59/60 + 1 > 3) ...
    s.clock.advance(2);
    assert_eq!(
        status(s.call(one("sliding", &user)).await).0,
        Code::OverLimit
    );
    // ... and 39 s later, in the same window, there is room again (1 + 3 × 20/60 + 1 = 3).
    s.clock.advance(39);
    assert_eq!(
        status(s.call(one("sliding", &user)).await).0,
        Code::Ok,
        "the local cache must not hold a sliding window over"
    );
}

on_every_backend!(
    features_compose_with_algorithms,
    sliding_window_holds_back_the_next_burst,
    token_bucket_gives_capacity_then_the_rate,
    concurrency_leases_balance,
    unit_multiplier_makes_longer_windows,
    override_keeps_the_rules_algorithm,
);
