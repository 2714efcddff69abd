//! One call's counter commands to every pipelined server it names, answered in place: the
//! call's command lines are written once into one buffer (each server's part contiguous),
//! each server's connection copies its part into its next write, and each connection's reader
//! writes its counts straight into the call's slots, in the hits' order; the last part
//! answered wakes the call: one shared state and one wake per call, whatever its servers
//! (a wake per server would be a poll through the whole request each).
//!
//! A [`Ticket`] is one part's place in a connection's queues. However a ticket ends (answered,
//! refused, or dropped by a connection that closed), its part gets an outcome: a dropped
//! ticket is a closed connection.
//!
//! Must not touch: what the lines say (`meta`), sockets, server health (`memcached::server`).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::time::Instant;

use crate::storage::memcached::transport::TransportError;
use crate::storage::remote::lock;

/// One call's parts, their lines, and the counts as they come in.
#[derive(Debug)]
pub(super) struct Gather {
    /// Every part's command lines, each part's contiguous.
    lines: Vec<u8>,
    /// Set when the caller stops waiting: a part not written yet is then never written.
    abandoned: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Each hit's count, in the hits' order, as the servers answer.
    counts: Vec<u64>,
    /// Each hit's part; empty when one part takes every hit.
    part_of: Vec<usize>,
    parts: Vec<Part>,
    /// Parts without an outcome yet.
    outstanding: usize,
    /// A part failed: the call need not wait for the others.
    failed: bool,
    waker: Option<Waker>,
}

/// One server's part of a call.
#[derive(Debug)]
pub(super) struct Part {
    /// Its server (an index into the call's topology).
    pub(super) server: usize,
    /// Its command lines in the call's buffer.
    lines: Range<usize>,
    /// How many commands (and answers) it has.
    count: usize,
    /// When its lines were written to the server's socket.
    pub(super) sent_at: Option<Instant>,
    /// How the server answered, once it has: `Ok`, or the first thing wrong.
    pub(super) outcome: Option<Result<(), TransportError>>,
}

/// A call's parts being filled in: each part's lines written in turn.
#[derive(Debug)]
pub(super) struct Builder {
    lines: Vec<u8>,
    parts: Vec<Part>,
}

impl Builder {
    /// An empty call of up to `bytes` of command lines in up to `parts` parts.
    pub(super) fn new(bytes: usize, parts: usize) -> Self {
        Builder {
            lines: Vec::with_capacity(bytes),
            parts: Vec::with_capacity(parts),
        }
    }

    /// Adds `server`'s part, whose `count` commands `write` appends to the call's lines.
    pub(super) fn part(&mut self, server: usize, write: impl FnOnce(&mut Vec<u8>) -> usize) {
        let start = self.lines.len();
        let count = write(&mut self.lines);
        self.parts.push(Part {
            server,
            lines: start..self.lines.len(),
            count,
            sent_at: None,
            outcome: None,
        });
    }

    /// Turns each hit's server in `owners` into its part (the part of that server).
    pub(super) fn parts_of(&self, owners: &mut [usize]) {
        for owner in owners {
            *owner = self
                .parts
                .iter()
                .position(|s| s.server == *owner)
                .unwrap_or(usize::MAX);
        }
    }

    /// The call, with `hits` counts; `part_of` gives each hit's part (empty: one part).
    pub(super) fn build(self, hits: usize, part_of: Vec<usize>) -> Arc<Gather> {
        let outstanding = self.parts.len();
        Arc::new(Gather {
            lines: self.lines,
            abandoned: AtomicBool::new(false),
            state: Mutex::new(State {
                counts: vec![0; hits],
                part_of,
                parts: self.parts,
                outstanding,
                failed: false,
                waker: None,
            }),
        })
    }
}

/// What a call's parts came to, when they all answered or its deadline passed.
#[derive(Debug)]
pub(super) struct Gathered {
    /// Each hit's count (meaningful when every part answered `Ok`).
    pub(super) counts: Vec<u64>,
    pub(super) parts: Vec<Part>,
}

impl Gather {
    /// The ticket of part `part` (`None` past the last), for its server's connection.
    pub(super) fn ticket(self: &Arc<Self>, part: usize) -> Option<Ticket> {
        let state = lock(&self.state);
        let of = state.parts.get(part)?;
        Some(Ticket {
            gather: Arc::clone(self),
            part,
            server: of.server,
            lines: of.lines.clone(),
            count: of.count,
            done: false,
        })
    }

    /// Ready once every part has an outcome, or one has failed.
    pub(super) fn poll_answered(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.state);
        if state.outstanding == 0 || state.failed {
            return Poll::Ready(());
        }
        if !state
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The counts and every part's outcome so far; the caller no longer waits, so a part
    /// not yet written is never written.
    pub(super) fn finish(&self) -> Gathered {
        self.abandoned.store(true, Ordering::Release);
        let mut state = lock(&self.state);
        Gathered {
            counts: std::mem::take(&mut state.counts),
            parts: std::mem::take(&mut state.parts),
        }
    }

    /// The caller stopped waiting (dropped before its deadline or answers).
    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }
}

/// One part's place in a connection's queues, until its server answers.
#[derive(Debug)]
pub(super) struct Ticket {
    gather: Arc<Gather>,
    part: usize,
    server: usize,
    /// The part's lines in the call's buffer, and its number of commands.
    lines: Range<usize>,
    count: usize,
    /// The part has its outcome (the drop then has nothing to report).
    done: bool,
}

impl Ticket {
    /// The part's server (an index into the call's topology).
    pub(super) fn server(&self) -> usize {
        self.server
    }

    /// The part's command lines.
    pub(super) fn lines(&self) -> &[u8] {
        self.gather
            .lines
            .get(self.lines.clone())
            .unwrap_or_default()
    }

    /// How many answers the part waits for.
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Whether the caller stopped waiting: the part must then not be written.
    pub(super) fn abandoned(&self) -> bool {
        self.gather.abandoned.load(Ordering::Acquire)
    }

    /// A handle that records when the part's lines were written.
    pub(super) fn written(&self) -> Written {
        Written {
            gather: Arc::clone(&self.gather),
            part: self.part,
        }
    }

    /// The server's answers to the part, in order (`values[i]` the count after command `i`),
    /// or the first thing wrong with them.
    pub(super) fn answer(mut self, values: &[u64], failure: Option<TransportError>) {
        self.done = true;
        let mut state = lock(&self.gather.state);
        let outcome = match failure {
            Some(failure) => Err(failure),
            None => place(&mut state, self.part, values),
        };
        let waker = complete(&mut state, self.part, outcome);
        drop(state);
        wake(waker);
    }

    /// The part could not be sent or answered.
    pub(super) fn fail(mut self, error: TransportError) {
        self.done = true;
        // The lock's guard ends with this statement, before the wake.
        let waker = complete(&mut lock(&self.gather.state), self.part, Err(error));
        wake(waker);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Dropped unanswered: the connection's writer or reader stopped with it queued.
        if !self.done {
            let waker = complete(&mut lock(&self.gather.state), self.part, Err(closed()));
            wake(waker);
        }
    }
}

/// Records when a part's lines were written.
#[derive(Debug)]
pub(super) struct Written {
    gather: Arc<Gather>,
    part: usize,
}

impl Written {
    pub(super) fn mark(&self, at: Instant) {
        if let Some(part) = lock(&self.gather.state).parts.get_mut(self.part) {
            part.sent_at = Some(at);
        }
    }
}

/// The error of a part whose connection closed with it queued or unanswered.
pub(super) fn closed() -> TransportError {
    TransportError::Io(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "connection closed",
    ))
}

/// Writes `values` into the slots of `part`'s hits, in order.
fn place(state: &mut State, part: usize, values: &[u64]) -> Result<(), TransportError> {
    let State {
        counts, part_of, ..
    } = state;
    let mut values = values.iter();
    if part_of.is_empty() {
        for slot in counts.iter_mut() {
            *slot = *values.next().ok_or_else(too_few)?;
        }
    } else {
        for (slot, _) in counts
            .iter_mut()
            .zip(part_of.iter())
            .filter(|(_, s)| **s == part)
        {
            *slot = *values.next().ok_or_else(too_few)?;
        }
    }
    Ok(())
}

fn too_few() -> TransportError {
    TransportError::Protocol("fewer answers than commands".into())
}

/// Gives `part` its outcome (once); the caller's waker when it was the last or failed, to be
/// woken once the lock is let go.
#[must_use]
fn complete(state: &mut State, part: usize, outcome: Result<(), TransportError>) -> Option<Waker> {
    // No part: the caller already took them (its deadline passed).
    let part = state.parts.get_mut(part)?;
    if part.outcome.is_some() {
        return None;
    }
    let failed = outcome.is_err();
    part.outcome = Some(outcome);
    state.failed |= failed;
    state.outstanding = state.outstanding.saturating_sub(1);
    if state.outstanding == 0 || state.failed {
        state.waker.take()
    } else {
        None
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

#[cfg(test)]
mod tests;
