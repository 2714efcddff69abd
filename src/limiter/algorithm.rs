//! The arithmetic of each algorithm, written once for every backend: what to ask the store for
//! a descriptor (a [`Plan`]), and how the store's answers become a decision, the remaining
//! budget and the time until reset (an [`Outcome`]). All of it in whole numbers (milliseconds,
//! and GCRA ticks of 1/rate ms), so replicas and the reference models agree exactly.
//!
//! Must not touch: rule matching, keys, the store's implementation, protobuf.

use std::num::NonZeroU128;
use std::time::Duration;

use super::key::{Keys, Tail};
use super::ops::{CountSlot, Destination, Operations, StepSlot};
use super::window::Window;
use crate::clock::UnixMillis;
use crate::rules::{Algorithm, PerUnit};
use crate::storage::{Change, CounterOp, Take, TokenAnswer, TokenStep};

/// What a descriptor asks of the store: its operations (`Plan<CounterOp, TokenStep>`, as
/// planned) or where their answers are ([`Queued`], once they are in the request's
/// [`Operations`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan<C, B> {
    /// One counter in a fixed window.
    Fixed { counter: C, window: Window },
    /// The current window's counter and a read of the previous one.
    Sliding {
        current: C,
        previous: C,
        window: Window,
    },
    /// One lease counter.
    Lease { counter: C },
    /// One token-bucket step on a token bucket of `capacity` tokens.
    TokenBucket { step: B, capacity: u128 },
}

/// A plan whose operations are in the request's [`Operations`].
pub(crate) type Queued = Plan<CountSlot, StepSlot>;

impl Plan<CounterOp, TokenStep> {
    /// Puts the operations into `ops`, bound for `to`.
    pub(crate) fn queue(self, ops: &mut Operations, to: Destination) -> Queued {
        match self {
            Plan::Fixed { counter, window } => Plan::Fixed {
                counter: ops.add(to, counter),
                window,
            },
            Plan::Sliding {
                current,
                previous,
                window,
            } => Plan::Sliding {
                current: ops.add(to, current),
                previous: ops.add(to, previous),
                window,
            },
            Plan::Lease { counter } => Plan::Lease {
                counter: ops.add(to, counter),
            },
            Plan::TokenBucket { step, capacity } => Plan::TokenBucket {
                step: ops.add_step(to, step),
                capacity,
            },
        }
    }
}

/// A descriptor's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Over the limit.
    pub(crate) over: bool,
    /// Whole hits (tokens, leases) left after this one.
    pub(crate) remaining: u32,
    /// Time until reset, as each algorithm defines it.
    pub(crate) reset_in: Duration,
    /// The limit's usage after the hit, in hits (for metrics; above the limit when over).
    pub(crate) used: u64,
}

/// Everything a plan needs to know about its descriptor.
pub(crate) struct PlanInput<'a> {
    pub(crate) rate: PerUnit,
    pub(crate) take: Take,
    pub(crate) now: UnixMillis,
    /// The descriptor's keys, started on it.
    pub(crate) keys: &'a mut Keys,
}

/// What a sliding window's request does to its previous window: a refund of everything (a
/// reset through `/counters`) empties it too, whose weight would otherwise still count; any
/// other request only reads it.
fn previous_window_op(take: Take) -> Change {
    match take {
        Take::Refund(n) if n >= crate::storage::MAX_DELTA => Change::Sub(n),
        _ => Change::READ,
    }
}

/// The descriptor's store operations, and how to read their answers.
pub(crate) fn plan(p: &mut PlanInput<'_>) -> Plan<CounterOp, TokenStep> {
    let period = p.rate.period.seconds();
    match p.rate.algorithm {
        Algorithm::FixedWindow => window_plan(p, period, false),
        Algorithm::SlidingWindow => window_plan(p, period, true),
        Algorithm::Concurrency => Plan::Lease {
            counter: CounterOp {
                key: p.keys.last_key(Tail::Lease { period }),
                change: match p.take {
                    Take::Take(n) => Change::Lease(n),
                    Take::Refund(n) => Change::Release(n),
                },
                expires_at: p.now.secs() + period,
            },
        },
        Algorithm::TokenBucket { burst } => {
            let rate = NonZeroU128::new(u128::from(p.rate.requests_per_unit));
            let interval = NonZeroU128::new(p.rate.period.length().as_millis());
            match (rate, interval) {
                (Some(rate), Some(interval)) => {
                    let capacity = rate.saturating_add(u128::from(burst));
                    Plan::TokenBucket {
                        step: TokenStep {
                            key: p.keys.last_key(Tail::TokenBucket {
                                period,
                                rate: rate.get(),
                            }),
                            now: u128::from(p.now.millis()) * rate.get(),
                            interval,
                            capacity,
                            take: p.take,
                            ticks_per_milli: rate,
                        },
                        capacity: capacity.get(),
                    }
                }
                // A token bucket that never refills (`requests_per_unit: 0`, e.g. by an override)
                // blocks everything, as a fixed window of 0 does.
                _ => window_plan(p, period, false),
            }
        }
    }
}

/// A fixed window's counter, or a sliding window's current counter and previous one.
fn window_plan(p: &mut PlanInput<'_>, period: u64, sliding: bool) -> Plan<CounterOp, TokenStep> {
    let window = Window::at(period, p.now);
    let tail = Tail::Window {
        period,
        start: window.start(),
    };
    let current = CounterOp {
        // A sliding window writes a second key from the same descriptor part.
        key: match sliding {
            true => p.keys.key(tail),
            false => p.keys.last_key(tail),
        },
        change: match p.take {
            Take::Take(n) => Change::Add(n),
            Take::Refund(n) => Change::Sub(n),
        },
        // A sliding window reads its counter during the next window too.
        expires_at: window.end() + period * u64::from(sliding),
    };
    if !sliding {
        return Plan::Fixed {
            counter: current,
            window,
        };
    }
    let previous = CounterOp {
        key: p.keys.last_key(Tail::Window {
            period,
            start: window.start().saturating_sub(period),
        }),
        change: previous_window_op(p.take),
        expires_at: window.start(),
    };
    Plan::Sliding {
        current,
        previous,
        window,
    }
}

/// The decision for a plan, from the store's answers.
pub(crate) fn decide(
    plan: Queued,
    rate: PerUnit,
    take: Take,
    now: UnixMillis,
    ops: &Operations,
) -> Outcome {
    let limit = u64::from(rate.requests_per_unit);
    // A check (0 hits) answers OVER_LIMIT on a counter already over its limit, as the reference.
    let taking = matches!(take, Take::Take(_));
    match plan {
        Plan::Fixed { counter, window } => {
            let count = ops.count(counter);
            Outcome {
                over: taking && count > limit,
                remaining: clamp(limit.saturating_sub(count)),
                reset_in: window.reset_in(),
                used: count,
            }
        }
        Plan::Sliding {
            current,
            previous,
            window,
        } => sliding(
            limit,
            ops.count(current),
            ops.count(previous),
            window,
            now,
            taking,
        ),
        Plan::Lease { counter } => {
            let count = ops.count(counter);
            Outcome {
                over: taking && count > limit,
                remaining: clamp(limit.saturating_sub(count)),
                reset_in: Duration::from_secs(rate.period.seconds()),
                used: count,
            }
        }
        Plan::TokenBucket { step, capacity } => {
            token_bucket(rate, capacity, ops.answer(step), take, now)
        }
    }
}

/// The sliding estimate: `current + previous × (P − elapsed) / P`, compared as whole numbers
/// scaled by P (in milliseconds).
fn sliding(
    limit: u64,
    current: u64,
    previous: u64,
    window: Window,
    now: UnixMillis,
    taking: bool,
) -> Outcome {
    let period = window.length().as_millis();
    let elapsed = now.since(window.started()).as_millis().min(period);
    let (limit, cur, prev) = (u128::from(limit), u128::from(current), u128::from(previous));
    let scaled = cur * period + prev * (period - elapsed);
    let over = taking && scaled > limit * period;
    let remaining = (limit * period).saturating_sub(scaled) / period;
    let to_end = period - elapsed;
    let reset = if over {
        sliding_wait(limit, cur, prev, period, elapsed)
    } else {
        to_end
    };
    Outcome {
        over,
        remaining: clamp_u128(remaining),
        reset_in: Duration::from_millis(u64::try_from(reset).unwrap_or(u64::MAX)),
        used: u64::try_from(scaled.div_ceil(period)).unwrap_or(u64::MAX),
    }
}

/// How long until one more hit would be admitted if no other hit came: later in this window
/// (the previous window's weight fades), or in the next one (this window becomes the previous).
fn sliding_wait(limit: u128, cur: u128, prev: u128, period: u128, elapsed: u128) -> u128 {
    let to_end = period - elapsed;
    // In this window: (cur + 1) × P + prev × (P − e) ≤ limit × P.
    if limit > cur && prev > 0 {
        let need = period - ((limit - cur - 1) * period / prev).min(period);
        if need < period {
            return need.saturating_sub(elapsed).max(1);
        }
    }
    // In the next window: P + cur × (P − e) ≤ limit × P, with e from its start.
    if limit == 0 {
        return to_end;
    }
    let need = match cur {
        0 => 0,
        _ => period - ((limit - 1) * period / cur).min(period),
    };
    to_end + need
}

/// GCRA's answer in tokens and times: `capacity − (tat − now) / interval` tokens now.
fn token_bucket(
    rate: PerUnit,
    capacity: u128,
    answer: TokenAnswer,
    take: Take,
    now: UnixMillis,
) -> Outcome {
    let r = u128::from(rate.requests_per_unit.max(1));
    let interval = rate.period.length().as_millis();
    let debt = answer.tat.saturating_sub(u128::from(now.millis()) * r);
    // Tokens × interval available now (after the step).
    let scaled = (capacity * interval).saturating_sub(debt);
    let whole = scaled / interval;
    let over = !answer.admitted;
    let reset_ticks = if over {
        // Until the next whole token: scaled reaches (whole + 1) × interval.
        (whole + 1) * interval - scaled
    } else {
        debt
    };
    let requested = match take {
        Take::Take(n) => u128::from(n),
        Take::Refund(_) => 0,
    };
    // For the stats split, usage must read over the limit exactly when the take was refused.
    let limit = u128::from(rate.requests_per_unit);
    let used = if over {
        limit + requested
    } else {
        capacity.saturating_sub(whole).min(limit)
    };
    Outcome {
        over,
        remaining: clamp_u128(whole),
        reset_in: Duration::from_millis(u64::try_from(reset_ticks.div_ceil(r)).unwrap_or(u64::MAX)),
        used: u64::try_from(used).unwrap_or(u64::MAX),
    }
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn clamp_u128(n: u128) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
