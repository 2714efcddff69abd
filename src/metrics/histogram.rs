//! A fixed-bucket latency histogram of atomic counters (Prometheus `_bucket`/`_sum`/`_count`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds in seconds: 50 µs … 5 s.
pub(crate) const BOUNDS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0,
    5.0,
];

/// Latency histogram.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    buckets: [AtomicU64; BOUNDS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub(crate) fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far and their sum in nanoseconds.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (
            self.count.load(Ordering::Relaxed),
            self.sum_nanos.load(Ordering::Relaxed),
        )
    }

    /// Cumulative bucket counts, total count and sum in seconds.
    pub(crate) fn snapshot(&self) -> (Vec<u64>, u64, f64) {
        let mut cumulative = 0;
        let buckets = self
            .buckets
            .iter()
            .map(|b| {
                cumulative += b.load(Ordering::Relaxed);
                cumulative
            })
            .collect();
        let sum =
            std::time::Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)).as_secs_f64();
        (buckets, self.count.load(Ordering::Relaxed), sum)
    }
}
