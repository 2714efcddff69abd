//! Wall-clock time: [`UnixMillis`], a moment as milliseconds since the Unix epoch, and the
//! [`Clock`] trait it is read from, so that window arithmetic can be tested with a manual clock
//! instead of sleeping. Conversions between seconds and milliseconds happen here and nowhere
//! else. Owns nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A moment in wall-clock time, in milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(u64);

impl UnixMillis {
    /// The moment `millis` milliseconds after the epoch.
    pub const fn new(millis: u64) -> UnixMillis {
        UnixMillis(millis)
    }

    /// The start of Unix second `secs` (saturating at the end of time).
    pub const fn from_secs(secs: u64) -> UnixMillis {
        UnixMillis(secs.saturating_mul(1_000))
    }

    /// Milliseconds since the epoch.
    pub const fn millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the epoch (the Unix second this moment is in).
    pub const fn secs(self) -> u64 {
        self.0 / 1_000
    }

    /// Time from `earlier` to this moment; zero when `earlier` is later.
    pub const fn since(self, earlier: UnixMillis) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// The moment `by` after this one (saturating; below a millisecond is dropped).
    pub fn after(self, by: Duration) -> UnixMillis {
        UnixMillis(self.0.saturating_add(millis_of(by)))
    }
}

/// Whole milliseconds of `d`, saturating at `u64::MAX`.
pub fn millis_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A source of the current wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> UnixMillis;

    /// Now, in whole Unix seconds.
    fn now_secs(&self) -> u64 {
        self.now().secs()
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        // A clock before 1970 is a broken host; treat it as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(UnixMillis::default(), |d| UnixMillis(millis_of(d)))
    }
}

/// A clock that only moves when told to; shared by clones. Keeps milliseconds.
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `now` seconds.
    pub fn new(now: u64) -> Self {
        Self(Arc::new(AtomicU64::new(
            UnixMillis::from_secs(now).millis(),
        )))
    }

    /// Sets the time in seconds.
    pub fn set(&self, now: u64) {
        self.set_millis(UnixMillis::from_secs(now).millis());
    }

    /// Sets the time in milliseconds.
    pub fn set_millis(&self, now: u64) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the time forward by `secs`.
    pub fn advance(&self, secs: u64) {
        self.advance_millis(millis_of(Duration::from_secs(secs)));
    }

    /// Moves the time forward by `millis`.
    pub fn advance_millis(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixMillis {
        UnixMillis(self.0.load(Ordering::SeqCst))
    }
}
