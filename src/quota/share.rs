//! Fair share: one bucket's assignment for one data plane from the global count of its window
//! and the demand seen across every data plane. Pure arithmetic, no clock and no store: the
//! caller passes the moment and the counts, so a simulation can drive it deterministically.
//!
//! The rule: `remaining = limit − used` (used = requests every data plane reported allowed in
//! the window). Spent → deny all until the window ends. Otherwise the stream is entitled to
//! `limit × share` of the window, where `share` is its part of the recent demand (allowed +
//! denied; the current window plus the previous one weighted by how much of it a sliding span
//! still covers), never below `min_share`; what it has not yet used of that (at most
//! `remaining`) is paced over the time left as a token bucket. Summed over the streams these
//! entitlements are `remaining` (the shares sum to one), so pacing them spends the window's
//! budget; and a stream that got less than its part so far (another one's bucket started full,
//! its own reports came late) is made up for in the rest of the window instead of losing it.
//! The capacity is one second of the rate (at least [`MIN_BURST`] tokens, at most what remains),
//! so a fresh bucket in Envoy, which starts full, admits at most that much at once.

use super::Assignment;

/// Token-bucket refill period sent to Envoy (whole seconds: Envoy truncates sub-second parts).
/// Envoy refills continuously at `tokens_per_fill / fill_interval`; a long interval only buys
/// precision (rates in steps of 1/60 request per second).
pub const FILL_INTERVAL_SECONDS: u32 = 60;

/// The smallest token-bucket capacity sent (unless less than that remains in the window).
pub const MIN_BURST: u32 = 2;

/// A new token-bucket rate up to this fraction lower than the one a stream holds keeps the one
/// it holds: Envoy replaces (and refills) a bucket whose parameters change, so small cuts cost
/// more than they fix. A higher rate (the stream is behind its part) always replaces it.
pub const HYSTERESIS: f64 = 0.1;

/// What the share of one bucket for one stream depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareInput {
    /// The limit per window.
    pub limit: u64,
    /// Allowed requests counted in the window so far (every stream, every replica).
    pub used: u64,
    /// Window length (ms).
    pub period_ms: u64,
    /// How far into the window now is (ms, `< period_ms`).
    pub elapsed_ms: u64,
    /// This stream's demand in the current and the previous window.
    pub own_demand: (u64, u64),
    /// Every stream's demand in the current and the previous window.
    pub all_demand: (u64, u64),
    /// Requests this stream reported allowed in the current window.
    pub own_allowed: u64,
    /// The smallest share a stream gets (0..=1).
    pub min_share: f64,
    /// How long a token-bucket assignment lives (whole seconds, at least 1).
    pub ttl_seconds: u64,
}

impl ShareInput {
    /// This stream's part of recent demand, at least `min_share`, at most 1.
    pub fn share(&self) -> f64 {
        let left = self.period_ms.saturating_sub(self.elapsed_ms) as f64;
        let weight = left / self.period_ms.max(1) as f64;
        let own = self.own_demand.0 as f64 + self.own_demand.1 as f64 * weight;
        let all = self.all_demand.0 as f64 + self.all_demand.1 as f64 * weight;
        let share = if all > 0.0 { own / all } else { 1.0 };
        share.max(self.min_share).min(1.0)
    }

    /// The assignment; `held` is the one the stream holds now, kept when a new token bucket
    /// would differ from it by less than [`HYSTERESIS`].
    pub fn assign(&self, held: Option<&Assignment>) -> Assignment {
        let left_ms = self.period_ms.saturating_sub(self.elapsed_ms).max(1);
        let remaining = self.limit.saturating_sub(self.used);
        if remaining == 0 {
            return Assignment::DenyAll {
                ttl_seconds: left_ms.div_ceil(1_000).max(1),
            };
        }
        // Pace what is left of this stream's part over the time left, never faster than all of
        // it in a second.
        let fair = (self.limit as f64 * self.share() - self.own_allowed as f64)
            .clamp(0.0, remaining as f64);
        let per_second = fair * 1_000.0 / left_ms.max(1_000) as f64;
        let fill = (per_second * f64::from(FILL_INTERVAL_SECONDS)).round();
        let tokens_per_fill = fill.clamp(1.0, f64::from(u32::MAX)) as u32;
        // One second of the rate, and at least two tokens: in a bucket of one, a token that
        // completes between two requests meets a full bucket and the refill stops until the
        // next request takes it (at 4 requests a second, about one token in twenty is lost:
        // the measured shortfall of a small Envoy before this).
        let burst = per_second
            .ceil()
            .max(f64::from(MIN_BURST))
            .clamp(1.0, remaining.min(u64::from(u32::MAX)) as f64);
        let fresh = Assignment::TokenBucket {
            max_tokens: burst as u32,
            tokens_per_fill,
            fill_interval_seconds: FILL_INTERVAL_SECONDS,
            ttl_seconds: self.ttl_seconds.max(1),
        };
        match held {
            Some(
                kept @ Assignment::TokenBucket {
                    tokens_per_fill: old,
                    ..
                },
            ) if close(*old, tokens_per_fill) => *kept,
            _ => fresh,
        }
    }
}

/// A new rate is close enough to keep the old bucket when it is not higher and at most
/// [`HYSTERESIS`] lower: a stream owed more (behind its part) gets it at once, while one a
/// little ahead keeps its bucket and its own count slows it at a later report.
fn close(old: u32, new: u32) -> bool {
    new <= old && f64::from(old - new) <= f64::from(old) * HYSTERESIS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> ShareInput {
        ShareInput {
            limit: 120,
            used: 0,
            period_ms: 60_000,
            elapsed_ms: 0,
            own_demand: (0, 0),
            all_demand: (0, 0),
            own_allowed: 0,
            min_share: 0.05,
            ttl_seconds: 10,
        }
    }

    #[test]
    fn a_spent_window_denies_until_it_ends() {
        let i = ShareInput {
            used: 130,
            elapsed_ms: 59_001,
            ..input()
        };
        assert_eq!(i.assign(None), Assignment::DenyAll { ttl_seconds: 1 });
    }

    #[test]
    fn the_rate_is_what_is_left_of_the_streams_part_paced_over_the_time_left() {
        // 80 % of the demand: 96 of the window's 120, 48 of them used; 48 left over 30 s =
        // 1.6/s = 96 per minute.
        let i = ShareInput {
            used: 60,
            elapsed_ms: 30_000,
            own_demand: (80, 0),
            all_demand: (100, 0),
            own_allowed: 48,
            ..input()
        };
        assert_eq!(
            i.assign(None),
            Assignment::TokenBucket {
                max_tokens: 2,
                tokens_per_fill: 96,
                fill_interval_seconds: 60,
                ttl_seconds: 10
            }
        );
    }

    #[test]
    fn a_stream_behind_its_part_catches_up_and_one_ahead_slows_down() {
        // Half the demand each, 60 of 120 used at half time: the one that got 20 is owed 40
        // (80 a minute), the one that got 40 is owed 20 (40 a minute).
        let behind = ShareInput {
            used: 60,
            elapsed_ms: 30_000,
            own_demand: (50, 0),
            all_demand: (100, 0),
            own_allowed: 20,
            ..input()
        };
        let ahead = ShareInput {
            own_allowed: 40,
            ..behind
        };
        let rate = |i: ShareInput| match i.assign(None) {
            Assignment::TokenBucket {
                tokens_per_fill, ..
            } => tokens_per_fill,
            other => panic!("a token bucket expected, got {other:?}"),
        };
        assert_eq!((rate(behind), rate(ahead)), (80, 40));
        // Owed more than is left: never more than what remains of the window's budget.
        let late = ShareInput {
            used: 110,
            own_allowed: 0,
            ..behind
        };
        assert_eq!(rate(late), 20);
        // Past its part: the slowest rate Envoy can hold (one a minute), not a denial.
        let past = ShareInput {
            own_allowed: 70,
            ..behind
        };
        assert_eq!(rate(past), 1);
    }

    #[test]
    fn a_quiet_stream_gets_the_floor() {
        let i = ShareInput {
            own_demand: (0, 0),
            all_demand: (1_000, 0),
            ..input()
        };
        assert!((i.share() - 0.05).abs() < 1e-9);
    }

    #[test]
    fn the_previous_window_counts_by_how_much_of_it_the_span_still_covers() {
        // A quarter into the window: the previous window weighs 3/4.
        let i = ShareInput {
            elapsed_ms: 15_000,
            own_demand: (0, 40),
            all_demand: (10, 40),
            ..input()
        };
        assert!((i.share() - 30.0 / 40.0).abs() < 1e-9);
    }

    #[test]
    fn small_decreases_keep_the_bucket_envoy_holds_and_increases_replace_it() {
        let held = Assignment::TokenBucket {
            max_tokens: 2,
            tokens_per_fill: 100,
            fill_interval_seconds: 60,
            ttl_seconds: 10,
        };
        let near = ShareInput {
            elapsed_ms: 1_000,
            ..input()
        };
        // 120 over 59 s ≈ 122 per minute: within 10 % of 100? No (22 %): replaced.
        assert_ne!(near.assign(Some(&held)), held);
        let closer = ShareInput {
            used: 20,
            elapsed_ms: 0,
            ..input()
        };
        // 100 per minute: kept.
        assert_eq!(closer.assign(Some(&held)), held);
        // 5 % lower: kept (the stream's own count slows it later); 5 % higher: the stream is
        // owed more, replaced at once.
        let lower = Assignment::TokenBucket {
            max_tokens: 2,
            tokens_per_fill: 105,
            fill_interval_seconds: 60,
            ttl_seconds: 10,
        };
        assert_eq!(closer.assign(Some(&lower)), lower);
        let higher = Assignment::TokenBucket {
            max_tokens: 2,
            tokens_per_fill: 95,
            fill_interval_seconds: 60,
            ttl_seconds: 10,
        };
        assert_ne!(closer.assign(Some(&higher)), higher);
    }
}
