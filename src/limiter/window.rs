//! Fixed windows aligned to the Unix epoch, as the reference (a period of N units is aligned to
//! multiples of N units since the epoch): a window of length L starts at
//! floor(now / L) × L and resets L − (now mod L) seconds from now (always 1…L).

use std::time::Duration;

use crate::clock::UnixMillis;

/// One fixed window of a period at a moment. Built only by [`Window::of`] and [`Window::at`],
/// so its start is always a multiple of its period (at least 1 s) and the moment it was taken
/// at lies inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Window length in seconds.
    period: u64,
    /// Unix second the window started.
    start: u64,
    /// Seconds from the moment it was taken at until it ends.
    reset_in: u64,
}

impl Window {
    /// The window of `period` seconds (at least 1) containing Unix second `now`.
    pub(crate) fn of(period: u64, now: u64) -> Window {
        let period = period.max(1);
        let into = now % period;
        Window {
            period,
            start: now - into,
            reset_in: period - into,
        }
    }

    /// The window of `period` seconds (at least 1) containing the moment `now`.
    pub(crate) fn at(period: u64, now: UnixMillis) -> Window {
        Window::of(period, now.secs())
    }

    /// Its length in seconds.
    pub(crate) fn period(&self) -> u64 {
        self.period
    }

    /// Its length.
    pub(crate) fn length(&self) -> Duration {
        Duration::from_secs(self.period)
    }

    /// The Unix second it started.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// The moment it started.
    pub(crate) fn started(&self) -> UnixMillis {
        UnixMillis::from_secs(self.start)
    }

    /// Time from the moment it was taken at until it ends, in whole seconds (1 s to its
    /// period).
    pub(crate) fn reset_in(&self) -> Duration {
        Duration::from_secs(self.reset_in)
    }

    /// The Unix second the window ends (its counters may be dropped then).
    pub(crate) fn end(&self) -> u64 {
        self.start + self.period
    }
}

#[cfg(test)]
mod tests {
    use super::{Duration, Window};
    use crate::rules::Unit;
    use proptest::prelude::*;

    #[test]
    fn reference_examples() {
        assert_eq!(Window::of(1, 1234).start(), 1234);
        assert_eq!(Window::of(60, 1234).start(), 1200);
        assert_eq!(Window::of(3600, 1_000_000).start(), 997_200);
        assert_eq!(Window::of(86_400, 1_000_000).start(), 950_400);
        assert_eq!(Window::of(60, 2222).reset_in(), Duration::from_secs(58));
        // The epoch was a Thursday: weeks start on Thursday 00:00 UTC.
        assert_eq!(Window::of(604_800, 604_799).start(), 0);
        assert_eq!(Window::of(604_800, 604_800).start(), 604_800);
    }

    proptest! {
        #[test]
        fn window_contains_now(now in 0u64..4_000_000_000, unit in 0usize..7) {
            let unit = Unit::ALL[unit];
            let w = Window::of(unit.seconds(), now);
            prop_assert!(w.start() <= now && now < w.end());
            prop_assert!(w.reset_in() >= Duration::from_secs(1) && w.reset_in() <= w.length());
            prop_assert_eq!(w.start() % unit.seconds(), 0);
            prop_assert_eq!(now + w.reset_in().as_secs(), w.end());
        }
    }
}
