//! One request's counted descriptors: each one's queued plan (where its answers will be in the
//! request's [`Operations`]), sent as one set of store calls, and the hold-back of
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
//!
//! Must not touch: the algorithms' arithmetic (that is `algorithm`'s), rules, protobuf.

use super::algorithm::{Plan, Queued};
use super::ops::{Operations, Stores};
use crate::clock::UnixMillis;
use crate::rules::PerUnit;
use crate::storage::{Change, CounterOp, CounterStore, StorageError, Take};

/// A descriptor that is counted, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    /// Its index in the request.
    pub(crate) index: usize,
    pub(crate) plan: Queued,
    pub(crate) rate: PerUnit,
    pub(crate) take: Take,
}

/// A request's store operations and the descriptors they answer.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The request's time, in Unix milliseconds (one reading for every descriptor).
    pub(crate) now: UnixMillis,
    pub(crate) ops: Operations,
    pub(crate) planned: Vec<Planned>,
}

impl Batch {
    /// An empty batch for a request of `descriptors` decided at `now`, with room for one
    /// operation per descriptor (the common case: fixed windows) so that planning does not
    /// grow its vectors.
    pub(crate) fn at(now: UnixMillis, descriptors: usize) -> Batch {
        Batch {
            now,
            ops: Operations::with_capacity(descriptors),
            planned: Vec::with_capacity(descriptors),
        }
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
        let mut reads = Operations::default();
        // Per incrementing fixed window: its counter, hits, limit and the read of it.
        let fixed: Vec<_> = self
            .planned
            .iter()
            .filter_map(|p| match (p.plan, p.take) {
                (Plan::Fixed { counter, .. }, Take::Take(n)) if n > 0 => {
                    let read = (!cached_over).then(|| {
                        let op = self.ops.op(counter);
                        let read = CounterOp {
                            change: Change::READ,
                            ..op.clone()
                        };
                        reads.add(counter.destination(), read)
                    });
                    Some((counter, n, u64::from(p.rate.requests_per_unit), read))
                }
                _ => None,
            })
            .collect();
        if fixed.is_empty() {
            return Ok(());
        }
        if !cached_over {
            reads.apply(stores).await?;
        }
        let goes_over = |n: u64, limit: u64, read| match read {
            Some(read) => reads.count(read).saturating_add(n) > limit,
            None => false,
        };
        let over: Vec<bool> = fixed
            .iter()
            .map(|&(_, n, limit, read)| goes_over(n, limit, read))
            .collect();
        if !cached_over && !over.contains(&true) {
            return Ok(());
        }
        for (&(counter, ..), over) in fixed.iter().zip(over) {
            if !over {
                self.ops.op_mut(counter).change = Change::READ;
            }
        }
        Ok(())
    }
}
