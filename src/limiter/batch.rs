//! One request's store operations: every counter hit and bucket step of every counted
//! descriptor, sent as (at most) one counter batch and one bucket batch, concurrently, and the
//! answers kept for the decisions.
//!
//! Must not touch: the algorithms' arithmetic (that is `algorithm`'s), rules, protobuf.

use std::future::Future;

use futures_util::future::{try_join, try_join3};

use super::algorithm::{self, Plan};
use crate::rules::PerUnit;
use crate::storage::{
    BucketAnswer, BucketStep, Change, CounterOp, CounterStore, StorageError, Take,
};

/// A descriptor that is counted, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    /// Its index in the request.
    pub(crate) index: usize,
    pub(crate) plan: Plan,
    pub(crate) rate: PerUnit,
    pub(crate) take: Take,
}

/// A request's store operations and, after [`Batch::run`], their answers.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The request's time, in Unix milliseconds (one reading for every descriptor).
    pub(crate) now_ms: u64,
    pub(crate) hits: Vec<CounterOp>,
    pub(crate) steps: Vec<BucketStep>,
    pub(crate) planned: Vec<Planned>,
    pub(crate) counts: Vec<u64>,
    pub(crate) answers: Vec<BucketAnswer>,
    /// Per hit and per step: the store it goes to (kept only once one goes elsewhere than
    /// the main store; a missing entry means the main store).
    pub(crate) hits_to: Vec<Destination>,
    pub(crate) steps_to: Vec<Destination>,
}

/// The store an operation goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Destination {
    /// `BACKEND_TYPE`'s store.
    #[default]
    Main,
    /// `REDIS_PERSECOND`: the counters of SECOND limits.
    PerSecond,
    /// `POSTGRES_FROM_UNIT`: the counters of long windows, in PostgreSQL.
    Durable,
}

/// The stores a batch is sent to: the main one, and the per-second and durable ones when
/// configured.
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
    fn at(&self, to: Destination) -> &S {
        match to {
            Destination::Main => self.main,
            Destination::PerSecond => self.per_second.unwrap_or(self.main),
            Destination::Durable => self.durable.unwrap_or(self.main),
        }
    }
}

impl Batch {
    /// An empty batch for a request of `descriptors` decided at `now_ms`, with room for one
    /// operation per descriptor (the common case: fixed windows) so that planning does not
    /// grow its vectors.
    pub(crate) fn at(now_ms: u64, descriptors: usize) -> Batch {
        Batch {
            now_ms,
            hits: Vec::with_capacity(descriptors),
            planned: Vec::with_capacity(descriptors),
            ..Batch::default()
        }
    }

    /// Adds a descriptor's operations, bound for `to`; returns its plan and the index of its
    /// first hit.
    pub(crate) fn plan(
        &mut self,
        input: &algorithm::PlanInput<'_>,
        to: Destination,
    ) -> (Plan, usize) {
        let (first, first_step) = (self.hits.len(), self.steps.len());
        let plan = algorithm::plan(input, &mut self.hits, &mut self.steps);
        // Destinations are kept only once some operation goes elsewhere than the main store
        // (no allocation otherwise); a missing entry means the main store.
        let elsewhere = to != Destination::Main;
        if elsewhere || !self.hits_to.is_empty() {
            self.hits_to.resize(first, Destination::Main);
            self.hits_to.resize(self.hits.len(), to);
        }
        if elsewhere || !self.steps_to.is_empty() {
            self.steps_to.resize(first_step, Destination::Main);
            self.steps_to.resize(self.steps.len(), to);
        }
        (plan, first)
    }

    /// Takes back the operations of the plan just made (answered without the store).
    pub(crate) fn unplan(&mut self, plan: Plan) {
        match plan {
            Plan::Fixed { hit, .. } | Plan::Lease { hit } => self.hits.truncate(hit),
            Plan::Sliding { current, .. } => self.hits.truncate(current),
            Plan::Bucket { step, .. } => self.steps.truncate(step),
        }
        self.hits_to.truncate(self.hits.len());
        self.steps_to.truncate(self.steps.len());
    }

    /// The request indexes of the counted descriptors.
    pub(crate) fn counted(&self) -> Vec<usize> {
        self.planned.iter().map(|p| p.index).collect()
    }

    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: reads every fixed-window counter this batch
    /// would increment; when one of them would go over its limit (or `cached_over`: the local
    /// cache already refused a descriptor of the request), the others become reads, so only
    /// the counters that go over are incremented (none with `cached_over`). One more round
    /// trip, and not atomic with the increments that follow (as in the reference).
    pub(crate) async fn hold_back<S: CounterStore>(
        &mut self,
        stores: &Stores<'_, S>,
        cached_over: bool,
    ) -> Result<(), StorageError> {
        let fixed: Vec<(usize, u64, u64)> = self
            .planned
            .iter()
            .filter_map(|p| match (p.plan, p.take) {
                (Plan::Fixed { hit, .. }, Take::Take(n)) if n > 0 => {
                    Some((hit, n, u64::from(p.rate.requests_per_unit)))
                }
                _ => None,
            })
            .collect();
        if fixed.is_empty() {
            return Ok(());
        }
        let goes_over: Vec<bool> = if cached_over {
            vec![false; fixed.len()]
        } else {
            let reads: Vec<CounterOp> = fixed
                .iter()
                .map(|&(hit, _, _)| CounterOp {
                    change: Change::Add(0),
                    ..self.hits[hit].clone()
                })
                .collect();
            let to: Vec<Destination> = fixed
                .iter()
                .map(|&(hit, _, _)| self.hits_to.get(hit).copied().unwrap_or_default())
                .collect();
            let before = routed_hits(stores, reads, &to).await?;
            let over: Vec<bool> = fixed
                .iter()
                .zip(&before)
                .map(|(&(_, n, limit), &count)| count.saturating_add(n) > limit)
                .collect();
            if !over.contains(&true) {
                return Ok(());
            }
            over
        };
        for (&(hit, _, _), over) in fixed.iter().zip(goes_over) {
            if !over {
                self.hits[hit].change = Change::Add(0);
            }
        }
        Ok(())
    }

    /// Sends the operations: counters and buckets at the same time (and to every store they
    /// go to at the same time).
    pub(crate) async fn run<S: CounterStore>(
        &mut self,
        stores: &Stores<'_, S>,
    ) -> Result<(), StorageError> {
        let (counts, answers) = if self.hits_to.is_empty() && self.steps_to.is_empty() {
            // Everything on the main store: the request path without routing.
            let store = stores.main;
            let counters = async {
                match self.hits.is_empty() {
                    true => Ok(Vec::new()),
                    false => store.apply_ops(&self.hits).await,
                }
            };
            let buckets = async {
                match self.steps.is_empty() {
                    true => Ok(Vec::new()),
                    false => store.bucket(&self.steps).await,
                }
            };
            try_join(counters, buckets).await?
        } else {
            // Boxed, so that the routing's futures do not grow every request's future.
            let counters = routed_hits(stores, self.hits.clone(), &self.hits_to);
            let buckets = routed_steps(stores, self.steps.clone(), &self.steps_to);
            Box::pin(try_join(counters, buckets)).await?
        };
        self.counts = counts;
        self.answers = answers;
        Ok(())
    }
}

/// `ops` applied by `apply_ops` on their stores (`to[i]`; a missing entry means the main store),
/// answers in order; every store at the same time.
async fn routed<'a, S, T, A, F, Fut>(
    stores: &'a Stores<'a, S>,
    ops: Vec<T>,
    to: &[Destination],
    apply: F,
) -> Result<Vec<A>, StorageError>
where
    F: Fn(&'a S, Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StorageError>>,
{
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    if to.iter().all(|d| *d == Destination::Main) {
        return apply(stores.main, ops).await;
    }
    let len = ops.len();
    let [main, second, durable] = split(ops, to);
    let on = |store: &'a S, ops: Vec<T>| {
        let call = (!ops.is_empty()).then(|| apply(store, ops));
        async move {
            match call {
                Some(call) => call.await,
                None => Ok(Vec::new()),
            }
        }
    };
    let (a, b, c) = try_join3(
        on(stores.main, main),
        on(stores.at(Destination::PerSecond), second),
        on(stores.at(Destination::Durable), durable),
    )
    .await?;
    Ok(merge(len, to, [a, b, c]))
}

/// Counter hits on their stores (see [`routed`]).
pub(crate) async fn routed_hits<S: CounterStore>(
    stores: &Stores<'_, S>,
    hits: Vec<CounterOp>,
    to: &[Destination],
) -> Result<Vec<u64>, StorageError> {
    routed(stores, hits, to, |store, ops| async move {
        store.apply_ops(&ops).await
    })
    .await
}

/// Bucket steps on their stores (see [`routed`]).
async fn routed_steps<S: CounterStore>(
    stores: &Stores<'_, S>,
    steps: Vec<BucketStep>,
    to: &[Destination],
) -> Result<Vec<BucketAnswer>, StorageError> {
    routed(stores, steps, to, |store, ops| async move {
        store.bucket(&ops).await
    })
    .await
}

fn slot(to: Destination) -> usize {
    match to {
        Destination::Main => 0,
        Destination::PerSecond => 1,
        Destination::Durable => 2,
    }
}

/// The operations for the main, per-second and durable stores (`to[i]`; a missing entry
/// means the main store).
fn split<T>(ops: Vec<T>, to: &[Destination]) -> [Vec<T>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for (i, op) in ops.into_iter().enumerate() {
        out[slot(to.get(i).copied().unwrap_or_default())].push(op);
    }
    out
}

/// The `len` answers in the operations' order, from each store's answers.
fn merge<T>(len: usize, to: &[Destination], answers: [Vec<T>; 3]) -> Vec<T> {
    let mut answers = answers.map(Vec::into_iter);
    (0..len)
        .filter_map(|i| answers[slot(to.get(i).copied().unwrap_or_default())].next())
        .collect()
}
