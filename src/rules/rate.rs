//! What a limit allows: its unit, its period (`unit` × `unit_multiplier`) and its algorithm.
//! Types here carry their invariants: a [`Period`] is never zero and never longer than
//! [`MAX_PERIOD_SECONDS`]; a burst exists only on a token bucket.
//!
//! Must not touch: YAML, storage, the arithmetic of the algorithms (that is the limiter's).

/// The unit of a fixed window. A month is 30 days and a year 365 days, as in the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds; windows start at 00:00 UTC.
    Day,
    /// 604,800 seconds; windows start on Thursday 00:00 UTC (epoch-aligned).
    Week,
    /// 2,592,000 seconds (30 days from the epoch, not calendar months).
    Month,
    /// 31,536,000 seconds (365 days from the epoch).
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The window length in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// Parses a unit name case-insensitively (`second` … `year`, `week`).
    pub fn parse(text: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|u| u.name().eq_ignore_ascii_case(text))
    }

    /// The upper-case name used on the wire and in dumps (`SECOND`, …).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

/// The longest period accepted: ten years of 365 days.
pub const MAX_PERIOD_SECONDS: u64 = 10 * 31_536_000;

/// A window length: `unit` × `multiplier`, never zero, at most [`MAX_PERIOD_SECONDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Period {
    unit: Unit,
    multiplier: u32,
}

impl Period {
    /// `multiplier` × `unit`, or `None` when the multiplier is 0 or the period would exceed
    /// [`MAX_PERIOD_SECONDS`].
    pub fn new(unit: Unit, multiplier: u32) -> Option<Period> {
        let seconds = unit.seconds().checked_mul(u64::from(multiplier))?;
        (multiplier > 0 && seconds <= MAX_PERIOD_SECONDS).then_some(Period { unit, multiplier })
    }

    /// One `unit` (the reference's only period).
    pub fn one(unit: Unit) -> Period {
        Period {
            unit,
            multiplier: 1,
        }
    }

    /// The unit.
    pub fn unit(self) -> Unit {
        self.unit
    }

    /// `unit_multiplier` (1 when the file does not say).
    pub fn multiplier(self) -> u32 {
        self.multiplier
    }

    /// The length in seconds (at most [`MAX_PERIOD_SECONDS`]).
    pub fn seconds(self) -> u64 {
        self.unit.seconds() * u64::from(self.multiplier)
    }

    /// The length.
    pub fn length(self) -> std::time::Duration {
        std::time::Duration::from_secs(self.seconds())
    }
}

/// How hits are counted against a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Epoch-aligned windows of one period (the reference's only algorithm).
    #[default]
    FixedWindow,
    /// The weighted two-window estimate of a sliding period.
    SlidingWindow,
    /// GCRA: `requests_per_unit + burst` tokens, refilled continuously over the period.
    TokenBucket {
        /// Tokens beyond `requests_per_unit` the bucket holds.
        burst: u32,
    },
    /// `requests_per_unit` requests in flight; the period is how long an unreleased count lives.
    Concurrency,
}

impl Algorithm {
    /// The name used in rule files (`fixed_window`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket { .. } => "token_bucket",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Every name a rule file may use.
    pub const NAMES: [&'static str; 4] = [
        "fixed_window",
        "sliding_window",
        "token_bucket",
        "concurrency",
    ];
}

/// A counted limit: so many hits per period, counted by an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerUnit {
    /// Allowed hits per period (in flight, for concurrency); 0 blocks everything.
    pub requests_per_unit: u32,
    /// The period.
    pub period: Period,
    /// How hits are counted.
    pub algorithm: Algorithm,
}

impl PerUnit {
    /// A fixed window of one unit (the reference's limits and request overrides).
    pub fn fixed(requests_per_unit: u32, unit: Unit) -> PerUnit {
        PerUnit {
            requests_per_unit,
            period: Period::one(unit),
            algorithm: Algorithm::FixedWindow,
        }
    }

    /// The unit (reported as `current_limit.unit`).
    pub fn unit(&self) -> Unit {
        self.period.unit()
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_PERIOD_SECONDS, Period, Unit};

    #[test]
    fn periods_are_bounded() {
        assert_eq!(Period::new(Unit::Minute, 5).map(Period::seconds), Some(300));
        assert_eq!(Period::new(Unit::Second, 0), None);
        assert_eq!(
            Period::new(Unit::Year, 10).map(Period::seconds),
            Some(MAX_PERIOD_SECONDS)
        );
        assert_eq!(Period::new(Unit::Year, 11), None);
        assert_eq!(Period::new(Unit::Second, u32::MAX), None);
    }
}
