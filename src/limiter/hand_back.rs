//! Paying the store what the local mode counted, at most once: a key's owed hits ride on the
//! first call that goes to the store for that key anyway (so they are in the store before its
//! next decision), and a background task hands the rest back in bounded chunks, paced, off the
//! request path. Whatever is sent is no longer owed; it is owed again only when the error says
//! nothing reached the store (`StorageError::was_unsent`), and given up when the outcome is
//! unknown (a timeout: the store may have applied it). So a hand-back is never applied twice.
//!
//! Every store answer in the local mode also teaches this replica's memory the store's count
//! (`Outage::seen`), so that the next outage begins from it.
//!
//! Must not touch: the algorithms' arithmetic, the failure modes' choice (`failure_modes`).

use std::time::Duration;

use super::Limiter;
use super::failure_modes::Failed;
use super::ops::{Destination, Operations};
use crate::storage::{Change, CounterOp, CounterStore};

/// The most keys one hand-back call carries (a store's deadline covers it many times over).
pub(crate) const CHUNK: usize = 512;
/// The pause between two chunks: at most one chunk is in flight beside the live calls, and
/// a hand-back of 100,000 keys (about 200 chunks) took 10.5 s in the debug test build.
const PACE: Duration = Duration::from_millis(5);
/// How long the task waits before asking a store that failed again.
const RETRY: Duration = Duration::from_millis(200);

/// The owed hits added to a call's operations: per destination, the operation's place and the
/// hits added.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    ops: Vec<(Destination, usize, u64)>,
}

impl Carried {
    /// What was carried to `to`, as the increments it was; when the call `failed`, the
    /// operations of `ops` are put back as they were asked (the local mode counts those).
    fn of(&self, to: Destination, ops: &mut Operations, failed: bool) -> Vec<CounterOp> {
        let hits = ops.hits_mut(to);
        self.ops
            .iter()
            .filter(|(d, ..)| *d == to)
            .map(|&(_, at, carried)| {
                let op = &mut hits[at];
                if failed {
                    op.change = Change::Add(op.change.amount().saturating_sub(carried));
                }
                CounterOp {
                    change: Change::Add(carried),
                    ..op.clone()
                }
            })
            .collect()
    }
}

impl<S: CounterStore> Limiter<S> {
    /// Sends `ops`, each to its store: owed hits ride on the operations of their keys, and
    /// the answers settle them (see the module doc).
    pub(super) async fn send(&self, ops: &mut Operations) -> Result<(), Failed> {
        if !self.outage.settles() {
            return ops.apply_each(&self.stores()).await;
        }
        Box::pin(self.send_settling(ops)).await
    }

    /// [`Limiter::send`] when the local mode is in use or something is owed.
    pub(super) async fn send_settling(&self, ops: &mut Operations) -> Result<(), Failed> {
        let carried = match self.outage.owing() && !self.settings.stop_increment_when_over_limit {
            true => self.carry(ops),
            false => Carried::default(),
        };
        let outcome = ops.apply_each(&self.stores()).await;
        let failed = outcome.as_ref().err().map_or(&[][..], Vec::as_slice);
        for to in Destination::ALL {
            if !ops.has(to) {
                continue;
            }
            let error = failed.iter().find(|(d, _)| *d == to).map(|(_, e)| e);
            let theirs = carried.of(to, ops, error.is_some());
            match error {
                Some(error) => self.outage.unpaid(to, &theirs, error),
                None => {
                    self.outage.paid(&theirs);
                    if self.outage.answered(to) && self.outage.owing() {
                        // The store's first answer after an outage: this call's keys could
                        // not carry what they owe, so it follows now, before the decision.
                        self.follow_up(to, ops).await;
                    }
                    if self.outage.wanted() {
                        self.outage.seen(to, ops.hits(to), ops.counts(to));
                    }
                }
            }
        }
        outcome
    }

    /// Adds to each window operation of `ops` bound for a store that answers what its key
    /// owes that store (a store deciding locally carries nothing: the call may be its probe).
    fn carry(&self, ops: &mut Operations) -> Carried {
        let now = self.clock.now_secs();
        let mut carried = Carried::default();
        for to in Destination::ALL {
            if self.outage.is_local(to) {
                continue;
            }
            for (at, op) in ops.hits_mut(to).iter_mut().enumerate() {
                let Change::Add(n) = op.change else { continue };
                if let Some(hits) = self.outage.take_owed(to, &op.key, now) {
                    op.change = Change::Add(n.saturating_add(hits));
                    carried.ops.push((to, at, hits));
                }
            }
        }
        carried
    }

    /// Sends what the keys of `ops` bound for `to` owe, after their call was answered, and
    /// corrects their counts with the store's answers (so the decision includes them).
    async fn follow_up(&self, to: Destination, ops: &mut Operations) {
        let now = self.clock.now_secs();
        let mut owed = Operations::with_capacity(0);
        let mut places = Vec::new();
        for (at, op) in ops.hits(to).iter().enumerate() {
            if !matches!(op.change, Change::Add(_)) {
                continue;
            }
            if let Some(hits) = self.outage.take_owed(to, &op.key, now) {
                let slot = owed.add(
                    to,
                    CounterOp {
                        change: Change::Add(hits),
                        ..op.clone()
                    },
                );
                places.push((at, slot));
            }
        }
        if places.is_empty() {
            return;
        }
        match owed.apply(&self.stores()).await {
            Ok(()) => {
                self.outage.paid(owed.hits(to));
                let counts = ops.counts_mut(to);
                for (at, slot) in places {
                    counts[at] = counts[at].max(owed.count(slot));
                }
            }
            Err(error) => self.outage.unpaid(to, owed.hits(to), &error),
        }
    }

    /// Hands what the local mode counted back to the stores for as long as the service runs:
    /// waits until something is owed, then pays it a chunk at a time.
    pub async fn keep_handing_back(&self) {
        loop {
            self.outage.until_owing().await;
            let mut sent = false;
            for to in Destination::ALL {
                if self.outage.owes(to) {
                    sent |= self.hand_back_chunk(to).await;
                }
            }
            tokio::time::sleep(if sent { PACE } else { RETRY }).await;
        }
    }

    /// Pays one chunk of what `to` owes; whether the store took it. A store last seen failing
    /// is asked first with its readiness check, which carries no count.
    async fn hand_back_chunk(&self, to: Destination) -> bool {
        let stores = self.stores();
        if self.outage.is_local(to) {
            if stores.at(to).ready().await.is_err() {
                return false;
            }
            self.outage.answered(to);
        }
        let chunk = self
            .outage
            .take_owed_chunk(to, self.clock.now_secs(), CHUNK);
        if chunk.is_empty() {
            return false;
        }
        let mut ops = Operations::with_capacity(0);
        for op in &chunk {
            ops.add(to, op.clone());
        }
        match ops.apply(&stores).await {
            Ok(()) => {
                self.outage.paid(&chunk);
                true
            }
            Err(error) => {
                self.outage.unpaid(to, &chunk, &error);
                false
            }
        }
    }
}
