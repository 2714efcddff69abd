//! One request's store operations: every counter hit and bucket step of every counted
//! descriptor, sent as (at most) one counter batch and one bucket batch, concurrently, and the
//! answers kept for the decisions.
//!
//! Must not touch: the algorithms' arithmetic (that is `algorithm`'s), rules, protobuf.

use std::future::Future;

use futures_util::future::try_join;

use super::algorithm::{self, Hits, Plan};
use crate::rules::PerUnit;
use crate::storage::{BucketAnswer, BucketStep, CounterStore, Hit, Op, StorageError};

/// A descriptor that is counted, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    /// Its index in the request.
    pub(crate) index: usize,
    pub(crate) plan: Plan,
    pub(crate) rate: PerUnit,
    pub(crate) hits: Hits,
}

/// A request's store operations and, after [`Batch::run`], their answers.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// The request's time, in Unix milliseconds (one reading for every descriptor).
    pub(crate) now_ms: u64,
    pub(crate) hits: Vec<Hit>,
    pub(crate) steps: Vec<BucketStep>,
    pub(crate) planned: Vec<Planned>,
    pub(crate) counts: Vec<u64>,
    pub(crate) answers: Vec<BucketAnswer>,
    /// Per hit and per step: it goes to the per-second store (`REDIS_PERSECOND`).
    pub(crate) hits_second: Vec<bool>,
    pub(crate) steps_second: Vec<bool>,
}

/// The stores a batch is sent to: the main one, and the per-second one (SECOND limits) when
/// configured.
#[derive(Debug)]
pub(crate) struct Stores<'s, S> {
    pub(crate) main: &'s S,
    pub(crate) per_second: Option<&'s S>,
}

impl Batch {
    /// An empty batch for a request decided at `now_ms`.
    pub(crate) fn at(now_ms: u64) -> Batch {
        Batch {
            now_ms,
            ..Batch::default()
        }
    }

    /// Adds a descriptor's operations (to the per-second store when `second`); returns its
    /// plan and the index of its first hit.
    pub(crate) fn plan(&mut self, planned: &algorithm::Planned<'_>, second: bool) -> (Plan, usize) {
        let (first, first_step) = (self.hits.len(), self.steps.len());
        let plan = algorithm::plan(planned, &mut self.hits, &mut self.steps);
        // The flags are kept only once some operation goes to the per-second store (no
        // allocation otherwise); a missing flag means the main store.
        if second || !self.hits_second.is_empty() {
            self.hits_second.resize(first, false);
            self.hits_second.resize(self.hits.len(), second);
        }
        if second || !self.steps_second.is_empty() {
            self.steps_second.resize(first_step, false);
            self.steps_second.resize(self.steps.len(), second);
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
        self.hits_second.truncate(self.hits.len());
        self.steps_second.truncate(self.steps.len());
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
            .filter_map(|p| match (p.plan, p.hits) {
                (Plan::Fixed { hit, .. }, Hits::Take(n)) if n > 0 => {
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
            let reads: Vec<Hit> = fixed
                .iter()
                .map(|&(hit, _, _)| Hit {
                    op: Op::Add(0),
                    ..self.hits[hit].clone()
                })
                .collect();
            let flags: Vec<bool> = fixed
                .iter()
                .map(|&(hit, _, _)| self.hits_second.get(hit).copied().unwrap_or(false))
                .collect();
            let before = routed_hits(stores, reads, &flags).await?;
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
                self.hits[hit].op = Op::Add(0);
            }
        }
        Ok(())
    }

    /// Sends the operations: counters and buckets at the same time (and to both stores at the
    /// same time when there is a per-second store).
    pub(crate) async fn run<S: CounterStore>(
        &mut self,
        stores: &Stores<'_, S>,
    ) -> Result<(), StorageError> {
        let (counts, answers) = if self.hits_second.is_empty() && self.steps_second.is_empty() {
            // Everything on the main store: the request path without routing.
            let store = stores.main;
            let counters = async {
                match self.hits.is_empty() {
                    true => Ok(Vec::new()),
                    false => store.hit(&self.hits).await,
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
            let counters = routed_hits(stores, self.hits.clone(), &self.hits_second);
            let buckets = routed_steps(stores, self.steps.clone(), &self.steps_second);
            Box::pin(try_join(counters, buckets)).await?
        };
        self.counts = counts;
        self.answers = answers;
        Ok(())
    }
}

/// `ops` applied by `apply` on their stores (`second[i]`: the per-second one; a missing flag
/// means the main store), answers in order; both stores at the same time.
async fn routed<'a, S, T, A, F, Fut>(
    stores: &Stores<'a, S>,
    ops: Vec<T>,
    second: &[bool],
    apply: F,
) -> Result<Vec<A>, StorageError>
where
    F: Fn(&'a S, Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<A>, StorageError>>,
{
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    let Some(per_second) = stores.per_second.filter(|_| second.contains(&true)) else {
        return apply(stores.main, ops).await;
    };
    let len = ops.len();
    let (main, to_second) = split(ops, second);
    let on_main = async {
        match main.is_empty() {
            true => Ok(Vec::new()),
            false => apply(stores.main, main).await,
        }
    };
    let (a, b) = try_join(on_main, apply(per_second, to_second)).await?;
    Ok(merge(len, second, a, b))
}

/// Counter hits on their stores (see [`routed`]).
pub(crate) async fn routed_hits<S: CounterStore>(
    stores: &Stores<'_, S>,
    hits: Vec<Hit>,
    second: &[bool],
) -> Result<Vec<u64>, StorageError> {
    routed(stores, hits, second, |store, ops| async move {
        store.hit(&ops).await
    })
    .await
}

/// Bucket steps on their stores (see [`routed`]).
async fn routed_steps<S: CounterStore>(
    stores: &Stores<'_, S>,
    steps: Vec<BucketStep>,
    second: &[bool],
) -> Result<Vec<BucketAnswer>, StorageError> {
    routed(stores, steps, second, |store, ops| async move {
        store.bucket(&ops).await
    })
    .await
}

/// The operations for the main store and those for the per-second store (`second[i]`; a
/// missing flag means the main store).
fn split<T>(ops: Vec<T>, second: &[bool]) -> (Vec<T>, Vec<T>) {
    let (mut main, mut routed) = (Vec::new(), Vec::new());
    for (i, op) in ops.into_iter().enumerate() {
        match second.get(i).copied().unwrap_or(false) {
            true => routed.push(op),
            false => main.push(op),
        }
    }
    (main, routed)
}

/// The `len` answers in the operations' order, from the main store's (`a`) and the
/// per-second store's (`b`).
fn merge<T>(len: usize, second: &[bool], a: Vec<T>, b: Vec<T>) -> Vec<T> {
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    (0..len)
        .filter_map(|i| match second.get(i).copied().unwrap_or(false) {
            true => b.next(),
            false => a.next(),
        })
        .collect()
}
