//! The bytes of bucket ids held by every RLQS stream together, bounded
//! (`RLQS_MAX_BUCKET_BYTES`): a stream takes its new buckets' bytes before it keeps them and
//! gives them all back when it ends, so many streams with large ids cannot grow the process
//! without limit.
//!
//! Must not touch: streams, reports, buckets themselves (only their byte counts pass here).

use std::sync::atomic::{AtomicUsize, Ordering};

/// A shared bound on bytes held.
#[derive(Debug)]
pub struct BucketIdBytes {
    used: AtomicUsize,
    max: usize,
}

impl BucketIdBytes {
    /// A bound of `max` bytes, none held yet.
    pub fn new(max: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes `n` bytes; `false` (and nothing taken) when that would pass the bound.
    pub fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&after| after <= self.max)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken earlier.
    pub fn give_back(&self, n: usize) {
        // Never below zero, whatever a caller gives back.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::BucketIdBytes;

    #[test]
    fn takes_up_to_the_bound_and_gives_back() {
        let held = BucketIdBytes::new(10);
        assert!(held.try_take(6));
        assert!(!held.try_take(5), "6 + 5 passes 10");
        assert!(held.try_take(4));
        assert!(!held.try_take(usize::MAX), "no overflow");
        held.give_back(10);
        assert_eq!(held.used(), 0);
        held.give_back(1);
        assert_eq!(held.used(), 0);
    }
}
