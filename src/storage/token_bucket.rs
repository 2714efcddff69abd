//! The token-bucket operation every store performs atomically: one GCRA step on the small
//! state kept at a key (its theoretical arrival time, TAT). The step is written once here and
//! applied by each store in its own atomic way (memory under its shard lock, memcached by
//! compare-and-swap); the limiter turns the answer into remaining tokens and reset times.
//!
//! Time is counted in *ticks* chosen by the caller so that every quantity is a whole number
//! (the limiter uses 1/rate of a millisecond, which makes the emission interval the period in
//! milliseconds): no rounding anywhere, so replicas and the reference model agree exactly.
//!
//! Must not touch: rules, limits, how a store keeps or transports the state.

use std::num::NonZeroU128;

/// What a step does with tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Take this many tokens at once, or none (0 = look only: admitted when one token would
    /// be).
    Take(u64),
    /// Give this many tokens back (never beyond a full bucket).
    Refund(u64),
}

/// One GCRA step on the bucket at `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenStep {
    /// The bucket's key.
    pub key: super::CounterKey,
    /// Now, in ticks.
    pub now: u128,
    /// Ticks one token takes to come back (the emission interval).
    pub interval: NonZeroU128,
    /// Tokens a full bucket holds.
    pub capacity: NonZeroU128,
    /// Take or refund.
    pub take: Take,
    /// Ticks per millisecond, so a store can tell when a state is worthless (a full bucket).
    pub ticks_per_milli: NonZeroU128,
}

/// The answer to one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenAnswer {
    /// The tokens were taken (a look: one token is there; a refund: always).
    pub admitted: bool,
    /// The TAT after the step, never before `now`: the bucket is full at this tick, and holds
    /// `capacity - (tat - now) / interval` tokens now.
    pub tat: u128,
}

impl TokenStep {
    /// Applies the step to the stored TAT (`None` for a missing state, which is a full bucket).
    /// Returns the answer and the TAT to store, if the state changes.
    pub fn apply(&self, stored: Option<u128>) -> (TokenAnswer, Option<u128>) {
        let tat = stored.map_or(self.now, |t| t.max(self.now));
        match self.take {
            Take::Take(n) => {
                // A look (0 tokens) is admitted when one token would be.
                let interval = self.interval.get();
                let cost = u128::from(n.max(1)).saturating_mul(interval);
                let fits = tat.saturating_add(cost) - self.now
                    <= self.capacity.get().saturating_mul(interval);
                let after = tat.saturating_add(u128::from(n).saturating_mul(interval));
                if fits && n > 0 {
                    (
                        TokenAnswer {
                            admitted: true,
                            tat: after,
                        },
                        Some(after),
                    )
                } else {
                    (
                        TokenAnswer {
                            admitted: fits,
                            tat,
                        },
                        None,
                    )
                }
            }
            Take::Refund(n) => {
                let back = u128::from(n).saturating_mul(self.interval.get());
                let after = tat.saturating_sub(back).max(self.now);
                let changed = stored.is_some_and(|s| s != after);
                (
                    TokenAnswer {
                        admitted: true,
                        tat: after,
                    },
                    changed.then_some(after),
                )
            }
        }
    }

    /// The Unix second after which the state `tat` means a full bucket and may be dropped
    /// (rounded up, plus one second of slack for stores that expire early).
    pub fn expires_at(&self, tat: u128) -> u64 {
        let millis = tat.div_ceil(self.ticks_per_milli.get());
        u64::try_from(millis.div_ceil(1000))
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::{NonZeroU128, Take, TokenStep};

    fn step(now: u128, take: Take) -> TokenStep {
        TokenStep {
            key: crate::storage::CounterKey::checked("k").expect("key"),
            now,
            interval: NonZeroU128::new(10).expect("nonzero"),
            capacity: NonZeroU128::new(3).expect("nonzero"),
            take,
            ticks_per_milli: NonZeroU128::MIN,
        }
    }

    #[test]
    fn capacity_at_once_then_one_per_interval() {
        let mut state = None;
        let mut admitted = Vec::new();
        for now in [0, 0, 0, 0, 9, 10, 10] {
            let (answer, store) = step(now, Take::Take(1)).apply(state);
            state = store.or(state);
            admitted.push(answer.admitted);
        }
        assert_eq!(admitted, [true, true, true, false, false, true, false]);
    }

    #[test]
    fn all_or_nothing_and_refunds_stop_at_full() {
        let (answer, store) = step(0, Take::Take(4)).apply(None);
        assert!(!answer.admitted && store.is_none());
        let (_, store) = step(0, Take::Take(2)).apply(None);
        assert_eq!(store, Some(20));
        let (answer, store) = step(5, Take::Refund(5)).apply(store);
        assert_eq!((answer.tat, store), (5, Some(5)));
        let (answer, store) = step(5, Take::Take(0)).apply(Some(5));
        assert!(answer.admitted && store.is_none());
        let (answer, store) = step(0, Take::Take(0)).apply(Some(30));
        assert!(
            !answer.admitted && store.is_none(),
            "an empty bucket answers a look with no"
        );
    }
}
