//! A counter batch on pipelined servers, as one gathered call: each server asked is admitted
//! first (a server in backoff fails the call before anything is sent), every server's part is
//! queued on its connection, and one deadline covers them all; then each server is judged on
//! its own part, as a call of its own would judge it (`memcached::server`'s rules).
//!
//! Must not touch: how parts are written and answered (`connection`'s, `gather`'s),
//! which server owns a key (the ring's).

use std::sync::Arc;

use super::gather::{Builder, Gather, Gathered};
use super::meta::{counter_line_max, push_counter};
use crate::storage::memcached::hits::{Commands, owners, servers_of};
use crate::storage::memcached::transport::TransportError;
use crate::storage::memcached::{Inner, Topology};
use crate::storage::{CounterOp, StorageError};

impl Inner {
    /// The counts after `hits`, through the servers' pipelined connections; `now` in Unix
    /// seconds, for the commands' exptimes.
    pub(in crate::storage::memcached) async fn gathered(
        &self,
        topology: &Topology,
        hits: &[CounterOp],
        now: u64,
    ) -> Result<Vec<u64>, StorageError> {
        let gather = self.parts(topology, hits, now)?;
        let _abandon = Abandon(&gather);
        // One clock read serves the deadline and the lateness measure.
        let started = tokio::time::Instant::now();
        let queued_and_answered = async {
            let mut part = 0;
            while let Some(ticket) = gather.ticket(part) {
                match topology.servers[ticket.server()].transport.pipelined() {
                    Some(transport) => transport.send(ticket).await,
                    None => ticket.fail(TransportError::Protocol(
                        "a pooled server in a pipelined store".into(),
                    )),
                }
                part += 1;
            }
            std::future::poll_fn(|cx| gather.poll_answered(cx)).await;
        };
        let waited = tokio::time::timeout_at(started + self.deadline.timeout, queued_and_answered);
        let late = waited.await.is_err();
        self.judged(topology, gather.finish(), late, started)
    }

    /// The call's parts, one per server its hits name, each server admitted.
    fn parts(
        &self,
        topology: &Topology,
        hits: &[CounterOp],
        now: u64,
    ) -> Result<Arc<Gather>, StorageError> {
        // The lines' buffer sized once, for the longest lines these keys can have.
        let bytes = hits.iter().map(|h| counter_line_max(h.key.len())).sum();
        if let [only] = topology.servers.as_slice() {
            only.admitted()?;
            let mut builder = Builder::new(bytes, 1);
            builder.part(0, |lines| {
                write(lines, Commands::new(self, hits, None, now))
            });
            return Ok(builder.build(hits.len(), Vec::new()));
        }
        let mut owners = owners(topology, hits)?;
        let mut builder = Builder::new(bytes, topology.servers.len().min(hits.len()));
        for server in servers_of(&owners) {
            topology.servers[server].admitted()?;
            let commands = Commands::new(self, hits, Some((&owners, server)), now);
            builder.part(server, |lines| write(lines, commands));
        }
        builder.parts_of(&mut owners);
        Ok(builder.build(hits.len(), owners))
    }

    /// The counts, once every server's part is judged: the first part's error in the call's
    /// order, if any. `late`: the deadline passed, and a part without an answer is late.
    fn judged(
        &self,
        topology: &Topology,
        gathered: Gathered,
        late: bool,
        started: tokio::time::Instant,
    ) -> Result<Vec<u64>, StorageError> {
        let mut first = None;
        for part in gathered.parts {
            let server = &topology.servers[part.server];
            let verdict = match part.outcome {
                Some(outcome) => server.judge(outcome),
                None if late => Err(server.too_late(&self.deadline, part.sent_at, started)),
                // Not waited for: another part failed first.
                None => Ok(()),
            };
            if let Err(e) = verdict {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(gathered.counts), Err)
    }
}

/// Appends the lines of `commands`; returns how many there are.
fn write(lines: &mut Vec<u8>, commands: Commands<'_>) -> usize {
    commands
        .map(|command| push_counter(lines, &command))
        .count()
}

/// Tells the call's connections that its caller stopped waiting, however the call ends.
struct Abandon<'a>(&'a Gather);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.0.abandon();
    }
}
