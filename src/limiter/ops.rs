//! The one port to the stores: operations bound for the main, per-second or durable store,
//! each answered in place. An operation is added with its [`Destination`] and gives back a
//! typed slot ([`CountSlot`], [`StepSlot`]) that reads its answer after [`Limiter::apply`](super::Limiter::apply);
//! each store gets at most one counter call and one token-bucket call, every store at the same time.
//! RLS, RLQS and the counters API all go through here; nothing else calls a store.
//!
//! Must not touch: the algorithms' arithmetic, rules, protobuf.

use futures_util::future::{join3, try_join};

use crate::storage::{Change, CounterOp, CounterStore, StorageError, Take, TokenAnswer, TokenStep};

/// The store an operation goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Destination {
    /// `BACKEND_TYPE`'s store.
    #[default]
    Main,
    /// `REDIS_PERSECOND`: the counters of SECOND limits.
    PerSecond,
    /// `POSTGRES_FROM_UNIT`: the counters of long windows, in PostgreSQL.
    Durable,
}

impl Destination {
    /// Every destination, in the order of their lanes.
    pub(crate) const ALL: [Destination; 3] = [
        Destination::Main,
        Destination::PerSecond,
        Destination::Durable,
    ];

    pub(crate) fn lane(self) -> usize {
        match self {
            Destination::Main => 0,
            Destination::PerSecond => 1,
            Destination::Durable => 2,
        }
    }
}

/// Where a counter operation's answer is: its store, and its place among that store's
/// counter operations. Only [`Operations::add`] makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountSlot {
    to: Destination,
    at: usize,
}

impl CountSlot {
    /// The store the operation goes to.
    pub fn destination(self) -> Destination {
        self.to
    }
}

/// Where a token-bucket step's answer is (see [`CountSlot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSlot {
    to: Destination,
    at: usize,
}

/// One store's share of the operations, and after `apply` its answers (as many as operations).
#[derive(Debug, Default)]
struct Lane {
    hits: Vec<CounterOp>,
    steps: Vec<TokenStep>,
    counts: Vec<u64>,
    answers: Vec<TokenAnswer>,
}

/// A set of store operations, each with its destination, and after [`Limiter::apply`](super::Limiter::apply)
/// their answers.
#[derive(Debug, Default)]
pub struct Operations {
    lanes: [Lane; 3],
}

/// The stores operations are sent to: the main one, and the per-second and durable ones when
/// configured (an operation bound for one that is not falls back to the main store).
#[derive(Debug)]
pub(crate) struct Stores<'s, S> {
    pub(crate) main: &'s S,
    pub(crate) per_second: Option<&'s S>,
    pub(crate) durable: Option<&'s S>,
}

impl<S: CounterStore> Stores<'_, S> {
    /// Whether the store at `to` is durable.
    pub(crate) fn durable_at(&self, to: Destination) -> bool {
        self.at(to).durable()
    }
}

impl<S> Stores<'_, S> {
    pub(crate) fn at(&self, to: Destination) -> &S {
        match to {
            Destination::Main => self.main,
            Destination::PerSecond => self.per_second.unwrap_or(self.main),
            Destination::Durable => self.durable.unwrap_or(self.main),
        }
    }
}

impl Operations {
    /// No operations yet, with room for `counters` counter operations on the main store (the
    /// common case), so that adding them does not grow a vector.
    pub fn with_capacity(counters: usize) -> Operations {
        let mut ops = Operations::default();
        ops.lanes[0].hits.reserve_exact(counters);
        ops
    }

    /// Adds a counter operation bound for `to`; its count is read with [`Operations::count`].
    pub fn add(&mut self, to: Destination, op: CounterOp) -> CountSlot {
        let hits = &mut self.lanes[to.lane()].hits;
        hits.push(op);
        CountSlot {
            to,
            at: hits.len() - 1,
        }
    }

    /// Adds a token-bucket step bound for `to`; its answer is read with [`Operations::answer`].
    pub fn add_step(&mut self, to: Destination, step: TokenStep) -> StepSlot {
        let steps = &mut self.lanes[to.lane()].steps;
        steps.push(step);
        StepSlot {
            to,
            at: steps.len() - 1,
        }
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.lanes
            .iter()
            .all(|l| l.hits.is_empty() && l.steps.is_empty())
    }

    /// The counter operation at `slot`.
    pub fn op(&self, slot: CountSlot) -> &CounterOp {
        &self.lanes[slot.to.lane()].hits[slot.at]
    }

    /// The counter operation at `slot`, to change before it is sent.
    pub(crate) fn op_mut(&mut self, slot: CountSlot) -> &mut CounterOp {
        &mut self.lanes[slot.to.lane()].hits[slot.at]
    }

    /// The count after the operation at `slot` (after a successful [`Limiter::apply`](super::Limiter::apply),
    /// which checks that every operation has its answer).
    pub fn count(&self, slot: CountSlot) -> u64 {
        self.lanes[slot.to.lane()].counts[slot.at]
    }

    /// The answer to the token-bucket step at `slot` (see [`Operations::count`]).
    pub fn answer(&self, slot: StepSlot) -> TokenAnswer {
        self.lanes[slot.to.lane()].answers[slot.at]
    }

    /// Sends every operation to its store, counters and token buckets and every store at the same
    /// time, and keeps the answers. Either every operation is answered or an error comes back.
    pub(crate) async fn apply<S: CounterStore>(
        &mut self,
        stores: &Stores<'_, S>,
    ) -> Result<(), StorageError> {
        match self.apply_each(stores).await {
            Ok(()) => Ok(()),
            Err(mut failed) => Err(failed.swap_remove(0).1),
        }
    }

    /// As [`Operations::apply`], but a store that fails leaves only its own operations
    /// unanswered: the error is each failed destination's, and the others' answers are kept.
    pub(crate) async fn apply_each<S: CounterStore>(
        &mut self,
        stores: &Stores<'_, S>,
    ) -> Result<(), Vec<(Destination, StorageError)>> {
        let [main, second, durable] = &mut self.lanes;
        if second.is_idle() && durable.is_idle() {
            // Everything on the main store: the request path without routing.
            return main
                .apply(stores.main)
                .await
                .map_err(|e| vec![(Destination::Main, e)]);
        }
        // Boxed, so that the routing's futures do not grow every request's future.
        let answers = Box::pin(join3(
            main.apply(stores.main),
            second.apply(stores.at(Destination::PerSecond)),
            durable.apply(stores.at(Destination::Durable)),
        ))
        .await;
        let failed: Vec<_> = [answers.0, answers.1, answers.2]
            .into_iter()
            .zip(Destination::ALL)
            .filter_map(|(answer, to)| answer.err().map(|e| (to, e)))
            .collect();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(failed),
        }
    }

    /// Answers the operations bound for `to` from `store` instead, each amount `scale` times
    /// what was asked (the local mode: a hit counts for every replica sharing the limit).
    pub(crate) async fn apply_scaled<S: CounterStore>(
        &mut self,
        to: Destination,
        store: &S,
        scale: u64,
    ) -> Result<(), StorageError> {
        let lane = &mut self.lanes[to.lane()];
        let hits: Vec<CounterOp> = lane
            .hits
            .iter()
            .map(|op| CounterOp {
                change: scaled_change(op.change, scale),
                ..op.clone()
            })
            .collect();
        let steps: Vec<TokenStep> = lane
            .steps
            .iter()
            .map(|step| TokenStep {
                take: match step.take {
                    Take::Take(n) => Take::Take(n.saturating_mul(scale)),
                    Take::Refund(n) => Take::Refund(n.saturating_mul(scale)),
                },
                ..step.clone()
            })
            .collect();
        let (counts, answers) = answer(store, &hits, &steps).await?;
        lane.counts = counts;
        lane.answers = answers;
        Ok(())
    }

    /// The counter operations bound for `to`.
    pub(crate) fn hits(&self, to: Destination) -> &[CounterOp] {
        &self.lanes[to.lane()].hits
    }

    /// The counter operations bound for `to`, to change before they are sent.
    pub(crate) fn hits_mut(&mut self, to: Destination) -> &mut [CounterOp] {
        &mut self.lanes[to.lane()].hits
    }

    /// The counts of the operations bound for `to` (in their order), once answered.
    pub(crate) fn counts(&self, to: Destination) -> &[u64] {
        &self.lanes[to.lane()].counts
    }

    /// The counts of the operations bound for `to`, to correct after a follow-up call.
    pub(crate) fn counts_mut(&mut self, to: Destination) -> &mut [u64] {
        &mut self.lanes[to.lane()].counts
    }

    /// Whether any operation is bound for `to`.
    pub(crate) fn has(&self, to: Destination) -> bool {
        !self.lanes[to.lane()].is_idle()
    }
}

/// `change` with its amount `scale` times as large.
fn scaled_change(change: Change, scale: u64) -> Change {
    match change {
        Change::Add(n) => Change::Add(n.saturating_mul(scale)),
        Change::Sub(n) => Change::Sub(n.saturating_mul(scale)),
        Change::Lease(n) => Change::Lease(n.saturating_mul(scale)),
        Change::Release(n) => Change::Release(n.saturating_mul(scale)),
    }
}

/// `store`'s answers to `hits` and `steps`: one call for one kind of operation (the common
/// case), a join for both, boxed so that it does not double every request's future.
async fn answer<S: CounterStore>(
    store: &S,
    hits: &[CounterOp],
    steps: &[TokenStep],
) -> Result<(Vec<u64>, Vec<TokenAnswer>), StorageError> {
    let (counts, answers) = match (hits.is_empty(), steps.is_empty()) {
        (true, true) => (Vec::new(), Vec::new()),
        (false, true) => (store.apply_ops(hits).await?, Vec::new()),
        (true, false) => (Vec::new(), store.take_tokens(steps).await?),
        (false, false) => {
            Box::pin(try_join(store.apply_ops(hits), store.take_tokens(steps))).await?
        }
    };
    if counts.len() != hits.len() || answers.len() != steps.len() {
        return Err(StorageError::protocol(format!(
            "{} answers to {} operations",
            counts.len() + answers.len(),
            hits.len() + steps.len()
        )));
    }
    Ok((counts, answers))
}

impl Lane {
    fn is_idle(&self) -> bool {
        self.hits.is_empty() && self.steps.is_empty()
    }

    async fn apply<S: CounterStore>(&mut self, store: &S) -> Result<(), StorageError> {
        let (counts, answers) = answer(store, &self.hits, &self.steps).await?;
        self.counts = counts;
        self.answers = answers;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::storage::Change;
    use crate::storage::memory::MemoryStore;
    use std::sync::Arc;

    fn add(n: u64, key: &str) -> CounterOp {
        CounterOp {
            key: crate::storage::CounterKey::checked(key).expect("key"),
            change: Change::Add(n),
            expires_at: 2_000_000_000,
        }
    }

    #[tokio::test]
    async fn each_operation_is_answered_by_its_own_store() {
        let clock = Arc::new(ManualClock::new(1_800_000_000));
        let (main, second) = (
            MemoryStore::new(100, clock.clone()),
            MemoryStore::new(100, clock),
        );
        let stores = Stores {
            main: &main,
            per_second: Some(&second),
            durable: None,
        };
        let mut ops = Operations::default();
        let a = ops.add(Destination::Main, add(2, "k"));
        let b = ops.add(Destination::PerSecond, add(5, "k"));
        let c = ops.add(Destination::Durable, add(1, "j"));
        ops.apply(&stores).await.expect("applied");
        assert_eq!((ops.count(a), ops.count(b), ops.count(c)), (2, 5, 1));
        // The durable store is not configured: its operation counted on the main one.
        let mut main_only = Operations::default();
        let j = main_only.add(Destination::Main, add(0, "j"));
        main_only.apply(&stores).await.expect("applied");
        assert_eq!(main_only.count(j), 1);
        let mut again = Operations::default();
        let d = again.add(Destination::PerSecond, add(0, "k"));
        again.apply(&stores).await.expect("applied");
        assert_eq!(again.count(d), 5);
    }
}
