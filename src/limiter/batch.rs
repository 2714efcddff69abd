//! One request's store operations: every counter hit and bucket step of every counted
//! descriptor, sent as (at most) one counter batch and one bucket batch, concurrently, and the
//! answers kept for the decisions.
//!
//! Must not touch: the algorithms' arithmetic (that is `algorithm`'s), rules, protobuf.

use futures_util::future::try_join;

use super::algorithm::{self, Hits, Plan};
use crate::rules::PerUnit;
use crate::storage::{BucketAnswer, BucketStep, CounterStore, Hit, StorageError};

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
