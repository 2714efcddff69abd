//! One call's counter commands to every pipelined server it names, answered in place: the
//! call's command lines are written once into one buffer (each server's share contiguous),
//! each server's connection copies its share into its next write, and each connection's reader
//! writes its counts straight into the call's slots, in the hits' order; the last share
//! answered wakes the call. One shared state per call, where a call used to have per server a
//! lines buffer, a reply channel, a reply list and a count list, and one wake of the call's
//! task where it had one per server (each a poll through the whole request).
//!
//! A [`Ticket`] is one share's place in a connection's queues. However a ticket ends (answered,
//! refused, or dropped by a connection that closed), its share gets an outcome: a dropped
//! ticket is a closed connection, as a dropped reply channel was.
//!
//! Must not touch: what the lines say (`meta`), sockets, server health (the guard's).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::transport::TransportError;
use crate::storage::remote::lock;

/// One call's shares, their lines, and the counts as they come in.
#[derive(Debug)]
pub(super) struct Gather {
    /// Every share's command lines, each share's contiguous.
    lines: Vec<u8>,
    /// Set when the caller stops waiting: a share not written yet is then never written.
    abandoned: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Each hit's count, in the hits' order, as the servers answer.
    counts: Vec<u64>,
    /// Each hit's share; empty when one share takes every hit.
    share_of: Vec<usize>,
    shares: Vec<Share>,
    /// Shares without an outcome yet.
    outstanding: usize,
    /// A share failed: the call need not wait for the others.
    failed: bool,
    waker: Option<Waker>,
}

/// One server's part of a call.
#[derive(Debug)]
pub(super) struct Share {
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

/// A call's shares being filled in: each share's lines written in turn.
#[derive(Debug)]
pub(super) struct Builder {
    lines: Vec<u8>,
    shares: Vec<Share>,
}

impl Builder {
    /// An empty call of up to `bytes` of command lines in up to `shares` shares.
    pub(super) fn new(bytes: usize, shares: usize) -> Self {
        Builder {
            lines: Vec::with_capacity(bytes),
            shares: Vec::with_capacity(shares),
        }
    }

    /// Adds `server`'s share, whose `count` commands `write` appends to the call's lines.
    pub(super) fn share(&mut self, server: usize, write: impl FnOnce(&mut Vec<u8>) -> usize) {
        let start = self.lines.len();
        let count = write(&mut self.lines);
        self.shares.push(Share {
            server,
            lines: start..self.lines.len(),
            count,
            sent_at: None,
            outcome: None,
        });
    }

    /// Turns each hit's server in `owners` into its share (the share of that server).
    pub(super) fn shares_of(&self, owners: &mut [usize]) {
        for owner in owners {
            *owner = self
                .shares
                .iter()
                .position(|s| s.server == *owner)
                .unwrap_or(usize::MAX);
        }
    }

    /// The call, with `hits` counts; `share_of` gives each hit's share (empty: one share).
    pub(super) fn build(self, hits: usize, share_of: Vec<usize>) -> Arc<Gather> {
        let outstanding = self.shares.len();
        Arc::new(Gather {
            lines: self.lines,
            abandoned: AtomicBool::new(false),
            state: Mutex::new(State {
                counts: vec![0; hits],
                share_of,
                shares: self.shares,
                outstanding,
                failed: false,
                waker: None,
            }),
        })
    }
}

/// What a call's shares came to, when they all answered or its deadline passed.
#[derive(Debug)]
pub(super) struct Gathered {
    /// Each hit's count (meaningful when every share answered `Ok`).
    pub(super) counts: Vec<u64>,
    pub(super) shares: Vec<Share>,
}

impl Gather {
    /// The ticket of share `share` (`None` past the last), for its server's connection.
    pub(super) fn ticket(self: &Arc<Self>, share: usize) -> Option<Ticket> {
        let state = lock(&self.state);
        let of = state.shares.get(share)?;
        Some(Ticket {
            gather: Arc::clone(self),
            share,
            server: of.server,
            lines: of.lines.clone(),
            count: of.count,
            done: false,
        })
    }

    /// Ready once every share has an outcome, or one has failed.
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

    /// The counts and every share's outcome so far; the caller no longer waits, so a share
    /// not yet written is never written.
    pub(super) fn finish(&self) -> Gathered {
        self.abandoned.store(true, Ordering::Release);
        let mut state = lock(&self.state);
        Gathered {
            counts: std::mem::take(&mut state.counts),
            shares: std::mem::take(&mut state.shares),
        }
    }

    /// The caller stopped waiting (dropped before its deadline or answers).
    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
    }
}

/// One share's place in a connection's queues, until its server answers.
#[derive(Debug)]
pub(super) struct Ticket {
    gather: Arc<Gather>,
    share: usize,
    server: usize,
    /// The share's lines in the call's buffer, and its number of commands.
    lines: Range<usize>,
    count: usize,
    /// The share has its outcome (the drop then has nothing to report).
    done: bool,
}

impl Ticket {
    /// The share's server (an index into the call's topology).
    pub(super) fn server(&self) -> usize {
        self.server
    }

    /// The share's command lines.
    pub(super) fn lines(&self) -> &[u8] {
        self.gather
            .lines
            .get(self.lines.clone())
            .unwrap_or_default()
    }

    /// How many answers the share waits for.
    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Whether the caller stopped waiting: the share must then not be written.
    pub(super) fn abandoned(&self) -> bool {
        self.gather.abandoned.load(Ordering::Acquire)
    }

    /// A handle that records when the share's lines were written.
    pub(super) fn written(&self) -> Written {
        Written {
            gather: Arc::clone(&self.gather),
            share: self.share,
        }
    }

    /// The server's answers to the share, in order (`values[i]` the count after command `i`),
    /// or the first thing wrong with them.
    pub(super) fn answer(mut self, values: &[u64], failure: Option<TransportError>) {
        self.done = true;
        let mut state = lock(&self.gather.state);
        let outcome = match failure {
            Some(failure) => Err(failure),
            None => place(&mut state, self.share, values),
        };
        let waker = complete(&mut state, self.share, outcome);
        drop(state);
        wake(waker);
    }

    /// The share could not be sent or answered.
    pub(super) fn fail(mut self, error: TransportError) {
        self.done = true;
        // The lock's guard ends with this statement, before the wake.
        let waker = complete(&mut lock(&self.gather.state), self.share, Err(error));
        wake(waker);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Dropped unanswered: the connection's writer or reader stopped with it queued.
        if !self.done {
            let waker = complete(&mut lock(&self.gather.state), self.share, Err(closed()));
            wake(waker);
        }
    }
}

/// Records when a share's lines were written.
#[derive(Debug)]
pub(super) struct Written {
    gather: Arc<Gather>,
    share: usize,
}

impl Written {
    pub(super) fn mark(&self, at: Instant) {
        if let Some(share) = lock(&self.gather.state).shares.get_mut(self.share) {
            share.sent_at = Some(at);
        }
    }
}

/// The error of a share whose connection closed with it queued or unanswered.
pub(super) fn closed() -> TransportError {
    TransportError::Io(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "connection closed",
    ))
}

/// Writes `values` into the slots of `share`'s hits, in order.
fn place(state: &mut State, share: usize, values: &[u64]) -> Result<(), TransportError> {
    let State {
        counts, share_of, ..
    } = state;
    let mut values = values.iter();
    if share_of.is_empty() {
        for slot in counts.iter_mut() {
            *slot = *values.next().ok_or_else(too_few)?;
        }
    } else {
        for (slot, _) in counts
            .iter_mut()
            .zip(share_of.iter())
            .filter(|(_, s)| **s == share)
        {
            *slot = *values.next().ok_or_else(too_few)?;
        }
    }
    Ok(())
}

fn too_few() -> TransportError {
    TransportError::Protocol("fewer answers than commands".into())
}

/// Gives `share` its outcome (once); the caller's waker when it was the last or failed, to be
/// woken once the lock is let go.
#[must_use]
fn complete(state: &mut State, share: usize, outcome: Result<(), TransportError>) -> Option<Waker> {
    // No share: the caller already took them (its deadline passed).
    let share = state.shares.get_mut(share)?;
    if share.outcome.is_some() {
        return None;
    }
    let failed = outcome.is_err();
    share.outcome = Some(outcome);
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
