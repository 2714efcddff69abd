//! A batch of counter operations on the ring: grouped by server (one write, one round trip
//! per server, the servers in parallel), every amount bounded, and counts saturated at
//! [`COUNT_CEILING`] (memcached's own arithmetic wraps at 2^64). Pipelined servers take the
//! batch as one gathered call (`pipelined::call`); pooled ones as a join of one call per
//! server.
//!
//! Must not touch: how commands are written or answers read (the transports'), server health
//! (`server`).

use futures_util::future::try_join_all;

use super::transport::Command;
use super::{Inner, MemcachedStore, MemcachedTransport, Topology};
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

    /// The counts after `hits`, as memcached answers them.
    async fn apply_hits(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let now = self.inner.clock.now_secs();
        // Held across the calls below, so an owned handle: an `arc_swap` guard held across an
        // await takes one of the thread's few fast slots per call in flight, and with more
        // calls in flight than slots every load takes the slow path (0.8 % of the server's
        // time at saturation, perf).
        let topology = self.inner.topology.load_full();
        // Boxed, as the pool's join below boxes its batches: the remote call's future (a
        // deadline timer, the sends) would grow every decision's future, which is moved on
        // every call on every backend (tests/future_size.rs).
        if self.inner.client.transport == MemcachedTransport::Pipelined {
            return Box::pin(self.inner.gathered(&topology, hits, now)).await;
        }
        // One server: one batch in the hits' order, without grouping or joining.
        if let [only] = topology.servers.as_slice() {
            let commands = Commands::new(&self.inner, hits, None, now);
            return Box::pin(self.inner.apply_pooled(only, commands)).await;
        }
        // One batch (one connection per command) per server, the servers in parallel, each
        // batch made straight from the hits it takes.
        let owners = owners(&topology, hits)?;
        let batches = servers_of(&owners).map(|server| {
            let commands = Commands::new(&self.inner, hits, Some((&owners, server)), now);
            self.inner.apply_pooled(&topology.servers[server], commands)
        });
        // One server's error does not say the others' batches were not applied.
        let answers = try_join_all(batches)
            .await
            .map_err(StorageError::maybe_applied)?;
        // Each server's counts back in the hits' order.
        let mut counts = vec![0; hits.len()];
        for (server, answer) in servers_of(&owners).zip(answers) {
            let slots = counts.iter_mut().zip(&owners);
            let theirs = slots.filter(|(_, owner)| **owner == server);
            for ((slot, _), count) in theirs.zip(answer) {
                *slot = count;
            }
        }
        Ok(counts)
    }
}

/// Each hit's server on the ring.
pub(super) fn owners(topology: &Topology, hits: &[CounterOp]) -> Result<Vec<usize>, StorageError> {
    hits.iter()
        .map(|hit| topology.ring.server_for(hit.key.as_bytes()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| StorageError::unavailable("no memcached servers"))
}

/// The servers that `owners` (each hit's server) names, each once, in order of first hit.
pub(super) fn servers_of(owners: &[usize]) -> impl Iterator<Item = usize> + '_ {
    (0..owners.len())
        .filter(|&i| !owners[..i].contains(&owners[i]))
        .map(|i| owners[i])
}

/// The commands of one server's batch, made from the hits as they are written: every hit (one
/// server), or those that `owners` gives the server. An iterator, so a batch is never collected
/// first; a named type rather than adapters over closures, which a future held across an await
/// cannot carry and still be `Send` (rustc's higher-ranked closure lifetimes).
pub(super) struct Commands<'h> {
    store: &'h Inner,
    hits: std::slice::Iter<'h, CounterOp>,
    /// Each remaining hit's server, and the server this batch is for.
    owners: Option<(std::slice::Iter<'h, usize>, usize)>,
    /// Commands still to come.
    left: usize,
    /// Unix seconds, for the commands' exptimes.
    now: u64,
}

impl<'h> Commands<'h> {
    pub(super) fn new(
        store: &'h Inner,
        hits: &'h [CounterOp],
        owners: Option<(&'h [usize], usize)>,
        now: u64,
    ) -> Self {
        let left = owners.map_or(hits.len(), |(owners, server)| {
            owners.iter().filter(|o| **o == server).count()
        });
        Commands {
            store,
            hits: hits.iter(),
            owners: owners.map(|(owners, server)| (owners.iter(), server)),
            left,
            now,
        }
    }
}

impl<'h> Iterator for Commands<'h> {
    type Item = Command<'h>;

    fn next(&mut self) -> Option<Command<'h>> {
        loop {
            let hit = self.hits.next()?;
            let ours = match &mut self.owners {
                None => true,
                Some((owners, server)) => owners.next() == Some(server),
            };
            if ours {
                self.left = self.left.saturating_sub(1);
                // The amount bounded, the exptime from the hit's window.
                return Some(Command {
                    key: &hit.key,
                    change: hit.change.bounded(),
                    exptime: self.store.exptime(&hit.key, hit.expires_at, self.now),
                });
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Commands, servers_of};
    use crate::clock::ManualClock;
    use crate::storage::memcached::{MemcachedOptions, MemcachedStore, MemcachedTransport};
    use crate::storage::{Change, CounterKey, CounterOp};

    const NOW: u64 = 1_800_000_000;

    fn store() -> MemcachedStore {
        let options = MemcachedOptions {
            // Never connected: building commands asks nothing of the server.
            servers: vec!["127.0.0.1:1".into()],
            client: crate::storage::memcached::MemcachedClient {
                transport: MemcachedTransport::default(),
                pool_size: 1,
                pipelined_connections: Some(std::num::NonZeroUsize::MIN),
                timeout: Duration::from_secs(1),
                jitter_max_seconds: 0,
            },
            tls: None,
        };
        MemcachedStore::new(options, Arc::new(ManualClock::new(NOW))).expect("store")
    }

    fn hit(key: &str, change: Change) -> CounterOp {
        CounterOp {
            key: CounterKey::checked(key).expect("key"),
            change,
            expires_at: NOW + 60,
        }
    }

    #[test]
    fn each_server_once_in_order_of_its_first_hit() {
        assert_eq!(servers_of(&[2, 0, 2, 1, 0]).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(servers_of(&[1, 1, 1]).collect::<Vec<_>>(), [1]);
        assert_eq!(servers_of(&[]).count(), 0);
    }

    #[test]
    fn a_batch_takes_its_servers_hits_in_order_and_knows_its_length() {
        let store = store();
        let hits = [
            hit("a", Change::Add(1)),
            hit("b", Change::Add(2)),
            hit("c", Change::Sub(3)),
            hit("d", Change::Add(4)),
        ];
        let owners = [1, 0, 1, 1];
        let batch = Commands::new(&store.inner, &hits, Some((&owners, 1)), NOW);
        assert_eq!(batch.size_hint(), (3, Some(3)));
        let taken: Vec<(String, Change, u64)> = batch
            .map(|c| (c.key.to_owned(), c.change, c.exptime))
            .collect();
        // The window ends in 60 s; memcached may expire a second early, so one more.
        assert_eq!(
            taken,
            [
                ("a".to_owned(), Change::Add(1), 61),
                ("c".to_owned(), Change::Sub(3), 61),
                ("d".to_owned(), Change::Add(4), 61),
            ]
        );
        let other = Commands::new(&store.inner, &hits, Some((&owners, 0)), NOW);
        assert_eq!(other.map(|c| c.key).collect::<Vec<_>>(), ["b"]);
        let all = Commands::new(&store.inner, &hits, None, NOW);
        assert_eq!(all.size_hint(), (4, Some(4)));
        assert_eq!(all.count(), 4);
    }
}
