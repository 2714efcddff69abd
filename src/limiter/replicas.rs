//! How many replicas share the store, for the local mode's share of a limit (1/N): pinned by
//! `BACKEND_LOCAL_REPLICAS`, or learned from marks the replicas keep in the store itself.
//!
//! Every replica marks each [`MARK_PERIOD`] once: it adds 1 to the period's counter (it lives
//! three periods) and reads the two periods before. N is the largest of the three counts: a
//! period just begun holds at least this replica's mark, a finished one every live replica's,
//! and taking the larger of two finished ones forgives a mark that came late or a clock a little
//! off. A replica that starts is counted by the others within a period and a tick; one that
//! stops is forgotten once two periods have passed without its mark (at most 10 s).
//!
//! Must not touch: the decision, where a key is counted (this only reads and writes its marks).

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::{Change, CounterKey, CounterOp};

/// The length of one marking period, in seconds.
pub const MARK_PERIOD: u64 = 3;

/// How often a replica marks (it marks a period once, whichever tick comes first in it).
pub(crate) const MARK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The replica count the local mode divides a limit by.
#[derive(Debug, Default)]
pub(crate) struct Replicas {
    pinned: Option<NonZeroU64>,
    /// The count last learned (0: not yet).
    learned: AtomicU64,
    /// One more than the last period this replica marked (0: none).
    marked: AtomicU64,
}

impl Replicas {
    /// Pinned to `pinned` when set, else learned.
    pub(crate) fn new(pinned: Option<NonZeroU64>) -> Replicas {
        Replicas {
            pinned,
            ..Replicas::default()
        }
    }

    /// The count to divide by: the pinned one, else the last learned; `None` before the
    /// first marks were read.
    pub(crate) fn count(&self) -> Option<NonZeroU64> {
        self.pinned
            .or_else(|| NonZeroU64::new(self.learned.load(Ordering::Acquire)))
    }

    /// Whether the count is learned from marks (not pinned).
    pub(crate) fn learns(&self) -> bool {
        self.pinned.is_none()
    }

    /// The operations of one marking at `now` (Unix seconds) under `prefix`: this period's mark
    /// (an add of 1 the first time in the period, a read after) and reads of the two before.
    pub(crate) fn marking(&self, prefix: &str, now: u64) -> Option<[CounterOp; 3]> {
        let period = now / MARK_PERIOD;
        let first = self.marked.load(Ordering::Acquire) != period + 1;
        let op = |p: u64, n: u64| {
            let key = CounterKey::checked(format!("{prefix}turnstile_replicas_{p}")).ok()?;
            Some(CounterOp {
                key,
                change: Change::Add(n),
                expires_at: (p + 3) * MARK_PERIOD,
            })
        };
        Some([
            op(period, u64::from(first))?,
            op(period.checked_sub(1)?, 0)?,
            op(period.checked_sub(2)?, 0)?,
        ])
    }

    /// Records the counts a marking at `now` read (in [`Replicas::marking`]'s order).
    pub(crate) fn marked(&self, now: u64, counts: [u64; 3]) -> u64 {
        self.marked.store(now / MARK_PERIOD + 1, Ordering::Release);
        let n = counts.into_iter().max().unwrap_or(1).max(1);
        self.learned.store(n, Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_marked_once_and_n_is_the_largest_count() {
        let r = Replicas::new(None);
        assert_eq!(r.count(), None);
        let at = 1_800_000_001;
        let ops = r.marking("p_", at).expect("ops");
        assert_eq!(ops[0].change, Change::Add(1));
        assert_eq!(ops[0].key.as_str(), "p_turnstile_replicas_600000000");
        assert_eq!(ops[2].key.as_str(), "p_turnstile_replicas_599999998");
        assert_eq!(ops[0].expires_at, 600_000_003 * MARK_PERIOD);
        assert_eq!(r.marked(at, [1, 3, 2]), 3);
        assert_eq!(r.count().map(NonZeroU64::get), Some(3));
        let again = r.marking("p_", at + 1).expect("ops");
        assert_eq!(again[0].change, Change::READ, "marked once a period");
        let next = r.marking("p_", at + MARK_PERIOD).expect("ops");
        assert_eq!(next[0].change, Change::Add(1));
        assert_eq!(r.marked(at + MARK_PERIOD, [1, 0, 0]), 1);
    }

    #[test]
    fn a_pinned_count_is_not_learned() {
        let r = Replicas::new(NonZeroU64::new(4));
        assert!(!r.learns());
        r.marked(1_800_000_000, [2, 2, 2]);
        assert_eq!(r.count().map(NonZeroU64::get), Some(4));
    }
}
