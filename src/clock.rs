//! Wall-clock time in Unix seconds and milliseconds, behind a trait so that window arithmetic can be tested
//! with a manual clock instead of sleeping. Owns nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in Unix seconds (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;

    /// Whole seconds since the Unix epoch.
    fn now(&self) -> u64 {
        self.now_millis() / 1000
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        // A clock before 1970 is a broken host; treat it as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; shared by clones. Keeps milliseconds.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `now` seconds.
    pub fn new(now: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now * 1000)))
    }

    /// Sets the time in seconds.
    pub fn set(&self, now: u64) {
        self.set_millis(now * 1000);
    }

    /// Sets the time in milliseconds.
    pub fn set_millis(&self, now: u64) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `secs`.
    pub fn advance(&self, secs: u64) {
        self.advance_millis(secs * 1000);
    }

    /// Moves the time forward by `millis`.
    pub fn advance_millis(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
