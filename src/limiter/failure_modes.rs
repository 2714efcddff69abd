//! What a request gets when a store it counts in fails: the one place that decides, per call,
//! between the store's answer, a local decision and a refusal. A store only says that it
//! failed (its breaker refuses at once while open, `storage::breaker`); each counted descriptor
//! of a failed store is then decided here by its mode (`unavailable`, `open`, `local`; see
//! `outage`; the hand-back of local counts is `hand_back`'s). The replica marks that learn N
//! are kept from here too.
//!
//! Must not touch: the algorithms' arithmetic, the stores' breakers, protobuf.

use std::num::NonZeroU64;

use super::batch::Batch;
use super::ops::{Destination, Operations};
use super::verdict::{self, Status, Verdict};
use super::{Limiter, StoreFailure};
use crate::storage::{CounterStore, ErrorKind, StorageError};

/// The destinations that failed, each with its error.
pub(crate) type Failed = Vec<(Destination, StorageError)>;

impl<S: CounterStore> Limiter<S> {
    /// The mode of a counted descriptor: its rule's, else the process's.
    pub(super) fn mode_of(&self, status: &Status<'_>) -> StoreFailure {
        status
            .limit
            .and_then(|l| l.applied.rule().and_then(|r| r.on_store_failure))
            .unwrap_or(self.settings.on_store_failure)
    }

    /// The verdict of a request some of whose stores failed: an error when a descriptor of a
    /// failed store is in the `unavailable` mode (or `local` before N is known), else `open`
    /// descriptors answer OK uncounted and `local` ones are counted in this replica's memory.
    pub(super) async fn on_failure<'r>(
        &self,
        failed: Failed,
        mut batch: Batch,
        mut statuses: Vec<Status<'r>>,
    ) -> Result<Verdict<'r>, StorageError> {
        let error_at = |to| failed.iter().find(|(d, _)| *d == to).map(|(_, e)| e);
        let mut open = Vec::new();
        let mut local = [0u64; 3];
        for planned in &batch.planned {
            let to = self.destination(&planned.rate);
            let Some(error) = error_at(to) else { continue };
            match self.mode_of(&statuses[planned.index]) {
                StoreFailure::Unavailable => return Err(error.clone()),
                StoreFailure::Open => open.push(planned.index),
                StoreFailure::Local => local[to.lane()] += 1,
            }
        }
        for (to, error) in &failed {
            let decided = local[to.lane()];
            if decided > 0 {
                let n = self.local_portion(error)?;
                let ops = &mut batch.ops;
                self.outage.count(ops, *to, n, decided, error).await?;
            }
        }
        let mut failed_open = false;
        for planned in &batch.planned {
            let status = &mut statuses[planned.index];
            if open.contains(&planned.index) {
                status.remaining = status.limit.map_or(0, |l| l.rate.requests_per_unit);
                failed_open = true;
            } else {
                let counted_here = error_at(self.destination(&planned.rate)).is_some();
                self.decide_one(&batch, planned, status, !counted_here);
            }
        }
        if failed_open {
            tracing::warn!(
                error = %failed[0].1,
                "counter store failed; answering OK by the fail-open policy"
            );
        }
        Ok(self.counted(statuses, failed_open))
    }

    /// The verdict of a request whose counted descriptors have their statuses.
    pub(super) fn counted<'r>(&self, statuses: Vec<Status<'r>>, failed_open: bool) -> Verdict<'r> {
        let (overall, global_shadowed) = verdict::overall(&statuses, self.settings.shadow_mode);
        Verdict {
            overall,
            statuses,
            domain_found: true,
            global_shadowed,
            failed_open,
        }
    }

    /// The replica count a local decision after `error` divides by, or why there is none: the
    /// store's error is local only when the store is unreachable or late (never Turnstile's
    /// own overload, nor an answer the store gave), and N must be known.
    fn local_portion(&self, error: &StorageError) -> Result<NonZeroU64, StorageError> {
        if !matches!(error.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) {
            return Err(error.clone());
        }
        self.outage.replicas.count().ok_or_else(|| {
            StorageError::new(
                error.kind(),
                format!(
                    "{}; deciding locally needs the number of replicas sharing the store, not \
                     learned from it yet (BACKEND_LOCAL_REPLICAS pins it)",
                    error.what()
                ),
            )
        })
    }

    /// Sends `ops` as [`Limiter::apply`] does, and when a store fails while the process mode
    /// is `local`, counts its operations in this replica's memory with the share (RLQS's
    /// reports and assignments).
    pub(super) async fn apply_or_local(&self, ops: &mut Operations) -> Result<(), StorageError> {
        let failed = match self.send(ops).await {
            Ok(()) => return Ok(()),
            Err(failed) => failed,
        };
        if self.settings.on_store_failure != StoreFailure::Local {
            return Err(failed
                .into_iter()
                .next()
                .map(|(_, e)| e)
                .unwrap_or_else(|| {
                    StorageError::protocol("a failed store call without its error")
                }));
        }
        self.outage.want();
        for (to, error) in &failed {
            let n = self.local_portion(error)?;
            self.outage.count(ops, *to, n, 1, error).await?;
        }
        Ok(())
    }

    /// Keeps this replica's mark in the main store and learns how many replicas share it (for
    /// the local mode's share), when a local-mode descriptor was seen and N is not pinned;
    /// the count learned, or `None` when there was nothing to do.
    pub async fn mark_replica(&self) -> Result<Option<u64>, StorageError> {
        if !self.outage.needs_marks() {
            return Ok(None);
        }
        let now = self.clock.now_secs();
        let replicas = &self.outage.replicas;
        let Some(marking) = replicas.marking(&self.settings.key_prefix, now) else {
            return Ok(None);
        };
        let mut ops = Operations::default();
        let slots = marking.map(|op| ops.add(Destination::Main, op));
        ops.apply(&self.stores()).await?;
        Ok(Some(replicas.marked(now, slots.map(|s| ops.count(s)))))
    }

    /// Keeps this replica's mark in the store for as long as it runs (see
    /// [`Limiter::mark_replica`]); says when the count changes.
    pub async fn keep_marks(&self) {
        let mut last = None;
        loop {
            if let Ok(Some(n)) = self.mark_replica().await
                && last != Some(n)
            {
                tracing::info!(
                    replicas = n,
                    "replicas sharing the counter store (from their marks)"
                );
                last = Some(n);
            }
            tokio::time::sleep(super::replicas::MARK_EVERY).await;
        }
    }

    /// Whether a store that fails is decided locally by default (`BACKEND_FAILURE_MODE=local`):
    /// the process then stays ready.
    pub fn decides_locally(&self) -> bool {
        self.settings.on_store_failure == StoreFailure::Local
    }

    /// What the local mode did (for `/metrics` and `/healthcheck`).
    pub fn outage_readings(&self) -> super::OutageReadings {
        self.outage.readings()
    }
}
