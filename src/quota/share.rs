//! Fair share: one bucket's assignment for one data plane from the global count of its window
//! and the demand seen across every data plane. Pure arithmetic, no clock and no store: the
//! caller passes the moment and the counts, so a simulation can drive it deterministically.
//!
//! The rule: `remaining = limit − used` (used = requests every data plane reported allowed in
//! the window). Spent → deny all until the window ends. Otherwise the stream is entitled to
//! `limit × share` of the window, where `share` is its part of the recent demand (allowed +
//! denied; the current window plus the previous one weighted by how much of it a sliding span
//! still covers), never below `min_share`. The other streams' count lags theirs by up to a
//! report interval while this stream's is fresh, so their demand is taken as at least this
//! stream's own times the ratio of theirs to its last seen, up to one report's worth above the
//! count: the stream that reports first does not see itself as more of the demand than it
//! is (in a bucket's first window, nearly all of it); others it has not seen before count as
//! busy as itself until they have reported. What the stream has not yet used of its part (at
//! most `remaining`) is paced over the time left as a token bucket. Summed over the streams these
//! entitlements are `remaining` (the shares sum to one), so pacing them spends the window's
//! budget; and a stream that got less than its part so far (another one's bucket started full,
//! its own reports came late) is made up for in the rest of the window instead of losing it.
//! The capacity is one second of the rate (at least [`MIN_BURST`] tokens, at most what remains),
//! so a fresh bucket in Envoy, which starts full, admits at most that much at once; those
//! tokens are part of what is left, and the rate paces the rest. A bucket that replaces a token
//! bucket starts only as full as the one it replaces (Envoy carries the fill ratio over: a
//! drained bucket's successor starts empty), so its rate paces all of what is left.

use std::time::Duration;

use super::Assignment;

/// Token-bucket refill period sent to Envoy (whole seconds: Envoy truncates sub-second parts).
/// Envoy refills continuously at `tokens_per_fill / fill_interval`; a long interval only buys
/// precision (rates in steps of 1/60 request per second).
pub const FILL_INTERVAL_SECONDS: u32 = 60;
/// [`FILL_INTERVAL_SECONDS`] as a duration.
pub(crate) const FILL_INTERVAL: Duration = Duration::from_secs(FILL_INTERVAL_SECONDS as u64);

/// The smallest token-bucket capacity sent (unless less than that remains in the window).
pub const MIN_BURST: u32 = 2;

/// The held token bucket is kept while it would end the window less than this many tokens
/// ahead of the stream's part (or half as many behind): Envoy carries a replaced bucket's fill
/// over only in whole tokens (a drained bucket's successor starts empty), so every replacement
/// costs a slow stream the part of a token it was filling.
pub const KEEP_WITHIN_TOKENS: f64 = 1.0;

/// What a stream loses on average when its token bucket is replaced: the part of a token the
/// old one was filling.
const LOST_IN_REPLACEMENT: f64 = 0.5;

/// The fastest pace: all that is left, in a second.
const SECOND: Duration = Duration::from_secs(1);

/// `ms` in whole seconds, rounded up, at least 1 (an assignment's TTL).
fn whole_seconds_up(ms: u64) -> u64 {
    let d = Duration::from_millis(ms);
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// Demand (allowed and denied requests) in the current window and in the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// In the current window.
    pub now: u64,
    /// In the window before it.
    pub before: u64,
}

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
    pub own_demand: Demand,
    /// Every stream's demand in the current and the previous window.
    pub all_demand: Demand,
    /// Requests this stream reported allowed in the current window.
    pub own_allowed: u64,
    /// This stream's demand in its latest report, in the current window: the most the
    /// estimate of the others' unreported demand adds (times [`ShareInput::others_per_own`]).
    pub last_demand: u64,
    /// The other streams' demand per request of this stream's as this stream last saw it
    /// (0 when it has not): what their unreported demand is estimated from.
    pub others_per_own: f64,
    /// This stream's demand in its last report, per [`FILL_INTERVAL_SECONDS`] (0 when not
    /// known): a held rate above it is not raised (the stream does not use what it has).
    pub own_pace: f64,
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
        let own = self.own_demand.now as f64 + self.own_demand.before as f64 * weight;
        let all =
            self.own_demand.now as f64 + self.others_now() + self.all_demand.before as f64 * weight;
        let share = if all > 0.0 { own / all } else { 1.0 };
        share.max(self.min_share).min(1.0)
    }

    /// The other streams' demand in the current window. Their count lags: each is as of their
    /// latest reports, which may be up to a report interval old, while this stream's is as of
    /// now. So it is taken as at least this stream's own scaled by the ratio of theirs to its
    /// that it last saw (in the previous window, or at its previous report), but never more
    /// than one of its report intervals' worth above the count (its latest report's demand
    /// times that ratio): others that have gone, or slowed, weigh for one interval at most.
    /// Others it had not seen at all (no ratio yet: it reported first, or its stream is new)
    /// are taken to have asked as much as it did in its latest report: their count is their
    /// first request, and taken as it stands it let two Envoys of a bucket that appeared late
    /// in a window each pace the whole budget (159 of 120 admitted in the simulation).
    fn others_now(&self) -> f64 {
        let counted = self.all_demand.now.saturating_sub(self.own_demand.now) as f64;
        if self.others_per_own == 0.0 && counted > 0.0 {
            // Others it has not seen before: their pace is unknown, taken as its own over
            // one report.
            return counted + self.last_demand as f64;
        }
        let expected = self.own_demand.now as f64 * self.others_per_own;
        let at_most = self.last_demand as f64 * self.others_per_own;
        let unreported = (expected - counted).max(0.0).min(at_most);
        counted + unreported
    }

    /// The ratio of the other streams' demand to this stream's as it stands now (as estimated
    /// in the current window, else as counted in the previous one; 0 with no demand of its
    /// own): what the stream remembers for its next report.
    pub fn others_per_own_now(&self) -> f64 {
        let Demand {
            now: own_now,
            before: own_before,
        } = self.own_demand;
        if own_now > 0 {
            return self.others_now() / own_now as f64;
        }
        if own_before > 0 {
            return self.all_demand.before.saturating_sub(own_before) as f64 / own_before as f64;
        }
        0.0
    }

    /// The assignment; `held` is the one the stream holds now, kept while it would end the
    /// window less than [`KEEP_WITHIN_TOKENS`] ahead of the stream's part or less than half
    /// that behind.
    pub fn assign(&self, held: Option<&Assignment>) -> Assignment {
        let left_ms = self.period_ms.saturating_sub(self.elapsed_ms).max(1);
        let remaining = self.limit.saturating_sub(self.used);
        let until_window_end = Assignment::DenyAll {
            ttl_seconds: whole_seconds_up(left_ms),
        };
        if remaining == 0 {
            return until_window_end;
        }
        // Pace what is left of this stream's part over the time left, never faster than all of
        // it in a second. A stream that has had its part is denied until its next report or
        // the window's end (whichever comes first re-assigns it); its next bucket then starts
        // full.
        let fair = (self.limit as f64 * self.share() - self.own_allowed as f64)
            .clamp(0.0, remaining as f64);
        if fair < 1.0 {
            return until_window_end;
        }
        let pace = |tokens: f64| {
            let per_second = tokens / Duration::from_millis(left_ms).max(SECOND).as_secs_f64();
            let fill = (per_second * f64::from(FILL_INTERVAL_SECONDS)).round();
            (per_second, fill.clamp(1.0, f64::from(u32::MAX)) as u32)
        };
        let (per_second, new) = pace(fair);
        // The bucket it holds goes on at its own count; keep it when the rate is close.
        if let Some(
            kept @ Assignment::TokenBucket {
                tokens_per_fill, ..
            },
        ) = held
        {
            let unused = self.own_pace > 0.0 && f64::from(*tokens_per_fill) >= self.own_pace;
            if (new > *tokens_per_fill && unused) || close(*tokens_per_fill, new, left_ms) {
                return *kept;
            }
        }
        // One second of the rate, and at least two tokens: in a bucket of one, a token that
        // completes between two requests meets a full bucket and the refill stops until the
        // next request takes it (at 4 requests a second, about one token in twenty is lost:
        // the measured shortfall of a small Envoy before this).
        let burst = per_second
            .ceil()
            .max(f64::from(MIN_BURST))
            .clamp(1.0, remaining.min(u64::from(u32::MAX)) as f64);
        // A bucket that replaces none starts full: the rate paces what is left after those
        // tokens. One that replaces a token bucket starts as full as that one was in whole
        // tokens (Envoy 1.40: a drained bucket's successor starts empty, measured): the rate
        // paces all of it, and the part of a token the old bucket was filling (half of one, on
        // average), which is lost.
        let replaces_a_bucket = matches!(held, Some(Assignment::TokenBucket { .. }));
        let (_, tokens_per_fill) = pace(if replaces_a_bucket {
            fair + LOST_IN_REPLACEMENT
        } else {
            (fair - burst).max(0.0)
        });
        Assignment::TokenBucket {
            max_tokens: burst as u32,
            tokens_per_fill,
            fill_interval_seconds: FILL_INTERVAL_SECONDS,
            ttl_seconds: self.ttl_seconds.max(1),
        }
    }
}

/// A held rate is close enough to the new one when, over the time left, it would give less
/// than [`KEEP_WITHIN_TOKENS`] more than the new one, or less than half that fewer: a stream a
/// little ahead keeps its bucket (its own count slows it at a later report), one behind gets
/// the higher rate as soon as that is worth half a token (each replacement costs it the part
/// of a token it was filling, half a token on average).
fn close(old: u32, new: u32, left_ms: u64) -> bool {
    let interval_ms = FILL_INTERVAL.as_millis() as f64;
    let tokens = f64::from(old.abs_diff(new)) * left_ms as f64 / interval_ms;
    if new <= old {
        tokens < KEEP_WITHIN_TOKENS
    } else {
        tokens < KEEP_WITHIN_TOKENS / 2.0
    }
}

#[cfg(test)]
mod tests;
