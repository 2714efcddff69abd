//! The pauses between attempts to reach something that failed, for every retry loop in the
//! service (a remote store's circuit breaker, the xDS client's reconnection): an exponential
//! [`Schedule`] (a first pause, multiplied after each further failure, up to a ceiling) and a
//! random [`spread`] of each pause, so that replicas that lost a peer together do not retry it
//! in step. The random draw is fastrand's per-thread generator (seeded once per thread; no
//! lock, no system call per draw).
//!
//! Must not touch: what a failure is, when to retry, clocks (callers keep their own state).

use std::time::Duration;

/// Exponential pauses: `first` after one failure, `factor` times longer after each further
/// one, never longer than `max`. Constructed only through [`Schedule::new`], which keeps
/// `first <= max` and `factor >= 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    first: Duration,
    max: Duration,
    factor: f64,
}

impl Schedule {
    /// A schedule from `first` to `max`, growing by `factor`; a `max` below `first` is raised
    /// to it, and a factor below 1 (or not a number) is taken as 1 (no growth).
    pub const fn new(first: Duration, max: Duration, factor: f64) -> Schedule {
        let factor = if factor >= 1.0 { factor } else { 1.0 };
        let max = if max.as_nanos() < first.as_nanos() {
            first
        } else {
            max
        };
        Schedule { first, max, factor }
    }

    /// The pause after `failures` failures in a row (the first one for 0 or 1).
    pub fn after(&self, failures: u32) -> Duration {
        let growths = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let scale = self.factor.powi(growths);
        if !scale.is_finite() || self.first.as_secs_f64() * scale >= self.max.as_secs_f64() {
            return self.max;
        }
        self.first.mul_f64(scale).min(self.max)
    }
}

/// `pause` moved by a uniform random fraction of itself, up to `fraction` either way
/// (`fraction` is clamped to `0..=1`, so a pause never goes below zero).
pub fn spread(pause: Duration, fraction: f64) -> Duration {
    let fraction = fraction.clamp(0.0, 1.0);
    if fraction == 0.0 {
        return pause;
    }
    let unit = fastrand::f64() * 2.0 - 1.0;
    pause.mul_f64(1.0 + unit * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn pauses_grow_by_the_factor_up_to_the_ceiling() {
        let doubling = Schedule::new(MS(50), MS(1_000), 2.0);
        let pauses: Vec<Duration> = (0..8).map(|n| doubling.after(n)).collect();
        assert_eq!(
            pauses,
            [50, 50, 100, 200, 400, 800, 1_000, 1_000].map(MS),
            "0 and 1 failures both give the first pause"
        );
        assert_eq!(doubling.after(u32::MAX), MS(1_000), "no overflow");
        let grpc = Schedule::new(MS(10_000), MS(60_000), 1.6);
        let pauses: Vec<u128> = (1..7).map(|n| grpc.after(n).as_millis()).collect();
        assert_eq!(pauses, [10_000, 16_000, 25_600, 40_960, 60_000, 60_000]);
    }

    #[test]
    fn a_schedule_keeps_its_invariants() {
        let flat = Schedule::new(MS(200), MS(100), 0.5);
        assert_eq!(flat.after(1), MS(200), "max raised to first");
        assert_eq!(flat.after(9), MS(200), "a factor below 1 does not shrink");
        assert_eq!(Schedule::new(MS(5), MS(9), f64::NAN).after(4), MS(5));
    }

    #[test]
    fn spread_stays_within_its_fraction_and_varies() {
        let draws: std::collections::BTreeSet<Duration> =
            (0..500).map(|_| spread(MS(1_000), 0.25)).collect();
        let (low, high) = (draws.first().copied(), draws.last().copied());
        assert!(
            low >= Some(MS(750)) && high <= Some(MS(1_250)),
            "{low:?}..{high:?}"
        );
        assert!(draws.len() > 100, "spread: {} distinct of 500", draws.len());
        assert_eq!(spread(MS(1_000), 0.0), MS(1_000));
        assert!(spread(MS(1_000), 7.0) <= MS(2_000), "fraction clamped to 1");
    }
}
