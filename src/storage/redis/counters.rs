//! A request's counter operations on Redis, done exactly in the fewest Redis microseconds.
//! Adds and reads (every fixed- and sliding-window hit) are plain commands pipelined in one
//! write: per add `SET key 0 NX EX ttl` then `INCRBY key n`, per read `GET key`; to one server
//! without TLS over our own connection (`pipe`), with TLS or behind Sentinel over redis-rs's.
//! Refunds, leases and releases, and every operation on a cluster, go through the counters
//! script (`scripts`), all of a request's operations in one call.
//!
//! Why commands: inside Redis an `EVALSHA` of the script costs about 4 µs for one key and
//! 13 µs for five, while `SET NX` and `INCRBY` cost a fraction of a microsecond each
//! (BENCHMARKS.md, "Redis"). Each command is atomic, so the pair is exact under concurrency:
//! `SET … NX EX` only ever creates a zero carrying the window's TTL (a counter never exists
//! without one, even if the connection drops between the two), and `INCRBY` adds to whatever
//! is there. Keys and values are the reference's (its `INCRBY`'d decimal), so during a cut-over
//! both count into one counter.
//!
//! Must not touch: connections, breakers, routing across a cluster, key layout.

use redis::Value;

use super::pipe::PipeError;
use super::resp::{self, Reply};
use super::{Inner, Request};
use crate::storage::{COUNT_CEILING, Change, CounterOp, StorageError};

impl Inner {
    /// The counts after `hits`, in order: plain commands when every hit is an add or a read
    /// (over our own pipe to one server, over redis-rs's connection with TLS or behind
    /// Sentinel), one script call otherwise. A cluster keeps the script: redis-rs's cluster
    /// client does not follow an `ASK` redirection for a pipeline, so during a slot migration
    /// the commands would fail where the script is redirected (`cluster_slot_migration` test).
    pub(super) async fn counters(
        &self,
        hits: &[&CounterOp],
        now: u64,
    ) -> Result<Vec<u64>, StorageError> {
        let plain = hits
            .iter()
            .all(|hit| matches!(hit.change.bounded(), Change::Add(_)));
        match plain {
            true if self.connector.pipes() => self.piped(hits, now).await,
            true if !self.connector.is_cluster() => self.adds(hits, now).await,
            _ => self.scripted(hits, now).await,
        }
    }

    /// Adds and reads over our own pipelined connection (`pipe`), one write: every add's
    /// `SET … NX` first, then each hit's `INCRBY` or `GET` in order (a read after an add of
    /// the same key reads what the add made, a read before it the zero the `SET` made).
    async fn piped(&self, hits: &[&CounterOp], now: u64) -> Result<Vec<u64>, StorageError> {
        // Each hit's two commands: its key twice and under 96 bytes of framing and numbers.
        let size = hits.iter().map(|hit| 2 * hit.key.len() + 96).sum();
        let mut bytes = Vec::with_capacity(size);
        let mut number = itoa::Buffer::new();
        let mut skip = 0;
        for hit in hits
            .iter()
            .filter(|hit| hit.change.bounded() != Change::Add(0))
        {
            let ttl = self.ttl(&hit.key, hit.expires_at, now);
            let ttl = resp::number(&mut number, ttl);
            resp::command(
                &mut bytes,
                &[b"SET", hit.key.as_bytes(), b"0", b"NX", b"EX", ttl],
            );
            skip += 1;
        }
        for hit in hits {
            let key = hit.key.as_bytes();
            match hit.change.bounded() {
                Change::Add(0) => resp::command(&mut bytes, &[b"GET", key]),
                change => {
                    let amount = resp::number(&mut number, change.amount());
                    resp::command(&mut bytes, &[b"INCRBY", key, amount]);
                }
            }
        }
        let pipe =
            self.connector.pipe().await.map_err(|e| {
                StorageError::unavailable(format!("{}: {e}", self.name)).caused_by(e)
            })?;
        let started = std::time::Instant::now();
        let sent = pipe.send(bytes, skip, hits.len());
        let replies = match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(replies)) => replies,
            Ok(Err(e)) => return Err(self.failed(e)),
            Err(_) => return Err(self.late(started)),
        };
        let mut counts = Vec::with_capacity(hits.len());
        let mut over = Vec::new();
        for (hit, reply) in hits.iter().zip(replies) {
            let count = match reply {
                Reply::Int(count) => u64::try_from(count).unwrap_or(0),
                Reply::Nil => 0,
                Reply::Text(bytes) => read(Some(Value::BulkString(bytes)))
                    .ok_or_else(|| self.unexpected(hits.len()))?,
                Reply::Error(_) => return Err(self.unexpected(hits.len())),
            };
            if count > COUNT_CEILING {
                over.push(hit);
            }
            counts.push(count.min(COUNT_CEILING));
        }
        self.saturate(&over).await?;
        Ok(counts)
    }

    /// What a request the pipe did not answer means: Turnstile's overload, Redis gone (the
    /// connection is dropped, the next call reconnects), or what Redis said.
    fn failed(&self, error: PipeError) -> StorageError {
        match error {
            PipeError::Overloaded => StorageError::overloaded(format!(
                "too many requests already wait for the connection to {}",
                self.name
            )),
            PipeError::Closed(why) => {
                self.connector.reset();
                StorageError::unavailable(format!("{}: {why}", self.name))
            }
            PipeError::Said(said) => {
                if said.starts_with("READONLY") {
                    self.connector.reset();
                }
                StorageError::protocol(format!("{}: {said}", self.name))
            }
        }
    }

    /// Puts counters that passed the ceiling back to it, keeping their TTL.
    async fn saturate(&self, over: &[&&CounterOp]) -> Result<(), StorageError> {
        if over.is_empty() {
            return Ok(());
        }
        let mut commands = redis::Pipeline::with_capacity(over.len());
        for hit in over {
            let key = hit.key.as_bytes();
            commands
                .cmd("SET")
                .arg(key)
                .arg(COUNT_CEILING)
                .arg("XX")
                .arg("KEEPTTL");
        }
        let _: Vec<Value> = self.call(Request::Commands(&commands)).await?;
        Ok(())
    }

    /// Adds and reads as pipelined commands, one write; a count that passed the ceiling is put
    /// back to it (a second write, only then).
    async fn adds(&self, hits: &[&CounterOp], now: u64) -> Result<Vec<u64>, StorageError> {
        let mut commands = redis::Pipeline::with_capacity(2 * hits.len());
        for hit in hits {
            let key = hit.key.as_bytes();
            match hit.change.bounded() {
                Change::Add(0) => {
                    commands.cmd("GET").arg(key);
                }
                change => {
                    let ttl = self.ttl(&hit.key, hit.expires_at, now);
                    commands
                        .cmd("SET")
                        .arg(key)
                        .arg(0)
                        .arg("NX")
                        .arg("EX")
                        .arg(ttl);
                    commands.cmd("INCRBY").arg(key).arg(change.amount());
                }
            }
        }
        let answers: Vec<Value> = self.call(Request::Commands(&commands)).await?;
        let mut answers = answers.into_iter();
        let mut counts = Vec::with_capacity(hits.len());
        let mut over = Vec::new();
        for hit in hits {
            let count = match hit.change.bounded() {
                Change::Add(0) => read(answers.next()),
                _ => answers.nth(1).and_then(|v| match v {
                    Value::Int(count) => Some(u64::try_from(count).unwrap_or(0)),
                    _ => None,
                }),
            };
            let Some(count) = count else {
                return Err(self.unexpected(hits.len()));
            };
            if count > COUNT_CEILING {
                over.push(hit);
            }
            counts.push(count.min(COUNT_CEILING));
        }
        self.saturate(&over).await?;
        Ok(counts)
    }

    /// Any operations through the counters script, in one call.
    async fn scripted(&self, hits: &[&CounterOp], now: u64) -> Result<Vec<u64>, StorageError> {
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

    fn unexpected(&self, hits: usize) -> StorageError {
        StorageError::protocol(format!(
            "{}: the answers to {hits} counters are not counts",
            self.name
        ))
    }
}

/// A read's count: none for a missing counter, the ceiling for a value that is not a count
/// (as the script reads it); `None` for an answer that is not a `GET`'s.
fn read(answer: Option<Value>) -> Option<u64> {
    match answer? {
        Value::Nil => Some(0),
        Value::BulkString(bytes) => Some(
            std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .map_or(COUNT_CEILING, |count| {
                    u64::try_from(count).unwrap_or(0).min(COUNT_CEILING)
                }),
        ),
        _ => None,
    }
}
