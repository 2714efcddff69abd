//! A request's fixed-window hits on a Redis cluster: grouped by the node that serves each key's
//! slot (the slot map the breakers keep), each node's commands in one write (`SET key 0 NX EX
//! ttl`, `INCRBY` or `GET` per hit, as on one server) over our own pipelined connection to the
//! node (`pipe`), all nodes at once. A command a node redirects (`MOVED`, `ASK`, `TRYAGAIN`:
//! its slot moved or is moving) was not executed, so its hit is then done again through the
//! script path, which redis-rs routes and redirects; so is every hit while the slot map is not
//! known yet, and every refund, lease or release.
//!
//! Not redis-rs's `route_pipeline`: it retries a whole pipeline when one of its commands is
//! redirected, so the others would run twice (counted twice).
//!
//! Must not touch: the commands' meaning (`counters`), breakers' rules, key layout.

use futures_util::future::try_join_all;

use super::RedisStore;
use super::counters::plain;
use super::resp::Reply;
use crate::storage::{COUNT_CEILING, CounterOp, StorageError, remote};

/// One node's hits (their indexes in the request) and its address.
struct Group {
    node: String,
    hits: Vec<usize>,
}

impl RedisStore {
    /// The counts after `hits` on a cluster, in order.
    pub(super) async fn cluster_hits(
        &self,
        hits: &[&CounterOp],
        now: u64,
    ) -> Result<Vec<u64>, StorageError> {
        let groups = match plain(hits) {
            true => self.groups(hits),
            false => None,
        };
        let Some(groups) = groups else {
            return self.per_key(hits, now).await;
        };
        let answers = try_join_all(groups.iter().map(|group| self.node_hits(group, hits, now)));
        let mut counts = vec![None; hits.len()];
        // One node's error does not say the other nodes' commands were not applied.
        let answers = match groups.len() {
            1 => answers.await?,
            _ => answers.await.map_err(StorageError::maybe_applied)?,
        };
        for (group, answers) in groups.iter().zip(answers) {
            for (&at, count) in group.hits.iter().zip(answers) {
                counts[at] = count;
            }
        }
        if counts.iter().all(Option::is_some) {
            return Ok(counts.into_iter().flatten().collect());
        }
        // Redirected hits, again by the script path, in the request's order.
        let redirected: Vec<&CounterOp> = (0..hits.len())
            .filter(|&at| counts[at].is_none())
            .map(|at| hits[at])
            .collect();
        let mut again = self
            .per_key(&redirected, now)
            .await
            .map_err(StorageError::maybe_applied)?
            .into_iter();
        Ok(counts
            .into_iter()
            .map(|count| count.or_else(|| again.next()).unwrap_or(0))
            .collect())
    }

    /// The hits grouped by node, in their order within each; `None` while a key's node is not
    /// known.
    fn groups(&self, hits: &[&CounterOp]) -> Option<Vec<Group>> {
        let mut groups: Vec<Group> = Vec::new();
        for (at, hit) in hits.iter().enumerate() {
            let node = self.inner.breakers.node_of(hit.key.as_bytes())?;
            match groups.iter_mut().find(|group| group.node == node) {
                Some(group) => group.hits.push(at),
                None => groups.push(Group {
                    node,
                    hits: vec![at],
                }),
            }
        }
        Some(groups)
    }

    /// One node's hits in one write: each hit's count, or `None` when the node redirected it.
    async fn node_hits(
        &self,
        group: &Group,
        hits: &[&CounterOp],
        now: u64,
    ) -> Result<Vec<Option<u64>>, StorageError> {
        let mine: Vec<&CounterOp> = group.hits.iter().map(|&at| hits[at]).collect();
        let breaker = self.admit(mine[0].key.as_bytes())?;
        let outcome = self.node_call(&group.node, &mine, now).await;
        self.after(breaker, outcome)
    }

    async fn node_call(
        &self,
        node: &str,
        hits: &[&CounterOp],
        now: u64,
    ) -> Result<Vec<Option<u64>>, StorageError> {
        let inner = &self.inner;
        let (bytes, sets) = inner.resp_commands(hits, now);
        // Not connected, or not queued: nothing of it was written.
        let pipe = inner.connector.node_pipe(node).await.map_err(|e| {
            StorageError::unavailable(format!("redis node {node}: {e}"))
                .caused_by(e)
                .unsent()
        })?;
        let before = pipe.answered();
        let answered = pipe
            .queue(bytes, sets + hits.len())
            .map_err(|why| inner.refused(why, Some(node)).unsent())?;
        let replies = inner
            .replies(answered, Some(node))
            .await
            .map_err(|e| inner.if_hung(e, &pipe, before, Some(node)))?;
        let (sets, counts) = replies.split_at(sets);
        let counted = !super::counters::none_counted(counts);
        let refused = |said: &str| match counted {
            true => StorageError::protocol(format!("redis node {node}: {said}")),
            false => StorageError::protocol(format!("redis node {node}: {said}")).unsent(),
        };
        if let Some(said) = sets.iter().filter_map(Reply::said).find(|s| !redirected(s)) {
            return Err(refused(said));
        }
        let mut out = Vec::with_capacity(hits.len());
        let mut over = Vec::new();
        for (hit, reply) in hits.iter().zip(counts) {
            match reply {
                Reply::Error(said) if redirected(said) => out.push(None),
                Reply::Error(said) => return Err(refused(said)),
                reply => {
                    let count = reply.count().ok_or_else(|| inner.unexpected(hits.len()))?;
                    if count > COUNT_CEILING {
                        over.push(*hit);
                    }
                    out.push(Some(count.min(COUNT_CEILING)));
                }
            }
        }
        if out.iter().any(Option::is_none) {
            // The slot map is out of date (or a slot is moving): ask for it again.
            self.ask_slots_if_due(true);
        }
        inner.saturate(&over).await?;
        Ok(out)
    }

    /// Each hit by itself through the script, which redis-rs routes to its slot's node (a
    /// script's keys must share a slot), at once; the multiplexed connections pipeline them.
    async fn per_key(&self, hits: &[&CounterOp], now: u64) -> Result<Vec<u64>, StorageError> {
        let counts = remote::in_key_order(
            hits,
            |hit| hit.key.as_str(),
            |hit| async move {
                let breaker = self.admit(hit.key.as_bytes())?;
                let outcome = self.inner.scripted(std::slice::from_ref(hit), now).await;
                self.after(breaker, outcome)
            },
        );
        // Key by key: one key's refusal does not say the others were not applied.
        let counts = match hits.len() {
            1 => counts.await?,
            _ => counts.await.map_err(StorageError::maybe_applied)?,
        };
        Ok(counts.into_iter().flatten().collect())
    }
}

/// Whether what a node said means the key's slot is served elsewhere or is moving (the
/// command did not run).
fn redirected(said: &str) -> bool {
    let code = said.split(' ').next().unwrap_or_default();
    matches!(code, "MOVED" | "ASK" | "TRYAGAIN")
}
