//! What a stream remembers of one bucket between reports: its demand in the current and the
//! previous window, what it was allowed, its pace, the ratio of the others' demand to its own,
//! the assignment it holds, and what it did not see of a bucket that came from elsewhere.
//!
//! Must not touch: the store, protobuf types (`fold` computes the assignment from this).

use std::time::Duration;

use super::{Coverage, GlobalCounts, Placed, WindowParts};
use crate::clock::{UnixMillis, millis_of};
use crate::limiter::Window;
use crate::quota::Assignment;
use crate::quota::share::{Demand, FILL_INTERVAL};
use crate::quota::usage::Usage;

/// A bucket's demand in its current and previous window, and the assignment it holds.
#[derive(Debug, Default)]
pub(in crate::quota) struct Tracked {
    pub(in crate::quota) held: Option<Assignment>,
    /// `held` was pushed when a window ended, and no report has come since.
    refreshed: bool,
    /// When the stream's latest report of the bucket came (ms since the epoch).
    reported: Option<UnixMillis>,
    period: u64,
    window_start: u64,
    pub(super) demand: Demand,
    pub(super) allowed: u64,
    /// Every stream's demand in the tracked window, as last read from the store.
    pub(super) seen_all: u64,
    /// Its demand in its latest report, in the tracked window.
    pub(super) last_demand: u64,
    /// Its demand in that report per token-bucket fill interval.
    pub(super) pace: f64,
    /// The other streams' demand per request of its own, as last seen.
    pub(super) others_per_own: f64,
    /// Whether the stream has heard of the bucket (a report named it).
    heard_of: bool,
    /// What the stream did not see of a bucket that existed before it heard of it.
    unseen: Option<Unseen>,
}

/// A bucket whose first report on this stream covers time before it (the data plane had the
/// bucket and reported it elsewhere: a replica that died, a stream that broke). Its demand and
/// admissions before `since_ms` are in the store's counts, which the stream would take for the
/// other streams' and so give its data plane less than its share (in the window it came in
/// and the next). How much of what the store held beyond the stream's own at its first report
/// was this data plane's is its part of the demand between that report and the next (its own
/// over every stream's), never more than that first report's pace over the time before it:
/// at the pace alone, a data plane whose bucket was a second old when its replica died would
/// be taken for the maker of nearly all the window's demand, and given nearly all its share.
#[derive(Debug, Clone, Copy)]
struct Unseen {
    /// When the first report's time began (ms since the epoch).
    since_ms: u64,
    demand_per_ms: f64,
    allowed_per_ms: f64,
    /// The store's counts at the first counted report, once there was one.
    first: Option<FirstCounts>,
}

/// What the store held at the stream's first counted report of a bucket from elsewhere.
#[derive(Debug, Clone, Copy)]
struct FirstCounts {
    /// That report's window (its start, in seconds).
    window_start: u64,
    /// Every stream's demand in that window, this report's included.
    all: u64,
    /// Beyond the stream's own: demand in that window and the one before.
    beyond: Demand,
    /// Beyond the stream's own: allowed in that window.
    beyond_allowed: u64,
}

/// An estimate of what a stream did not see in a stretch of time.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    demand: u64,
    allowed: u64,
}

impl Unseen {
    /// The estimate of what came before `since_ms` in `[from_ms, to_ms)`.
    fn between(&self, from_ms: u64, to_ms: u64) -> Estimate {
        let ms = to_ms.min(self.since_ms).saturating_sub(from_ms) as f64;
        // Rounded: the pace is exact only to a request per report.
        let estimate = |per_ms: f64| (per_ms * ms).round() as u64;
        Estimate {
            demand: estimate(self.demand_per_ms),
            allowed: estimate(self.allowed_per_ms),
        }
    }
}

impl Tracked {
    /// Adds `split`'s demand to the window of `period` starting at `start` and the one before.
    pub(super) fn add_demand(&mut self, period: u64, start: u64, split: WindowParts) {
        if (self.period, self.window_start) != (period, start) {
            let follows = self.period == period && start == self.window_start + period;
            self.demand = Demand {
                now: 0,
                before: if follows { self.demand.now } else { 0 },
            };
            self.allowed = 0;
            self.period = period;
            self.window_start = start;
        }
        self.demand.now = self.demand.now.saturating_add(split.demand);
        self.demand.before = self.demand.before.saturating_add(split.earlier_demand);
        self.allowed = self.allowed.saturating_add(split.allowed);
        self.last_demand = split.demand;
    }

    /// At the stream's first counted report of a bucket from elsewhere: notes what the store's
    /// `counts` hold beyond the stream's own (its unseen part is estimated at the next report).
    pub(super) fn note_unseen(&mut self, counts: &GlobalCounts) {
        let Some(unseen) = self.unseen.as_mut() else {
            return;
        };
        unseen.first = Some(FirstCounts {
            window_start: self.window_start,
            all: counts.demand_now,
            beyond: Demand {
                now: counts.demand_now.saturating_sub(self.demand.now),
                before: counts.demand_before.saturating_sub(self.demand.before),
            },
            beyond_allowed: counts.used.saturating_sub(self.allowed),
        });
    }

    /// At the next counted report (its total demand `own`, the store's `counts` after it):
    /// adds the unseen demand and admissions in proportion to the stream's part of every
    /// stream's demand since the first, each at most the first report's pace over the time
    /// before it. Only while the first report's window is this one or the one before.
    pub(super) fn add_unseen(&mut self, counts: &GlobalCounts, own: u64) {
        let Some(unseen) = self.unseen else { return };
        let Some(first) = unseen.first else { return };
        self.unseen = None;
        let same = first.window_start == self.window_start;
        let follows = first.window_start + self.period == self.window_start;
        let all_since = match (same, follows) {
            (true, _) => counts.demand_now.saturating_sub(first.all),
            (false, true) => counts
                .demand_before
                .saturating_sub(first.all)
                .saturating_add(counts.demand_now),
            (false, false) => return,
        };
        let part = if all_since > 0 {
            (own as f64 / all_since as f64).min(1.0)
        } else {
            1.0
        };
        let of = |beyond: u64| (beyond as f64 * part).round() as u64;
        let start_ms = UnixMillis::from_secs(first.window_start).millis();
        let period_ms = millis_of(Duration::from_secs(self.period));
        let in_first = unseen.between(start_ms, u64::MAX);
        let before_first = unseen.between(start_ms.saturating_sub(period_ms), start_ms);
        let add = |to: &mut u64, estimate: u64, beyond: u64| {
            *to = to.saturating_add(estimate.min(of(beyond)));
        };
        if same {
            add(&mut self.demand.now, in_first.demand, first.beyond.now);
            add(
                &mut self.demand.before,
                before_first.demand,
                first.beyond.before,
            );
            add(&mut self.allowed, in_first.allowed, first.beyond_allowed);
        } else {
            add(&mut self.demand.before, in_first.demand, first.beyond.now);
        }
    }

    /// Notes the demand a report carried per fill interval, from how long it covered (Envoy's
    /// `time_elapsed`; 0, as in a bucket's first report, says nothing), and whether the
    /// stream's first report of the bucket covers time before it (the bucket came from
    /// elsewhere).
    pub(in crate::quota) fn heard(&mut self, usage: &Usage, now: UnixMillis) {
        let first = !std::mem::replace(&mut self.heard_of, true);
        if usage.elapsed_ms == 0 {
            return;
        }
        let demand = usage.allowed.saturating_add(usage.denied) as f64;
        self.pace = demand * FILL_INTERVAL.as_millis() as f64 / usage.elapsed_ms as f64;
        if first {
            let elapsed = usage.elapsed_ms as f64;
            self.unseen = Some(Unseen {
                since_ms: now.millis().saturating_sub(usage.elapsed_ms),
                demand_per_ms: demand / elapsed,
                allowed_per_ms: usage.allowed as f64 / elapsed,
                first: None,
            });
        }
    }

    /// What the stream knows of the time its next report covers: when the previous came, and
    /// after a window-end refresh, the assignment held since the window's start.
    pub(in crate::quota) fn known(&self) -> Coverage {
        Coverage {
            previous_report: self.reported,
            since_start: self.refreshed.then_some(self.held).flatten(),
        }
    }

    /// Notes a report's assignment, sent at `now`.
    pub(in crate::quota) fn reported(&mut self, assignment: Assignment, now: UnixMillis) {
        self.held = Some(assignment);
        self.refreshed = false;
        self.reported = Some(now);
    }

    /// Notes the assignment worked out when a window ended (pushed if it changed).
    pub(in crate::quota) fn refreshed_with(&mut self, assignment: Assignment) {
        self.held = Some(assignment);
        self.refreshed = true;
    }

    /// When the window of the last counted report ends; `None` for a bucket that is not
    /// counted.
    pub(in crate::quota) fn window_end(&self) -> Option<UnixMillis> {
        (self.period > 0).then(|| UnixMillis::from_secs(self.window_start + self.period))
    }

    /// The counts of `window` as they stand at its start, from what this stream last read:
    /// nothing used or demanded yet, and the window before it as last seen when it is the
    /// tracked one.
    pub(in crate::quota) fn carried_over(&self, window: Window) -> GlobalCounts {
        let follows =
            self.period == window.period() && window.start() == self.window_start + window.period();
        GlobalCounts {
            placed: Placed {
                window,
                split: WindowParts::default(),
            },
            used: 0,
            demand_now: 0,
            demand_before: if follows { self.seen_all } else { 0 },
        }
    }

    /// The bucket is no longer counted (unmatched or unlimited, e.g. after a reload). The
    /// stream still knows it heard of it; what it did not see before is no longer in counts
    /// it will read.
    pub(super) fn uncounted(&mut self) {
        *self = Tracked {
            held: self.held,
            refreshed: self.refreshed,
            reported: self.reported,
            heard_of: self.heard_of,
            ..Tracked::default()
        };
    }
}
