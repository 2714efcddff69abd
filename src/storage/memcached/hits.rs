//! A batch of counter operations on the ring: grouped by server (one write, one round trip
//! per server, the servers in parallel), every amount bounded, and counts saturated at
//! [`COUNT_CEILING`] (memcached's own arithmetic wraps at 2^64).
//!
//! Must not touch: how commands are written or answers read (the transports'), server health
//! (the guard's).

use futures_util::future::try_join_all;

use super::MemcachedStore;
use super::transport::Command;
use crate::storage::{COUNT_CEILING, Change, CounterOp, StorageError};

impl MemcachedStore {
    /// Applies `hits` and brings every count that went past [`COUNT_CEILING`] back to it.
    pub(super) async fn saturating_hits(
        &self,
        hits: &[CounterOp],
    ) -> Result<Vec<u64>, StorageError> {
        let mut counts = self.apply_hits(hits).await?;
        // memcached's arithmetic wraps at 2^64: a count that went past the ceiling is brought
        // back to it (amounts are bounded, so it is far from wrapping), and reads as it.
        let back: Vec<CounterOp> = hits
            .iter()
            .zip(&mut counts)
            .filter(|(_, count)| **count > COUNT_CEILING)
            .map(|(hit, count)| {
                let over = *count - COUNT_CEILING;
                *count = COUNT_CEILING;
                CounterOp {
                    key: hit.key.clone(),
                    change: Change::Sub(over),
                    expires_at: hit.expires_at,
                }
            })
            .collect();
        if !back.is_empty()
            && let Err(e) = self.apply_hits(&back).await
        {
            tracing::debug!(error = %e, "a count past the ceiling was not brought back yet");
        }
        Ok(counts)
    }

    /// The command for one hit, its amount bounded, at `now` (Unix seconds).
    fn command<'h>(&self, hit: &'h CounterOp, now: u64) -> Command<'h> {
        Command {
            key: &hit.key,
            change: hit.change.bounded(),
            exptime: self.inner.exptime(&hit.key, hit.expires_at, now),
        }
    }

    /// The counts after `hits`, as memcached answers them.
    async fn apply_hits(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let now = self.inner.clock.now();
        // Held across the calls below, so an owned handle: an `arc_swap` guard held across an
        // await takes one of the thread's few fast slots per call in flight, and with more
        // calls in flight than slots every load takes the slow path (0.8 % of the server's
        // time at saturation, perf).
        let topology = self.inner.topology.load_full();
        let command = |hit| self.command(hit, now);
        // One server: one batch in the hits' order, without grouping or joining.
        if let [only] = topology.servers.as_slice() {
            let commands: Vec<Command<'_>> = hits.iter().map(command).collect();
            return self.inner.apply(only, &commands).await;
        }
        // Group the hits by server: one batch (one write, one round trip) per server, the
        // servers in parallel.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, hit) in hits.iter().enumerate() {
            let server = topology
                .ring
                .server_for(hit.key.as_bytes())
                .ok_or_else(|| StorageError::unavailable("no memcached servers"))?;
            match groups.iter_mut().find(|(s, _)| *s == server) {
                Some((_, members)) => members.push(i),
                None => groups.push((server, vec![i])),
            }
        }
        let batches = groups.iter().map(|(server, members)| {
            // The server's commands, built once, straight from the hits.
            let commands: Vec<Command<'_>> = members.iter().map(|&i| command(&hits[i])).collect();
            let topology = &topology;
            async move {
                self.inner
                    .apply(&topology.servers[*server], &commands)
                    .await
            }
        });
        let answers = try_join_all(batches).await?;
        let mut counts = vec![0; hits.len()];
        for ((_, members), answer) in groups.iter().zip(answers) {
            for (&i, count) in members.iter().zip(answer) {
                counts[i] = count;
            }
        }
        Ok(counts)
    }
}
