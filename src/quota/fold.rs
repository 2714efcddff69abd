//! Folding one report: the store operations it takes (`plan`), one bucket's assignment from
//! the counts they return (`assign`); what a stream remembers of a bucket between reports is
//! `tracked`'s. Pure functions of their arguments; the stream (`stream`) owns the state.
//!
//! Must not touch: protobuf types, the store itself (only builds its operations).

use std::collections::HashMap;

use super::share::{Demand, ShareInput};
use super::usage::{GlobalUsage, Usage};
use super::{Assignment, BucketId, Resolution};
use crate::clock::{UnixMillis, millis_of};
use crate::limiter::{CountSlot, Destination, Limiter, Operations, Window};
use crate::rules::Rate;
use crate::settings::{RlqsSettings, Unmatched};
use crate::storage::{Change, CounterOp, CounterStore};

mod tracked;

pub(super) use tracked::Tracked;

/// Envoy reports `time_elapsed` in whole seconds: up to this many milliseconds of the time a
/// report covers are cut off.
const ENVOY_TRUNCATION_MS: u64 = 1_000;

/// A usage's parts in the current window and before it. A report covers the time since the
/// data plane's previous report up to now; the requests are taken as spread evenly over it, so a
/// report that straddles a window's start counts only its share after that start in the new
/// window. The part before goes to the previous window's demand (it still weighs in shares); its
/// allowed requests are not added to a window that has ended, where no decision reads them.
///
/// Two things the stream knows make the split better than even (`Coverage`): the time covered is
/// measured from the stream's previous report when there was one (Envoy truncates
/// `time_elapsed` to whole seconds: its 5-s reports say 4 s half the time, which put a fifth of
/// the report on the wrong side of the start), and the assignment pushed when the window ended
/// bounds what can have been allowed since: split evenly, admissions under a fast bucket in
/// the last seconds of a window would be charged to the new one, which would then give less
/// than the limit. The assignment held before the start bounds what was allowed there too;
/// both bounds are needed for every data plane to get its share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct WindowParts {
    /// Allowed requests in the current window.
    pub(super) allowed: u64,
    /// Allowed + denied in the current window.
    pub(super) demand: u64,
    /// Allowed + denied before the current window's start.
    pub(super) earlier_demand: u64,
}

/// What the stream knows of the time a report covers, beyond the report.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Coverage {
    /// When its previous report of the bucket came (ms since the epoch).
    pub(super) previous_report: Option<UnixMillis>,
    /// The assignment the data plane has held since the window's start (pushed when the
    /// window ended), if any.
    pub(super) since_start: Option<Assignment>,
}

impl WindowParts {
    /// `usage`, reported at `now`, split at the start of the window `now` is in.
    pub(super) fn at(
        usage: &Usage,
        window_start: UnixMillis,
        now: UnixMillis,
        known: Coverage,
    ) -> WindowParts {
        let total = usage.allowed.saturating_add(usage.denied);
        let inside = millis_of(now.since(window_start));
        // Envoy's whole seconds: the time since the previous report, when it is what was
        // truncated.
        let covered = match known.previous_report.map(|at| millis_of(now.since(at))) {
            Some(gap)
                if (usage.elapsed_ms..usage.elapsed_ms.saturating_add(ENVOY_TRUNCATION_MS))
                    .contains(&gap) =>
            {
                gap
            }
            _ => usage.elapsed_ms,
        };
        if covered <= inside {
            return WindowParts {
                allowed: usage.allowed,
                demand: total,
                earlier_demand: 0,
            };
        }
        let part = |n: u64| {
            let scaled = u128::from(n) * u128::from(inside) / u128::from(covered);
            u64::try_from(scaled).unwrap_or(n)
        };
        let demand = part(total);
        let at_most = known
            .since_start
            .and_then(|a| a.admits_at_most(inside))
            .unwrap_or(usage.allowed);
        WindowParts {
            allowed: part(usage.allowed).min(at_most),
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
    pub(super) split: WindowParts,
}

impl Placed {
    /// `usage` of a limit of `period` seconds, reported at `now`, with what the stream
    /// `known` of the time it covers.
    pub(super) fn at(usage: &Usage, period: u64, now: UnixMillis, known: Coverage) -> Placed {
        let window = Window::at(period, now);
        Placed {
            window,
            split: WindowParts::at(usage, window.started(), now, known),
        }
    }
}

/// What a counted bucket's assignment is computed from: its window and split, and the global
/// counts of that window (allowed so far, every stream's demand now and in the window before).
#[derive(Debug, Clone, Copy)]
pub(super) struct GlobalCounts {
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
    pub(super) fn counts(self, placed: Placed, ops: &Operations) -> GlobalCounts {
        GlobalCounts {
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
            let (period, start, end) = (window.period(), window.start(), window.end());
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
    counts: Option<GlobalCounts>,
    shadow: bool,
    now: UnixMillis,
) -> (Assignment, Option<GlobalUsage>) {
    let ttl_seconds = settings.assignment_ttl.as_secs().max(1);
    let (
        Resolution::Counted {
            limit,
            per_window,
            enforce,
            ..
        },
        Some(GlobalCounts {
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
    let first_counted = tracked.window_end().is_none();
    tracked.add_demand(window.period(), window.start(), split);
    match (first_counted, &counts) {
        (true, Some(counts)) => tracked.note_unseen(counts),
        (false, Some(counts)) => {
            tracked.add_unseen(counts, split.demand.saturating_add(split.earlier_demand))
        }
        _ => {}
    }
    tracked.seen_all = demand_now;
    let input = ShareInput {
        limit: *per_window,
        used,
        period_ms: millis_of(window.length()),
        elapsed_ms: millis_of(now.since(window.started())),
        own_demand: tracked.demand,
        all_demand: Demand {
            now: demand_now,
            before: demand_before,
        },
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
        denied: 0,
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
