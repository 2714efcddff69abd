//! One request's store operations: every counter hit and bucket step of every counted
//! descriptor, sent as (at most) one counter batch and one bucket batch, concurrently, and the
//! answers kept for the decisions.
//!
//! Must not touch: the algorithms' arithmetic (that is `algorithm`'s), rules, protobuf.

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
}

impl Batch {
    /// An empty batch for a request decided at `now_ms`.
    pub(crate) fn at(now_ms: u64) -> Batch {
        Batch {
            now_ms,
            ..Batch::default()
        }
    }

    /// Adds a descriptor's operations; returns its plan and the index of its first hit.
    pub(crate) fn plan(&mut self, planned: &algorithm::Planned<'_>) -> (Plan, usize) {
        let first = self.hits.len();
        let plan = algorithm::plan(planned, &mut self.hits, &mut self.steps);
        (plan, first)
    }

    /// Takes back the operations of the plan just made (answered without the store).
    pub(crate) fn unplan(&mut self, plan: Plan) {
        match plan {
            Plan::Fixed { hit, .. } | Plan::Lease { hit } => self.hits.truncate(hit),
            Plan::Sliding { current, .. } => self.hits.truncate(current),
            Plan::Bucket { step, .. } => self.steps.truncate(step),
        }
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
        store: &S,
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
            let before = store.hit(&reads).await?;
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

    /// Sends the operations: counters and buckets at the same time.
    pub(crate) async fn run<S: CounterStore>(&mut self, store: &S) -> Result<(), StorageError> {
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
        let (counts, answers) = try_join(counters, buckets).await?;
        self.counts = counts;
        self.answers = answers;
        Ok(())
    }
}
