use std::time::{Duration, Instant};

use super::{Controller, Measured};
use crate::settings::AdaptiveConcurrency;

const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

fn bounds() -> AdaptiveConcurrency {
    AdaptiveConcurrency {
        enabled: true,
        min: 16,
        max: 1_000,
        tolerance: 5 * MS,
        max_wait: None,
    }
}

fn period(mean: Duration, fastest: Duration, peak: u32) -> Measured {
    Measured {
        calls: 1_000,
        mean,
        fastest: Some(fastest),
        peak_in_flight: peak,
    }
}

#[test]
fn the_limit_starts_at_its_minimum_and_an_idle_period_changes_nothing() {
    let mut c = Controller::new(bounds());
    assert_eq!(c.limit(), 16);
    assert_eq!(
        c.round(),
        Some(16),
        "slow start: a period is a round of calls"
    );
    let idle = Measured {
        calls: 0,
        ..period(MS, MS, 0)
    };
    assert_eq!(c.update(&idle, Instant::now()), 16);
    // Calls finished, but no latency measured (none reported) and none known yet: no change.
    let unmeasured = Measured {
        fastest: None,
        ..period(30 * MS, MS, 16)
    };
    assert_eq!(c.update(&unmeasured, Instant::now()), 16);
}

#[test]
fn slow_start_doubles_until_latency_first_passes_the_target() {
    let start = Instant::now();
    let mut c = Controller::new(bounds());
    let fast = |limit| period(300 * US, 200 * US, limit);
    let mut seen = vec![c.limit()];
    for i in 1..5 {
        seen.push(c.update(&fast(c.limit()), start + i * MS));
    }
    assert_eq!(seen, [16, 32, 64, 128, 256]);
    // 10.4 ms against a 5.2 ms target: halved, and slow start is over.
    assert_eq!(
        c.update(&period(10_400 * US, 200 * US, 256), start + 5 * MS),
        128
    );
    assert_eq!(c.round(), None);
    // Fast again: + sqrt(limit), no longer doubling.
    assert_eq!(c.update(&fast(128), start + 6 * MS), 128 + 11);
}

#[test]
fn latency_past_unloaded_plus_tolerance_shrinks_the_limit_by_the_gradient() {
    let start = Instant::now();
    let mut c = Controller::new(bounds());
    while c.limit() < 1_000 {
        c.update(&period(300 * US, 200 * US, c.limit()), start);
    }
    // Unloaded calls take 200 µs: the target is 5.2 ms.
    c.update(&period(300 * US, 200 * US, 10), start);
    assert_eq!(c.unloaded(start), Some(200 * US));
    // 7.8 ms → × 5.2 / 7.8 = × 2/3.
    let limit = c.update(&period(7_800 * US, 300 * US, 1_000), start + 100 * MS);
    assert_eq!(limit, 666);
    // Far past the target: at most halved.
    let limit = c.update(&period(100 * MS, 300 * US, 666), start + 200 * MS);
    assert_eq!(limit, 333);
}

#[test]
fn the_limit_never_leaves_its_bounds() {
    let start = Instant::now();
    let mut c = Controller::new(bounds());
    for i in 1..40 {
        c.update(&period(200 * MS, 100 * US, 1_000), start + i * 100 * MS);
    }
    assert_eq!(c.limit(), 16, "down to the minimum, not below");
    for i in 40..400 {
        c.update(&period(400 * US, 100 * US, c.limit()), start + i * 100 * MS);
    }
    assert_eq!(c.limit(), 1_000, "back up to the maximum, not above");
}

#[test]
fn a_fast_limit_grows_by_its_square_root_only_while_in_use() {
    let start = Instant::now();
    let mut c = Controller::new(AdaptiveConcurrency {
        max: 10_000,
        ..bounds()
    });
    // Bring it to 400 first (up in slow start, then down).
    while c.limit() < 10_000 {
        c.update(&period(MS, 100 * US, c.limit()), start);
    }
    while c.limit() > 400 {
        c.update(&period(20 * MS, 100 * US, 9_000), start);
    }
    let at = c.limit();
    // Fast, but less than half the limit in flight: the limit is not what holds calls back.
    assert_eq!(c.update(&period(1 * MS, 100 * US, at / 2 - 1), start), at);
    // Fast and in use: + sqrt(limit).
    let grown = c.update(&period(1 * MS, 100 * US, at), start);
    assert_eq!(grown, at + (f64::from(at).sqrt().floor() as u32).max(1));
}

#[test]
fn the_unloaded_latency_is_the_fastest_call_of_the_last_thirty_seconds() {
    let start = Instant::now();
    let mut c = Controller::new(bounds());
    c.update(&period(MS, 150 * US, 1), start);
    c.update(&period(MS, 900 * US, 1), start + 10 * 1_000 * MS);
    assert_eq!(c.unloaded(start + 10 * 1_000 * MS), Some(150 * US));
    // 31 s on, the 150 µs call is forgotten: the store moved (say, to another zone).
    c.update(&period(MS, 2 * MS, 1), start + 31 * 1_000 * MS);
    assert_eq!(c.unloaded(start + 31 * 1_000 * MS), Some(900 * US));
    // And the forgotten span's slot is reused, not added to: a long run keeps ten spans.
    for second in 32..200 {
        c.update(&period(MS, 2 * MS, 1), start + second * 1_000 * MS);
    }
    assert_eq!(c.fastest.iter().flatten().count(), 10);
    assert_eq!(c.unloaded(start + 199 * 1_000 * MS), Some(2 * MS));
}
