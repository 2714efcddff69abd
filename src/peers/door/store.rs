//! The counter store's queue as the door sees it: how much longer the store calls take than they
//! do with nothing queued. On a remote store the calls the door lets in wait in the store's
//! pipeline (memcached's or Redis's socket, PostgreSQL's pool), not in the runtime's queue, so
//! the runtime's probe never sees them: with memcached beside a flood the budget stayed at its
//! ceiling and a newcomer's call waited behind ~500 of the flood's in the pipe.
//!
//! The signal is the mean time of the store calls that ended in each probe's interval, over the
//! least such mean of the window (the time with nothing queued, as TCP Vegas and BBR take their
//! least round trip). Only a queue that stands counts, as CoDel counts it: the least of the
//! last [`STANDING_PROBES`] means, so that one slow interval is not read as a queue. A store
//! far away may queue as long as its round trip ([`StoreQueue::allowance`]).
//!
//! The least is only as good as its samples: while the door holds a queue in the store,
//! every sample carries that queue, and a least taken from them would creep up window after
//! window until the budget was back at its ceiling. So, as BBR's `ProbeRTT`,
//! the last [`DRAIN_PROBES`] probes of a window in which the store was queued hold the budget at
//! its floor: the store's queue drains and those probes measure the least afresh, which is then
//! the next window's. That costs the flood a few milliseconds in each [`WINDOW_PROBES`] (the
//! other peers are within their allotments, which the floor still gives them).
//!
//! A store that becomes slower for good (a farther network) reads as queue until the window
//! ends: for at most one window the budget is held low, then the new least is the measure.
//!
//! The mean is of every store call, whatever the store: where a call's rules route to two stores
//! (a durable PostgreSQL beside memcached, Redis for per-second limits) the mix of the interval
//! moves the mean too. The least is then the mix's lightest interval, and a shift in the mix
//! reads as queue for at most the window, as a slower store does.
//!
//! Must not touch: the stores themselves (this reads the instrumented store's totals), the
//! budget's arithmetic (`door`).

use std::time::Duration;

/// Probes in a window: the least is measured afresh this often (1 s at a probe every 2 ms).
pub const WINDOW_PROBES: u32 = 500;

/// The probes that end a queued window: the first holds the budget at its floor, the others
/// (4 ms at a probe every 2 ms) measure the least with the store's queue drained.
pub const DRAIN_PROBES: u32 = 3;

/// The probes whose least mean is the queue that stands (4 ms at a probe every 2 ms).
pub const STANDING_PROBES: usize = 2;

/// What the store's queue says at one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreSays {
    /// The store calls of the interval waited this long beyond the least (zero with none).
    Queue(Duration),
    /// Hold the budget at its floor while the least is measured.
    Drain,
}

/// The store calls' totals at the last probe, the least mean and the window so far.
#[derive(Debug, Default)]
pub struct StoreQueue {
    calls: u64,
    total: Duration,
    /// The least mean: of the last window (the reference), of this one so far, and of the
    /// probes since the budget was held at its floor (the drain).
    least: Option<Duration>,
    fresh: Option<Duration>,
    drained: Option<Duration>,
    probes: u32,
    /// Whether this window's samples showed a queue worth draining, and whether the last probe
    /// said to drain.
    queued: bool,
    draining: bool,
    /// The means of the last [`STANDING_PROBES`] probes (none where no call ended), a ring.
    recent: [Option<Duration>; STANDING_PROBES],
    next: usize,
}

impl StoreQueue {
    /// `queue` on the scale of `target`: a queue as long as the [`allowance`](Self::allowance)
    /// reads as the target, so that the door steers both queues on one target.
    pub fn on_target_scale(&self, queue: Duration, target: Duration) -> Duration {
        let allowance = self.allowance(target);
        queue.mul_f64(target.as_secs_f64() / allowance.as_secs_f64())
    }

    /// How long a queue at the store may stand before the budget shrinks: the target, or the
    /// store's least round trip where that is longer. A store far away needs as many calls queued
    /// as in flight to be kept busy (TCP's window is twice the path's delay for the same reason);
    /// steered on the target alone, a store 2 ms away through a relay served 31,000 calls/s
    /// where the runtime's probe alone let it serve 68,000.
    pub fn allowance(&self, target: Duration) -> Duration {
        least_of(self.least, self.fresh).map_or(target, |least| least.max(target))
    }

    /// One probe, given the store calls so far (`calls`, their `total` time) and the target the
    /// door keeps queues within.
    pub fn probe(&mut self, calls: u64, total: Duration, target: Duration) -> StoreSays {
        let (ended, spent) = (
            calls.saturating_sub(self.calls),
            total.saturating_sub(self.total),
        );
        (self.calls, self.total) = (calls, total);
        let mean = u32::try_from(ended)
            .ok()
            .filter(|n| *n > 0)
            .map(|n| spent / n);
        self.fresh = least_of(self.fresh, mean);
        if self.draining {
            self.drained = least_of(self.drained, mean);
        }
        if let Some(slot) = self.recent.get_mut(self.next) {
            // A drained interval's short mean says nothing of the queue that stands after it.
            *slot = if self.draining { None } else { mean };
        }
        self.next = (self.next + 1) % STANDING_PROBES;
        let standing = self.recent.iter().fold(None, |a, m| least_of(a, *m));
        let queue = match (standing, least_of(self.least, self.fresh)) {
            (Some(standing), Some(least)) => standing.saturating_sub(least),
            _ => Duration::ZERO,
        };
        self.queued |= queue.saturating_mul(2) > target;
        self.probes += 1;
        self.draining = self.queued && self.probes > WINDOW_PROBES - DRAIN_PROBES;
        if self.probes >= WINDOW_PROBES {
            // The window ends. Its reference for the next: what the drain measured if it was
            // queued (the samples before carry the queue, or a store since become slower),
            // else its least.
            let measured = if self.queued { self.drained } else { None };
            self.least = measured.or(self.fresh).or(self.least);
            (self.fresh, self.drained) = (None, None);
            (self.probes, self.queued, self.draining) = (0, false, false);
        }
        if self.draining {
            StoreSays::Drain
        } else {
            StoreSays::Queue(queue)
        }
    }
}

fn least_of(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: fn(u64) -> Duration = Duration::from_micros;
    const TARGET: Duration = Duration::from_millis(1);

    /// The totals a store's calls add up to, probe by probe.
    struct Store {
        queue: StoreQueue,
        calls: u64,
        total: Duration,
    }

    impl Store {
        fn new() -> Store {
            Store {
                queue: StoreQueue::default(),
                calls: 0,
                total: Duration::ZERO,
            }
        }

        fn probe(&mut self, n: u64, each: Duration) -> StoreSays {
            self.calls += n;
            self.total += each * u32::try_from(n).unwrap();
            self.queue.probe(self.calls, self.total, TARGET)
        }
    }

    #[test]
    fn the_queue_is_what_stands_over_the_least() {
        let mut store = Store::new();
        assert_eq!(store.probe(10, US(300)), StoreSays::Queue(Duration::ZERO));
        // A longer mean counts once it stands for the probes' span, not at once.
        for _ in 1..STANDING_PROBES {
            assert_eq!(store.probe(10, US(1_800)), StoreSays::Queue(Duration::ZERO));
        }
        assert_eq!(store.probe(10, US(1_800)), StoreSays::Queue(US(1_500)));
        // No call ended in the interval: the others still stand.
        assert_eq!(store.probe(0, US(0)), StoreSays::Queue(US(1_500)));
        // One short interval clears it at once.
        assert_eq!(store.probe(4, US(450)), StoreSays::Queue(US(150)));
    }

    #[test]
    fn a_far_store_may_queue_as_long_as_its_round_trip() {
        let mut store = Store::new();
        assert_eq!(store.queue.allowance(TARGET), TARGET);
        store.probe(10, US(300));
        assert_eq!(store.queue.allowance(TARGET), TARGET);
        let mut far = Store::new();
        far.probe(10, US(2_500));
        assert_eq!(far.queue.allowance(TARGET), US(2_500));
    }

    #[test]
    fn a_jittery_round_trip_is_no_queue() {
        let mut store = Store::new();
        for i in 0..WINDOW_PROBES * 2 {
            let each = if i % 2 == 0 { US(300) } else { US(4_000) };
            assert_eq!(
                store.probe(10, each),
                StoreSays::Queue(Duration::ZERO),
                "probe {i}"
            );
        }
    }

    #[test]
    fn a_queued_window_ends_with_a_drain_that_measures_the_least_afresh() {
        let mut store = Store::new();
        store.probe(10, US(300));
        // A queue held all window long: the drain comes at its end, and only then.
        for i in 1..WINDOW_PROBES - DRAIN_PROBES {
            let says = store.probe(10, US(1_300));
            let standing = usize::try_from(i).unwrap() >= STANDING_PROBES;
            let queue = if standing { US(1_000) } else { Duration::ZERO };
            assert_eq!(says, StoreSays::Queue(queue), "probe {i}");
        }
        for _ in 0..DRAIN_PROBES - 1 {
            assert_eq!(store.probe(10, US(350)), StoreSays::Drain);
        }
        // The window's last probe closes it (its span was drained: nothing stands); the least
        // is now the drain's 350, not the first 300.
        assert_eq!(store.probe(10, US(350)), StoreSays::Queue(Duration::ZERO));
        for _ in 1..STANDING_PROBES {
            store.probe(10, US(1_350));
        }
        assert_eq!(store.probe(10, US(1_350)), StoreSays::Queue(US(1_000)));
    }

    #[test]
    fn an_unqueued_window_is_not_drained() {
        let mut store = Store::new();
        for _ in 0..WINDOW_PROBES * 2 {
            let says = store.probe(10, US(300));
            assert_eq!(says, StoreSays::Queue(Duration::ZERO));
        }
    }

    #[test]
    fn a_store_slower_for_good_reads_as_queue_for_one_window_at_most() {
        let mut store = Store::new();
        store.probe(10, US(300));
        let mut queued = 0;
        let mut probes = 0;
        while probes < WINDOW_PROBES * 3 {
            probes += 1;
            if store.probe(10, US(5_000)) != StoreSays::Queue(Duration::ZERO) {
                queued += 1;
            }
        }
        assert_eq!(
            queued,
            // From when the longer time stands to the window's end (but its last probe, whose
            // span was drained), and never after.
            WINDOW_PROBES - u32::try_from(STANDING_PROBES).unwrap() - 1,
            "only the first window reads as queue"
        );
    }
}
