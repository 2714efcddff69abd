//! Fixed windows aligned to the Unix epoch, as the reference (a period of N units is aligned to
//! multiples of N units since the epoch): a window of length L starts at
//! floor(now / L) × L and resets L − (now mod L) seconds from now (always 1…L).

/// One fixed window of a unit at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// Window length in seconds.
    pub(crate) period: u64,
    /// Unix second the window started.
    pub(crate) start: u64,
    /// Seconds from now until the window ends.
    pub(crate) reset_in: u64,
}

impl Window {
    /// The window of `period` seconds (at least 1) containing `now`.
    pub(crate) fn of(period: u64, now: u64) -> Window {
        let period = period.max(1);
        let into = now % period;
        Window {
            period,
            start: now - into,
            reset_in: period - into,
        }
    }

    /// The Unix second the window ends (its counters may be dropped then).
    pub(crate) fn end(&self) -> u64 {
        self.start + self.period
    }
}

#[cfg(test)]
mod tests {
    use super::Window;
    use crate::rules::Unit;
    use proptest::prelude::*;

    #[test]
    fn reference_examples() {
        assert_eq!(Window::of(1, 1234).start, 1234);
        assert_eq!(Window::of(60, 1234).start, 1200);
        assert_eq!(Window::of(3600, 1_000_000).start, 997_200);
        assert_eq!(Window::of(86_400, 1_000_000).start, 950_400);
        assert_eq!(Window::of(60, 2222).reset_in, 58);
        // The epoch was a Thursday: weeks start on Thursday 00:00 UTC.
        assert_eq!(Window::of(604_800, 604_799).start, 0);
        assert_eq!(Window::of(604_800, 604_800).start, 604_800);
    }

    proptest! {
        #[test]
        fn window_contains_now(now in 0u64..4_000_000_000, unit in 0usize..7) {
            let unit = Unit::ALL[unit];
            let w = Window::of(unit.seconds(), now);
            prop_assert!(w.start <= now && now < w.end());
            prop_assert!(w.reset_in >= 1 && w.reset_in <= unit.seconds());
            prop_assert_eq!(w.start % unit.seconds(), 0);
            prop_assert_eq!(now + w.reset_in, w.end());
        }
    }
}
