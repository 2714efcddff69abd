//! Token buckets on memcached. A bucket's state (its TAT) is one item updated by
//! compare-and-swap: `mg <key> b v c`, the GCRA step computed here ([`TokenStep::apply`]), then
//! `ms <key> ... C<cas>` (or `ME` to create it). Steps on the same key inside this process are
//! coalesced: while one update of a key is out, later steps queue, and the next update applies
//! all of them to one read and writes once, so a hot key costs one CAS per batch instead of a
//! retry storm of one per caller. A lost race re-reads and re-applies after a short random
//! pause ([`LOST_RACE`], spread over 0..2x), at most [`MAX_ATTEMPTS`] times; then every waiting
//! step gets an error, never an unearned answer. The pause matters between replicas: two
//! processes draining the same hot key back to back otherwise meet in the same read-to-write
//! window round after round, and one can lose every round (seen in CI, two replicas, 64
//! callers, a loaded machine).
//!
//! Must not touch: the GCRA arithmetic (that is `storage::token_bucket`'s), rules, the limiter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::transport::{Sent, StateWrite, Transport};
use super::{Inner, MemcachedStore};
use crate::backoff::{Schedule, spread};
use crate::storage::{CounterKey, StorageError, TokenAnswer, TokenStep};

/// Compare-and-swap rounds one batch may take before it gives up with an error.
pub(super) const MAX_ATTEMPTS: u32 = 12;

/// The pause after a lost race: 100 µs, doubling per loss in a row up to 5 ms, each spread by
/// up to all of itself either way (so at most about 40 ms over every round of one batch).
const LOST_RACE: Schedule =
    Schedule::new(Duration::from_micros(100), Duration::from_millis(5), 2.0);

type Reply = oneshot::Sender<Result<TokenAnswer, StorageError>>;

/// Steps waiting per token-bucket key while an update of that key is out.
#[derive(Debug, Default)]
pub(super) struct StepQueue {
    waiting: Mutex<HashMap<CounterKey, Vec<(TokenStep, Reply)>>>,
}

impl StepQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CounterKey, Vec<(TokenStep, Reply)>>> {
        crate::storage::remote::lock(&self.waiting)
    }

    /// Queues a step; `true` when no update of its key is out, so the caller must start one.
    fn enqueue(&self, step: TokenStep, reply: Reply) -> bool {
        let mut waiting = self.lock();
        match waiting.get_mut(&step.key) {
            Some(queue) => {
                queue.push((step, reply));
                false
            }
            None => {
                waiting.insert(step.key.clone(), vec![(step, reply)]);
                true
            }
        }
    }

    /// Every step queued for `key`; when none is left the key is forgotten (the update ends).
    fn take(&self, key: &CounterKey) -> Vec<(TokenStep, Reply)> {
        let mut waiting = self.lock();
        match waiting.get_mut(key) {
            Some(queue) if !queue.is_empty() => std::mem::take(queue),
            _ => {
                waiting.remove(key);
                Vec::new()
            }
        }
    }
}

impl MemcachedStore {
    /// One step, coalesced with the other steps on its key in this process.
    pub(super) async fn token_step(&self, step: TokenStep) -> Result<TokenAnswer, StorageError> {
        let (reply, answer) = oneshot::channel();
        let key = step.key.clone();
        if self.inner.step_queue.enqueue(step, reply) {
            // The update runs on its own task, so a caller that gives up (deadline, cancelled
            // request) never strands the steps queued behind it.
            let inner = Arc::clone(&self.inner);
            tokio::spawn(async move { inner.drain_token_bucket(key).await });
        }
        answer
            .await
            .map_err(|_| StorageError::protocol("token bucket update ended without an answer"))?
    }
}

impl Inner {
    /// Applies every queued step of `key`, batch after batch, until none is left.
    async fn drain_token_bucket(&self, key: CounterKey) {
        loop {
            let batch = self.step_queue.take(&key);
            if batch.is_empty() {
                return;
            }
            let steps: Vec<&TokenStep> = batch.iter().map(|(step, _)| step).collect();
            match self.update_token_bucket(&key, &steps).await {
                Ok(answers) => {
                    for ((_, reply), answer) in batch.into_iter().zip(answers) {
                        let _ = reply.send(Ok(answer));
                    }
                }
                Err(err) => {
                    for (_, reply) in batch {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
        }
    }

    /// One read, every step applied in order, one compare-and-swap; again on a lost race.
    async fn update_token_bucket(
        &self,
        key: &str,
        steps: &[&TokenStep],
    ) -> Result<Vec<TokenAnswer>, StorageError> {
        let server = self.server_for(key)?;
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(spread(LOST_RACE.after(attempt), 1.0)).await;
            }
            let sent = Sent::default();
            let read = server.transport.read_state(key, &sent);
            let state = server.guarded(&self.deadline, &sent, read).await?;
            let mut tat = state.map(|stored| stored.value);
            let mut changed = None;
            let answers: Vec<TokenAnswer> = steps
                .iter()
                .map(|step| {
                    let (answer, write) = step.apply(tat);
                    if let Some(after) = write {
                        tat = Some(after);
                        changed = Some((after, step.expires_at(after)));
                    }
                    answer
                })
                .collect();
            let Some((value, expires_at)) = changed else {
                return Ok(answers);
            };
            let exptime = self.exptime(key, expires_at, self.clock.now_secs());
            let sent = Sent::default();
            let write = StateWrite {
                key,
                value,
                cas: state.map(|stored| stored.cas),
                exptime,
            };
            let write = server.transport.write_state(write, &sent);
            if server.guarded(&self.deadline, &sent, write).await? {
                return Ok(answers);
            }
        }
        Err(StorageError::contended(format!(
            "token bucket on memcached {} changed under {MAX_ATTEMPTS} compare-and-swap rounds \
             in a row",
            server.name
        )))
    }
}
