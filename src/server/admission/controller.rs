//! The limit's arithmetic, over one period's measurements at a time: no clock, no atomics, so
//! its tests state exactly what a period does to the limit.

use std::time::{Duration, Instant};

use super::BASELINE_SPAN;
use crate::settings::AdaptiveConcurrency;

/// How many spans the baseline's memory is cut into (the oldest is forgotten whole).
const SPANS: usize = 10;

/// What one period measured of the admitted calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::server) struct Measured {
    /// Calls that finished in the period.
    pub calls: u64,
    /// Their mean latency, admission to answer.
    pub mean: Duration,
    /// The fastest of them (a call dropped unanswered counts with the time it had taken, a
    /// lower bound of its latency); `None` when none finished.
    pub fastest: Option<Duration>,
    /// The most calls in flight at once during the period.
    pub peak_in_flight: u32,
}

/// The adaptive limit: its value, bounds and the memory of unloaded calls.
#[derive(Debug)]
pub(in crate::server) struct Controller {
    limit: u32,
    /// Until latency first passes the target, the limit doubles per period (and a period is
    /// as many calls as the limit: a round of calls, as in TCP's slow start), so a fresh
    /// replica taking a full share of traffic admits it within a few rounds without being
    /// flooded at once.
    slow_start: bool,
    bounds: AdaptiveConcurrency,
    /// The fastest call of each recent span: (when the span began, its fastest call).
    fastest: [Option<(Instant, Duration)>; SPANS],
}

impl Controller {
    /// A limit that starts at its minimum, in slow start.
    pub(in crate::server) fn new(bounds: AdaptiveConcurrency) -> Controller {
        Controller {
            limit: bounds.min,
            slow_start: true,
            bounds,
            fastest: [None; SPANS],
        }
    }

    /// The current limit.
    pub(in crate::server) fn limit(&self) -> u32 {
        self.limit
    }

    /// During slow start, a period ends after this many calls (else after [`super::PERIOD`]).
    pub(in crate::server) fn round(&self) -> Option<u64> {
        self.slow_start.then_some(u64::from(self.limit))
    }

    /// The latency of an unloaded call: the fastest call remembered at `now`.
    pub(in crate::server) fn unloaded(&self, now: Instant) -> Option<Duration> {
        self.fastest
            .iter()
            .flatten()
            .filter(|(began, _)| now.saturating_duration_since(*began) < BASELINE_SPAN)
            .map(|(_, fastest)| *fastest)
            .min()
    }

    /// The limit after `period`, which ended at `now`.
    pub(in crate::server) fn update(&mut self, period: &Measured, now: Instant) -> u32 {
        if let Some(fastest) = period.fastest {
            self.remember(fastest, now);
        }
        // Nothing measured, or nothing yet to measure against.
        let (true, Some(unloaded)) = (period.calls > 0, self.unloaded(now)) else {
            return self.limit;
        };
        let target = unloaded + self.bounds.tolerance;
        let latency = period.mean;
        let limit = f64::from(self.limit);
        let next = if latency > target {
            self.slow_start = false;
            // At most halved per period: the latency lags the limit by a period.
            limit * (target.as_secs_f64() / latency.as_secs_f64()).max(0.5)
        } else if u64::from(period.peak_in_flight) * 2 >= u64::from(self.limit) {
            // In use and fast: room for more.
            match self.slow_start {
                true => limit * 2.0,
                false => limit + limit.sqrt().max(1.0),
            }
        } else {
            limit
        };
        self.limit = clamp(next, self.bounds.min, self.bounds.max);
        self.limit
    }

    /// Keeps `fastest` in the span that holds `now`, starting a new span (over the oldest)
    /// every `BASELINE_SPAN / SPANS`.
    fn remember(&mut self, fastest: Duration, now: Instant) {
        let span = BASELINE_SPAN / u32::try_from(SPANS).unwrap_or(u32::MAX);
        let newest = self
            .fastest
            .iter_mut()
            .flatten()
            .max_by_key(|(began, _)| *began);
        match newest {
            Some((began, kept)) if now.saturating_duration_since(*began) < span => {
                *kept = (*kept).min(fastest);
            }
            _ => {
                let slot = self
                    .fastest
                    .iter_mut()
                    .min_by_key(|slot| slot.map(|(began, _)| began));
                if let Some(slot) = slot {
                    *slot = Some((now, fastest));
                }
            }
        }
    }
}

/// `value` rounded down into `min..=max`.
fn clamp(value: f64, min: u32, max: u32) -> u32 {
    if value.is_nan() || value <= f64::from(min) {
        min
    } else if value >= f64::from(max) {
        max
    } else {
        // In range, so the conversion is exact up to the fraction dropped.
        value.floor() as u32
    }
}

#[cfg(test)]
mod tests;
