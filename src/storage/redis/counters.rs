//! A request's counter operations on Redis, done exactly in the fewest Redis microseconds.
//! Adds and reads (every fixed- and sliding-window hit) are plain commands pipelined in one
//! write: per add `SET key 0 NX EX ttl` then `INCRBY key n`, per read `GET key`; over our own
//! connection (`pipe`) to the one server or the master behind Sentinel (a cluster's are grouped
//! by node in `cluster`). Refunds, leases and releases go through the counters script
//! (`scripts`), all of a request's operations in one call; so does every hit on a unix socket
//! with TLS, the one target our pipe does not speak.
//!
//! Why commands: inside Redis an `EVALSHA` of the script costs about 4 µs for one key and
//! 13 µs for five, while `SET NX` and `INCRBY` cost a fraction of a microsecond each
//! (BENCHMARKS.md, "Redis"). Each command is atomic, so the pair is exact under concurrency:
//! `SET … NX EX` only ever creates a zero carrying the window's TTL (a counter never exists
//! without one, even if the connection drops between the two), and `INCRBY` adds to whatever
//! is there. Keys and values are the reference's (its `INCRBY`'d decimal), so during a cut-over
//! both count into one counter.
//!
//! Must not touch: connections, breakers, a cluster's routing, key layout.

use std::borrow::Borrow;

use redis::Value;

use super::pipe::{Answered, Pipe, PipeError, closed};
use super::resp::{self, Reply};
use super::{Inner, RedisStore, Request};
use crate::storage::{COUNT_CEILING, Change, CounterOp, ErrorKind, StorageError};

impl RedisStore {
    /// Adds and reads on one server over our own pipelined connection (`pipe`), one write,
    /// behind the server's breaker. The hot path, so its future stays small (connecting and
    /// saturating, rare, are boxed inside it): the store's call boxes this one, not the
    /// general one with redis-rs's futures (`apply_ops`).
    pub(super) async fn piped(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let breaker = self.admit(b"")?;
        let outcome = self.inner.piped(hits).await;
        self.after(breaker, outcome)
    }
}

/// Whether Redis refused every counting command of a request (`counts`: the replies after the
/// `SET … NX`s, which change no count): then no count moved, as if nothing had been sent.
pub(super) fn none_counted(counts: &[Reply]) -> bool {
    counts.iter().all(|reply| matches!(reply, Reply::Error(_)))
}

impl Inner {
    /// [`RedisStore::piped`]'s call itself: the commands queued on the pipe (connecting first
    /// when there is none), the counts read from the replies, and any past the ceiling put back.
    async fn piped(&self, hits: &[CounterOp]) -> Result<Vec<u64>, StorageError> {
        let (bytes, sets) = self.resp_commands(hits, self.clock.now_secs());
        let pipe = match self.connector.live_pipe() {
            Some(pipe) => pipe,
            None => Box::pin(self.connector.pipe()).await.map_err(|e| {
                StorageError::unavailable(format!("{}: {e}", self.name))
                    .caused_by(e)
                    .unsent()
            })?,
        };
        // Not queued: nothing of it was written.
        let before = pipe.answered();
        let answered = pipe
            .queue(bytes, sets + hits.len())
            .map_err(|why| self.refused(why, None).unsent())?;
        let replies = self
            .replies(answered, None)
            .await
            .map_err(|e| self.if_hung(e, &pipe, before, None))?;
        drop(pipe);
        let (counts, over) = self.counts(hits, &replies, sets)?;
        if !over.is_empty() {
            let over: Vec<&CounterOp> = over.into_iter().map(|at| &hits[at]).collect();
            Box::pin(self.saturate(&over)).await?;
        }
        Ok(counts)
    }

    /// The counts in the `replies` to `hits`' commands (the first `sets` of them the `SET …
    /// NX`s), each at most the ceiling, and the hits whose count passed it (to be put back).
    fn counts(
        &self,
        hits: &[CounterOp],
        replies: &[Reply],
        sets: usize,
    ) -> Result<(Vec<u64>, Vec<usize>), StorageError> {
        if let Some(said) = replies.iter().find_map(Reply::said) {
            if said.starts_with("READONLY") {
                self.connector.reset();
            }
            let error = StorageError::protocol(format!("{}: {said}", self.name));
            return Err(match none_counted(&replies[sets.min(replies.len())..]) {
                true => error.unsent(),
                false => error,
            });
        }
        let mut counts = Vec::with_capacity(hits.len());
        let mut over = Vec::new();
        for (at, reply) in replies.iter().skip(sets).enumerate() {
            let count = reply.count().ok_or_else(|| self.unexpected(hits.len()))?;
            if count > COUNT_CEILING {
                over.push(at);
            }
            counts.push(count.min(COUNT_CEILING));
        }
        match counts.len() == hits.len() {
            true => Ok((counts, over)),
            false => Err(self.unexpected(hits.len())),
        }
    }

    /// A request's commands in RESP, and how many of them come first as `SET … NX`: every
    /// add's `SET key 0 NX EX ttl`, then each hit's `INCRBY` or `GET` in order (so a read after
    /// an add of the same key reads what the add made, one before it the zero the `SET` made).
    pub(super) fn resp_commands<H: Borrow<CounterOp>>(
        &self,
        hits: &[H],
        now: u64,
    ) -> (Vec<u8>, usize) {
        // Each hit's two commands: its key twice and under 96 bytes of framing and numbers.
        let size = hits.iter().map(|hit| 2 * hit.borrow().key.len() + 96).sum();
        let mut bytes = Vec::with_capacity(size);
        let mut sets = 0;
        for hit in hits.iter().map(Borrow::borrow) {
            if hit.change.bounded() != Change::READ {
                let ttl = self.ttl(&hit.key, hit.expires_at, now);
                resp::set_zero_nx_ex(&mut bytes, hit.key.as_bytes(), ttl);
                sets += 1;
            }
        }
        for hit in hits.iter().map(Borrow::borrow) {
            let key = hit.key.as_bytes();
            match hit.change.bounded() {
                Change::READ => resp::get(&mut bytes, key),
                change => resp::incrby(&mut bytes, key, change.amount()),
            }
        }
        (bytes, sets)
    }

    /// Waits under the deadline for the replies to a request queued on a pipe (to the server,
    /// or to cluster `node`). Not answered: Redis gone (the connection is dropped and the next
    /// call reconnects), or late.
    pub(super) async fn replies(
        &self,
        answered: Answered,
        node: Option<&str>,
    ) -> Result<Vec<Reply>, StorageError> {
        // One clock read gives the deadline and, for a late answer, when the wait started.
        let deadline = tokio::time::Instant::now() + self.timeout;
        match tokio::time::timeout_at(deadline, answered).await {
            Ok(Ok(Ok(replies))) => Ok(replies),
            Ok(Ok(Err(why))) => Err(self.refused(why, node)),
            Ok(Err(_)) => Err(self.refused(closed(), node)),
            Err(_) => Err(self.late(deadline - self.timeout)),
        }
    }

    /// A PING over the pipe to the server (connecting first when there is none).
    pub(super) async fn pipe_ping(&self) -> Result<(), StorageError> {
        let pipe =
            self.connector.pipe().await.map_err(|e| {
                StorageError::unavailable(format!("{}: {e}", self.name)).caused_by(e)
            })?;
        let mut bytes = Vec::with_capacity(16);
        resp::command(&mut bytes, &[b"PING"]);
        let before = pipe.answered();
        let answered = pipe
            .queue(bytes, 1)
            .map_err(|why| self.refused(why, None))?;
        let replies = self
            .replies(answered, None)
            .await
            .map_err(|e| self.if_hung(e, &pipe, before, None))?;
        match replies.first() {
            Some(Reply::Text(pong)) if pong == b"PONG" => Ok(()),
            other => Err(StorageError::protocol(format!(
                "{}: PING answered {other:?}",
                self.name
            ))),
        }
    }

    /// A call on `pipe` (to the server, or to cluster `node`) timed out: when the pipe read no
    /// reply at all since the call was queued (`before`: its count of answers then), the
    /// connection is open and answering nothing, so it is given up (closed) and the next call
    /// dials a new one; the timeout counts for the breaker as any other.
    pub(super) fn if_hung(
        &self,
        error: StorageError,
        pipe: &Pipe,
        before: u64,
        node: Option<&str>,
    ) -> StorageError {
        if error.kind() == ErrorKind::Timeout && pipe.answered() == before {
            let name = node.map_or_else(|| self.name.clone(), |n| format!("redis node {n}"));
            tracing::warn!(
                server = %name, timeout = ?self.timeout,
                "a Redis connection answered nothing within REDIS_TIMEOUT; it is closed and the \
                 next call connects again"
            );
            match node {
                Some(node) => self.connector.reset_node(node),
                None => self.connector.reset(),
            }
        }
        error
    }

    /// Why a pipe (to the server, or to cluster `node`) did not answer: Turnstile's overload
    /// (its queue is full), or Redis gone (the connection is dropped and the next call
    /// reconnects).
    pub(super) fn refused(&self, why: PipeError, node: Option<&str>) -> StorageError {
        match why {
            PipeError::Overloaded => StorageError::overloaded(format!(
                "too many requests already wait for the connection to {}",
                node.unwrap_or(&self.name)
            ))
            .unsent(),
            PipeError::Closed(why) => {
                match node {
                    Some(node) => self.connector.reset_node(node),
                    None => self.connector.reset(),
                }
                let name = node.map_or_else(|| self.name.clone(), |n| format!("redis node {n}"));
                StorageError::unavailable(format!("{name}: {why}"))
            }
        }
    }

    /// Puts counters that passed the ceiling back to it, keeping their TTL (one key a call:
    /// on a cluster their slots differ).
    pub(super) async fn saturate(&self, over: &[&CounterOp]) -> Result<(), StorageError> {
        for hit in over {
            let mut command = redis::Pipeline::with_capacity(1);
            let key = hit.key.as_bytes();
            command
                .cmd("SET")
                .arg(key)
                .arg(COUNT_CEILING)
                .arg("XX")
                .arg("KEEPTTL");
            let _: Vec<Value> = self.call(Request::Commands(&command)).await?;
        }
        Ok(())
    }

    /// Any operations through the counters script, in one call.
    pub(super) async fn scripted(
        &self,
        hits: &[&CounterOp],
        now: u64,
    ) -> Result<Vec<u64>, StorageError> {
        let mut invocation = self.scripts.counters.prepare_invoke();
        for hit in hits {
            let op = match hit.change.bounded() {
                Change::Add(_) => "add",
                Change::Sub(_) => "sub",
                Change::Lease(_) => "lease",
                Change::Release(_) => "release",
            };
            invocation
                .key(hit.key.as_bytes())
                .arg(op)
                .arg(hit.change.bounded().amount())
                .arg(self.ttl(&hit.key, hit.expires_at, now));
        }
        invocation.arg(COUNT_CEILING);
        let counts: Vec<i64> = self.call(Request::Script(&invocation)).await?;
        if counts.len() != hits.len() {
            return Err(self.unexpected(hits.len()));
        }
        Ok(counts
            .into_iter()
            .map(|c| u64::try_from(c).unwrap_or(0))
            .collect())
    }

    pub(super) fn unexpected(&self, hits: usize) -> StorageError {
        StorageError::protocol(format!(
            "{}: the answers to {hits} counters are not counts",
            self.name
        ))
    }
}

/// Whether every hit is an add or a read: what plain commands do.
pub(super) fn plain<H: Borrow<CounterOp>>(hits: &[H]) -> bool {
    hits.iter()
        .all(|hit| matches!(hit.borrow().change.bounded(), Change::Add(_)))
}
