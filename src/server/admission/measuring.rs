//! The period being measured, filled lock-free by every admitted call as it finishes: when it
//! began, how many calls finished, their summed and fastest latency, the most in flight. The
//! finishing call that closes it takes its [`Measured`] for the controller. Time is tokio's, so
//! a test on a paused runtime moves it.
//!
//! Must not touch: the limit, the places, the controller's arithmetic.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::PERIOD;
use super::controller::Measured;

/// The current period's measurements (latencies in µs, times in µs since `epoch`).
#[derive(Debug)]
pub(super) struct Measuring {
    start_us: AtomicU64,
    calls: AtomicU64,
    sum_us: AtomicU64,
    fastest_us: AtomicU64,
    peak: AtomicU32,
    epoch: Instant,
}

impl Measuring {
    /// A period that begins now.
    pub(super) fn new() -> Measuring {
        Measuring {
            start_us: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            fastest_us: AtomicU64::new(u64::MAX),
            peak: AtomicU32::new(0),
            epoch: Instant::now(),
        }
    }

    /// A call entered, making `in_flight`.
    pub(super) fn entered(&self, in_flight: u32) {
        self.peak.fetch_max(in_flight, Ordering::Relaxed);
    }

    /// A call admitted at `admitted` finished at `now`. True for the one caller whose call
    /// closes the period: [`PERIOD`] has passed, or `round` calls have finished in it.
    pub(super) fn finished(&self, admitted: Instant, now: Instant, round: u64) -> bool {
        let us = micros(now.saturating_duration_since(admitted));
        let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.fastest_us.fetch_min(us, Ordering::Relaxed);
        let now_us = micros(now.saturating_duration_since(self.epoch));
        let start = self.start_us.load(Ordering::Relaxed);
        let over = now_us.saturating_sub(start) >= micros(PERIOD) || calls >= round;
        over && self
            .start_us
            .compare_exchange(start, now_us, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The closed period's measurements; the next one starts with `in_flight` calls.
    pub(super) fn take(&self, in_flight: u32) -> Measured {
        let calls = self.calls.swap(0, Ordering::Relaxed);
        let sum = self.sum_us.swap(0, Ordering::Relaxed);
        let fastest = self.fastest_us.swap(u64::MAX, Ordering::Relaxed);
        let peak = self.peak.swap(in_flight, Ordering::Relaxed);
        Measured {
            calls,
            mean: Duration::from_micros(sum.checked_div(calls).unwrap_or(0)),
            fastest: (fastest != u64::MAX).then(|| Duration::from_micros(fastest)),
            peak_in_flight: peak,
        }
    }
}

/// Whole microseconds of `d`, saturating.
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// On a paused clock: calls of known latency make the period's mean, fastest and peak; the
    /// period closes at [`PERIOD`] or at a round of calls, for one caller only.
    #[tokio::test(start_paused = true)]
    async fn a_period_measures_its_calls_and_closes_once() {
        let m = Measuring::new();
        let t0 = Instant::now();
        m.entered(3);
        m.entered(2);
        tokio::time::advance(MS(10)).await;
        assert!(!m.finished(t0, Instant::now(), u64::MAX), "10 ms < PERIOD");
        tokio::time::advance(MS(20)).await;
        let t1 = Instant::now();
        assert!(!m.finished(t0, t1, u64::MAX));
        tokio::time::advance(PERIOD).await;
        let end = Instant::now();
        assert!(
            m.finished(t1, end, u64::MAX),
            "PERIOD passed: this call closes it"
        );
        assert!(!m.finished(t1, end, u64::MAX), "and no other");
        let period = m.take(1);
        // Latencies 10, 30, 100 and 100 ms.
        assert_eq!(period.calls, 4);
        assert_eq!(period.mean, MS(60));
        assert_eq!(period.fastest, Some(MS(10)));
        assert_eq!(period.peak_in_flight, 3);
        let next = m.take(0);
        assert_eq!(
            (next.calls, next.fastest, next.peak_in_flight),
            (0, None, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn in_slow_start_a_round_of_calls_closes_the_period() {
        let m = Measuring::new();
        let at = Instant::now();
        assert!(!m.finished(at, at, 2));
        assert!(m.finished(at, at, 2), "the second of a round of 2");
    }
}
