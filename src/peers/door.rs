//! The door's budget in time: how many requests may be open at once (read, not yet answered,
//! in all peers' allotments) so that a call arriving now waits at most a few milliseconds behind
//! them. A count alone (`GRPC_FAIR_REQUESTS_OPEN`) cannot say that: 1,024 requests open are
//! 8 ms of work on one core at 120,000 calls/s and 0.1 ms on sixteen, so the count stays as the
//! ceiling and this controller keeps the budget under it.
//!
//! The signal is the runtime's queue itself, as a newcomer meets it: every [`PROBE_EVERY`] a
//! task yields and measures how long it waits to be polled again, behind every task that is
//! ready (the streams the door let in, the connections' reads and writes). The budget is
//! steered on it as CoDel steers its drop rate on sojourn time and TCP its window on loss:
//! a probe over the target shrinks the budget in proportion (`target / delay`, at most
//! halved), a probe under half the target grows it by a sixteenth, and in between it holds.
//! Waiting on a store puts nothing in the runtime's queue; the store has a queue of its own
//! (its pipeline, or its pool), which [`store`] reads from the store calls' time over the least
//! it takes. The budget is steered on the longer of the two queues, against the one target: a
//! store's round trip alone does not shrink it, the calls the door let in queued at the store
//! do.
//!
//! Why this orders calls by peer without a queue of our own: the door reads a peer's
//! connections only while the peer has fewer than its allotment of the budget open, and the allotments
//! are equal among the peers with requests open. Every peer's backlog waits in its own socket
//! buffers (the kernel's TCP flow control), one queue per peer; the runtime's queue holds at
//! most each peer's allotment. A peer within its allotment is read at once and its call waits behind at
//! most the budget (the time target), never behind another peer's backlog: deficit round
//! robin with a quantum of one allotment per peer, the kernel's buffers being the per-peer queues.
//! A peer alone gets the whole budget.
//!
//! Must not touch: protocols, the decision, the stores; what is counted per peer (the parent
//! module owns that).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Peers;

pub mod store;

use store::{StoreQueue, StoreSays};

/// How often the runtime's queue is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(2);

/// The budget never falls below this many requests open in all.
pub const FLOOR: u32 = 16;

/// The budget after a probe that waited `delay` against `target`, from `budget`, never above
/// `ceiling` (nor below [`FLOOR`] unless the ceiling is lower).
pub fn next_budget(budget: u32, ceiling: u32, delay: Duration, target: Duration) -> u32 {
    let floor = FLOOR.min(ceiling);
    let budget = budget.clamp(floor, ceiling);
    let (delay_us, target_us) = (delay.as_micros(), target.as_micros().max(1));
    if delay_us > target_us {
        // At most 2^32 x 2^84 (Duration::MAX in microseconds): no overflow in u128.
        let scaled = u128::from(budget) * target_us / delay_us;
        let scaled = u32::try_from(scaled).unwrap_or(u32::MAX);
        scaled.max(budget / 2).max(floor)
    } else if delay_us * 2 <= target_us {
        budget.saturating_add(budget / 16 + 1).min(ceiling)
    } else {
        budget
    }
}

impl Peers {
    /// Keeps the door's budget within `target` of queueing, for as long as it runs (the
    /// server runs it beside its connections); a zero target leaves the count alone.
    pub async fn keep_door_in_time(self: Arc<Self>, target: Duration) {
        if target.is_zero() {
            return;
        }
        let mut store = StoreQueue::default();
        // The budget to go back to after a drain of the store's queue.
        let mut before_drain = None;
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let started = Instant::now();
            tokio::task::yield_now().await;
            let delay = started.elapsed();
            let (calls, total) = self.tally.readings.store_calls();
            match store.probe(calls, total, target) {
                StoreSays::Drain => {
                    let now = self.timed_budget();
                    before_drain.get_or_insert(now);
                    let ceiling = self.tally.budget.load(Ordering::Relaxed);
                    self.set_timed(FLOOR.min(ceiling).min(now), delay, Duration::ZERO);
                }
                StoreSays::Queue(queue) => {
                    if let Some(before) = before_drain.take() {
                        self.set_timed(before, delay, queue);
                    }
                    let scaled = store.on_target_scale(queue, target);
                    self.steer(delay, scaled, queue, target);
                }
            }
        }
    }

    /// One probe's measures applied to the budget: the longer of the runtime's queue and the
    /// store's against the target. `scaled` is the store's queue on the target's scale
    /// ([`StoreQueue::on_target_scale`]), `store_queue` the same as measured (for the gauge).
    fn steer(&self, delay: Duration, scaled: Duration, store_queue: Duration, target: Duration) {
        let ceiling = self.tally.budget.load(Ordering::Relaxed);
        let next = next_budget(self.timed_budget(), ceiling, delay.max(scaled), target);
        self.set_timed(next, delay, store_queue);
    }

    fn timed_budget(&self) -> u32 {
        self.tally.timed.load(Ordering::Relaxed)
    }

    fn set_timed(&self, budget: u32, delay: Duration, store_queue: Duration) {
        self.tally.timed.store(budget, Ordering::Relaxed);
        self.tally.readings.set_door(budget, delay, store_queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_queue_over_the_target_shrinks_the_budget_in_proportion_at_most_by_half() {
        assert_eq!(next_budget(512, 512, MS(2), MS(1)), 256);
        assert_eq!(next_budget(512, 512, MS(20), MS(1)), 256);
        assert_eq!(
            next_budget(400, 512, Duration::from_micros(1_250), MS(1)),
            320
        );
    }

    #[test]
    fn a_short_queue_grows_it_to_the_ceiling_and_a_middling_one_holds_it() {
        assert_eq!(
            next_budget(256, 512, Duration::from_micros(400), MS(1)),
            273
        );
        assert_eq!(next_budget(510, 512, Duration::ZERO, MS(1)), 512);
        assert_eq!(
            next_budget(300, 512, Duration::from_micros(800), MS(1)),
            300
        );
    }

    #[test]
    fn the_floor_and_the_ceiling_hold_whatever_the_probe() {
        assert_eq!(next_budget(16, 512, MS(1_000), MS(1)), FLOOR);
        assert_eq!(next_budget(u32::MAX, 512, Duration::ZERO, MS(1)), 512);
        // A ceiling under the floor (a tiny GRPC_FAIR_REQUESTS_OPEN) is the ceiling.
        assert_eq!(next_budget(8, 8, MS(1_000), MS(1)), 8);
        // A budget set lower than the ceiling later (the adaptive limit fell) follows it.
        assert_eq!(next_budget(900, 100, Duration::ZERO, MS(1)), 100);
    }

    #[test]
    fn the_longer_of_the_runtimes_queue_and_the_stores_steers_the_budget() {
        use crate::metrics::PeerReadings;
        let limits = crate::peers::ConnectionLimits {
            max: 8,
            per_peer: 8,
        };
        let readings = Arc::new(PeerReadings::default());
        let peers = Peers::new(limits, 2, Arc::clone(&readings));
        peers.set_budget(512);
        // A short runtime queue, a store queue of twice the target: halved, as said.
        peers.steer(Duration::from_micros(100), MS(2), MS(2), MS(1));
        assert_eq!(peers.timed_budget(), 256);
        assert_eq!(
            readings.door(),
            (Some(256), Duration::from_micros(100), MS(2))
        );
        // Both short: grown by a sixteenth.
        let short = Duration::from_micros(200);
        peers.steer(Duration::from_micros(100), short, short, MS(1));
        assert_eq!(peers.timed_budget(), 273);
        // The runtime's queue long, the store's empty: the runtime's rules.
        peers.steer(MS(4), Duration::ZERO, Duration::ZERO, MS(1));
        assert_eq!(peers.timed_budget(), 136);
    }

    #[test]
    fn a_flood_settles_the_budget_where_the_queue_meets_the_target() {
        // A runtime whose queue is the budget times 8 µs of work: from the ceiling the budget
        // falls to where the queue is within the target and stays in its band.
        let mut budget = 512;
        let work = Duration::from_micros(8);
        for _ in 0..200 {
            budget = next_budget(budget, 512, work * budget, MS(1));
        }
        let queue = work * budget;
        assert!(
            queue <= MS(1) && queue >= Duration::from_micros(500),
            "{queue:?}"
        );
    }
}
