//! Folding one report: the store operations it takes (`plan`), one bucket's assignment from
//! the counts they return (`assign`), and the per-bucket demand a stream remembers between
//! reports (`Tracked`). Pure functions of their arguments; the stream (`stream`) owns the state.
//!
//! Must not touch: protobuf types, the store itself (only builds its operations).

use std::collections::HashMap;

use super::share::{FILL_INTERVAL_SECONDS, ShareInput};
use super::usage::{GlobalUsage, Usage};
use super::{Assignment, BucketId, Resolution};
use crate::limiter::{CountSlot, Destination, Limiter, Operations, Window};
use crate::rules::Rate;
use crate::settings::{RlqsSettings, Unmatched};
use crate::storage::{Change, CounterOp, CounterStore};

/// A bucket's demand in its current and previous window, and the assignment it holds.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    pub(super) held: Option<Assignment>,
    period: u64,
    window_start: u64,
    demand: (u64, u64),
    allowed: u64,
    /// Every stream's demand in the tracked window, as last read from the store.
    seen_all: u64,
    /// Its demand in its latest report, in the tracked window.
    last_demand: u64,
    /// Its demand in that report per token-bucket fill interval.
    pace: f64,
    /// The other streams' demand per request of its own, as last seen.
    others_per_own: f64,
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
    fn add_demand(&mut self, period: u64, start: u64, split: Split) {
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
    fn add_unseen(&mut self, counts: &Counts) {
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
    pub(super) fn heard(&mut self, usage: &Usage, now_ms: u64) {
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
    pub(super) fn window_end_ms(&self) -> Option<u64> {
        (self.period > 0).then(|| (self.window_start + self.period).saturating_mul(1_000))
    }

    /// The counts of `window` as they stand at its start, from what this stream last read:
    /// nothing used or demanded yet, and the window before it as last seen when it is the
    /// tracked one.
    pub(super) fn carried_over(&self, window: Window) -> Counts {
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
    fn uncounted(&mut self) {
        *self = Tracked {
            held: self.held,
            heard_of: self.heard_of,
            ..Tracked::default()
        };
    }
}

/// A usage's parts in the current window and before it. A report covers `elapsed_ms` up to now;
/// the requests are taken as spread evenly over it, so a report that straddles a window's start
/// counts only its share after that start in the new window. The part before goes to the
/// previous window's demand (it still weighs in shares); its allowed requests are not added to
/// a window that has ended, where no decision reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Split {
    /// Allowed requests in the current window.
    pub(super) allowed: u64,
    /// Allowed + denied in the current window.
    pub(super) demand: u64,
    /// Allowed + denied before the current window's start.
    pub(super) earlier_demand: u64,
}

impl Split {
    /// `usage` split at the start (ms) of the window `now_ms` is in.
    pub(super) fn at(usage: &Usage, window_start_ms: u64, now_ms: u64) -> Split {
        let total = usage.allowed.saturating_add(usage.denied);
        let inside = now_ms.saturating_sub(window_start_ms);
        if usage.elapsed_ms <= inside {
            return Split {
                allowed: usage.allowed,
                demand: total,
                earlier_demand: 0,
            };
        }
        let part = |n: u64| {
            let scaled = u128::from(n) * u128::from(inside) / u128::from(usage.elapsed_ms);
            u64::try_from(scaled).unwrap_or(n)
        };
        let demand = part(total);
        Split {
            allowed: part(usage.allowed),
            demand,
            earlier_demand: total - demand,
        }
    }
}

/// Where a counted bucket's usage falls: the window of its limit at the report, and the usage
/// split at that window's start. Computed once per bucket and report, read by `plan` and
/// `assign`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placed {
    pub(super) window: Window,
    pub(super) split: Split,
}

impl Placed {
    /// `usage` of a limit of `period` seconds, reported at `now_ms`.
    pub(super) fn at(usage: &Usage, period: u64, now_ms: u64) -> Placed {
        let window = Window::of(period, now_ms / 1_000);
        Placed {
            window,
            split: Split::at(usage, window.start * 1_000, now_ms),
        }
    }
}

/// What a counted bucket's assignment is computed from: its window and split, and the global
/// counts of that window (allowed so far, every stream's demand now and in the window before).
#[derive(Debug, Clone, Copy)]
pub(super) struct Counts {
    pub(super) placed: Placed,
    pub(super) used: u64,
    pub(super) demand_now: u64,
    pub(super) demand_before: u64,
}

/// Where a counted bucket's three counts are: the window's allowed requests, every stream's
/// demand in it and in the window before.
#[derive(Debug, Clone, Copy)]
pub(super) struct BucketSlots {
    pub(super) used: CountSlot,
    pub(super) demand_now: CountSlot,
    pub(super) demand_before: CountSlot,
}

impl BucketSlots {
    /// The counts after the report, from the applied operations.
    pub(super) fn counts(self, placed: Placed, ops: &Operations) -> Counts {
        Counts {
            placed,
            used: ops.count(self.used),
            demand_now: ops.count(self.demand_now),
            demand_before: ops.count(self.demand_before),
        }
    }
}

/// The store operations of a report: per counted bucket, its allowed requests in this window
/// onto the window counter, its demand onto this window's demand counter, and its demand
/// before this window onto the previous window's (whose count comes back either way); each
/// bucket's slots, in the order of `resolved`.
pub(super) fn plan<S: CounterStore>(
    domain: &str,
    resolved: &[Resolution<'_>],
    placed: &[Option<Placed>],
    limiter: &Limiter<S>,
) -> (Operations, Vec<Option<BucketSlots>>) {
    let mut ops = Operations::default();
    let slots = resolved
        .iter()
        .zip(placed)
        .map(|(r, p)| {
            let (Resolution::Counted { limit, entries, .. }, Some(Placed { window, split })) =
                (r, p)
            else {
                return None;
            };
            // The bucket's counters live where RLS counts the limit (`REDIS_PERSECOND`,
            // `POSTGRES_FROM_UNIT`).
            let to = match limit.rate {
                Rate::Limited(rate) => limiter.destination(&rate),
                Rate::Unlimited { .. } => Destination::Main,
            };
            let (period, start, end) = (window.period, window.start, window.end());
            let [window_key, demand_now, demand_before] =
                limiter.bucket_keys(domain, entries, limit, period, start);
            let mut add = |key, n, expires_at| {
                let change = Change::Add(n);
                ops.add(
                    to,
                    CounterOp {
                        key,
                        change,
                        expires_at,
                    },
                )
            };
            Some(BucketSlots {
                used: add(window_key, split.allowed, end),
                demand_now: add(demand_now, split.demand, end + period),
                demand_before: add(demand_before, split.earlier_demand, end),
            })
        })
        .collect();
    (ops, slots)
}

/// One bucket's assignment; `counts` are there for a counted bucket.
pub(super) fn assign(
    settings: &RlqsSettings,
    tracked: &mut Tracked,
    resolution: Resolution<'_>,
    counts: Option<Counts>,
    shadow: bool,
    now_ms: u64,
) -> (Assignment, Option<GlobalUsage>) {
    let ttl_seconds = settings.assignment_ttl.as_secs().max(1);
    let (
        Resolution::Counted {
            limit,
            per_window,
            enforce,
            ..
        },
        Some(Counts {
            placed: Placed { window, split },
            used,
            demand_now,
            demand_before,
        }),
    ) = (&resolution, counts)
    else {
        tracked.uncounted();
        return match resolution {
            Resolution::Unlimited => (Assignment::AllowAll { ttl_seconds }, None),
            _ => (unmatched(settings.unmatched, ttl_seconds), None),
        };
    };
    let first_counted = tracked.window_end_ms().is_none();
    tracked.add_demand(window.period, window.start, split);
    if let (true, Some(counts)) = (first_counted, &counts) {
        tracked.add_unseen(counts);
    }
    tracked.seen_all = demand_now;
    let input = ShareInput {
        limit: *per_window,
        used,
        period_ms: window.period * 1_000,
        elapsed_ms: now_ms - window.start * 1_000,
        own_demand: tracked.demand,
        all_demand: (demand_now, demand_before),
        own_allowed: tracked.allowed,
        last_demand: tracked.last_demand,
        others_per_own: tracked.others_per_own,
        own_pace: tracked.pace,
        min_share: settings.min_share,
        ttl_seconds,
    };
    tracked.others_per_own = input.others_per_own_now();
    let assignment = if *enforce && !shadow {
        input.assign(tracked.held.as_ref())
    } else {
        Assignment::AllowAll { ttl_seconds }
    };
    let global = GlobalUsage {
        rule: limit.full_key.clone(),
        used,
        limit: *per_window,
    };
    (assignment, Some(global))
}

fn unmatched(action: Unmatched, ttl_seconds: u64) -> Assignment {
    match action {
        Unmatched::Allow => Assignment::AllowAll { ttl_seconds },
        Unmatched::Deny => Assignment::DenyAll { ttl_seconds },
    }
}

/// One usage per bucket (a report naming a bucket twice adds the two), in first-seen order.
pub(super) fn merged(usages: Vec<Usage>) -> Vec<Usage> {
    let mut out: Vec<Usage> = Vec::with_capacity(usages.len());
    let mut index: HashMap<BucketId, usize> = HashMap::with_capacity(usages.len());
    for u in usages {
        match index.get(&u.bucket) {
            Some(&i) => {
                out[i].allowed = out[i].allowed.saturating_add(u.allowed);
                out[i].denied = out[i].denied.saturating_add(u.denied);
                out[i].elapsed_ms = out[i].elapsed_ms.max(u.elapsed_ms);
            }
            None => {
                index.insert(u.bucket.clone(), out.len());
                out.push(u);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
