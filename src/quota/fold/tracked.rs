//! What a stream remembers of one bucket between reports: its demand in the current and the
//! previous window, what it was allowed, its pace, the ratio of the others' demand to its own,
//! the assignment it holds, and what it did not see of a bucket that came from elsewhere.
//!
//! Must not touch: the store, protobuf types (`fold` computes the assignment from this).

use super::{Counts, Placed, Split};
use crate::limiter::Window;
use crate::quota::Assignment;
use crate::quota::share::FILL_INTERVAL_SECONDS;
use crate::quota::usage::Usage;

/// A bucket's demand in its current and previous window, and the assignment it holds.
#[derive(Debug, Default)]
pub(in crate::quota) struct Tracked {
    pub(in crate::quota) held: Option<Assignment>,
    period: u64,
    window_start: u64,
    pub(super) demand: (u64, u64),
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
/// and the next). They are estimated at the pace of that first report.
#[derive(Debug, Clone, Copy)]
struct Unseen {
    /// When the first report's time began (ms since the epoch).
    since_ms: u64,
    demand_per_ms: f64,
    allowed_per_ms: f64,
}

impl Unseen {
    /// The estimate before `since_ms` in `[from_ms, to_ms)`: demand, allowed.
    fn between(&self, from_ms: u64, to_ms: u64) -> (u64, u64) {
        let ms = to_ms.min(self.since_ms).saturating_sub(from_ms) as f64;
        // Rounded: the pace is exact only to a request per report.
        let estimate = |per_ms: f64| (per_ms * ms).round() as u64;
        (estimate(self.demand_per_ms), estimate(self.allowed_per_ms))
    }
}

impl Tracked {
    /// Adds `split`'s demand to the window of `period` starting at `start` and the one before.
    pub(super) fn add_demand(&mut self, period: u64, start: u64, split: Split) {
        if (self.period, self.window_start) != (period, start) {
            let follows = self.period == period && start == self.window_start + period;
            self.demand = (0, if follows { self.demand.0 } else { 0 });
            self.allowed = 0;
            self.period = period;
            self.window_start = start;
        }
        self.demand.0 = self.demand.0.saturating_add(split.demand);
        self.demand.1 = self.demand.1.saturating_add(split.earlier_demand);
        self.allowed = self.allowed.saturating_add(split.allowed);
        self.last_demand = split.demand;
    }

    /// Adds to the stream's own demand and admissions, in the first window it counts the
    /// bucket in, what it did not see of a bucket that came from elsewhere: estimated at its
    /// pace, and never more than the store's `counts` hold beyond what this stream reported
    /// (a data plane whose first report covers time it had no bucket in brings nothing).
    pub(super) fn add_unseen(&mut self, counts: &Counts) {
        let Some(unseen) = self.unseen else { return };
        let (start_ms, period_ms) = (self.window_start * 1_000, self.period * 1_000);
        let (now, allowed) = unseen.between(start_ms, u64::MAX);
        let (before, _) = unseen.between(start_ms.saturating_sub(period_ms), start_ms);
        let beyond = |counted: u64, own: u64| counted.saturating_sub(own);
        self.demand.0 += now.min(beyond(counts.demand_now, self.demand.0));
        self.demand.1 += before.min(beyond(counts.demand_before, self.demand.1));
        self.allowed += allowed.min(beyond(counts.used, self.allowed));
    }

    /// Notes the demand a report carried per fill interval, from how long it covered (Envoy's
    /// `time_elapsed`; 0, as in a bucket's first report, says nothing), and whether the
    /// stream's first report of the bucket covers time before it (the bucket came from
    /// elsewhere).
    pub(in crate::quota) fn heard(&mut self, usage: &Usage, now_ms: u64) {
        let first = !std::mem::replace(&mut self.heard_of, true);
        if usage.elapsed_ms == 0 {
            return;
        }
        let demand = usage.allowed.saturating_add(usage.denied) as f64;
        let interval_ms = f64::from(FILL_INTERVAL_SECONDS) * 1_000.0;
        self.pace = demand * interval_ms / usage.elapsed_ms as f64;
        if first {
            let elapsed = usage.elapsed_ms as f64;
            self.unseen = Some(Unseen {
                since_ms: now_ms.saturating_sub(usage.elapsed_ms),
                demand_per_ms: demand / elapsed,
                allowed_per_ms: usage.allowed as f64 / elapsed,
            });
        }
    }

    /// When the window of the last counted report ends (ms since the epoch); `None` for a
    /// bucket that is not counted.
    pub(in crate::quota) fn window_end_ms(&self) -> Option<u64> {
        (self.period > 0).then(|| (self.window_start + self.period).saturating_mul(1_000))
    }

    /// The counts of `window` as they stand at its start, from what this stream last read:
    /// nothing used or demanded yet, and the window before it as last seen when it is the
    /// tracked one.
    pub(in crate::quota) fn carried_over(&self, window: Window) -> Counts {
        let follows =
            self.period == window.period && window.start == self.window_start + window.period;
        Counts {
            placed: Placed {
                window,
                split: Split::default(),
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
            heard_of: self.heard_of,
            ..Tracked::default()
        };
    }
}
