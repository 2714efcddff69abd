//! A peer's requests open, against its allotment of the budget: whether its connections may be
//! read. A request is open from when its connection hands hyper its last frame (the client's
//! END_STREAM) until the stream closes (the server's END_STREAM, or RST_STREAM either way),
//! whether or not its task has been polled yet: what counts is what waits in the runtime. A
//! stream whose client half stays open (an RLQS stream) is not a request waiting, so it never
//! holds its peer's other calls back; its reports count while each is in work (below).
//!
//! A connection that may not be read joins its peer's queue at the gate (once: a flag on the
//! connection says it is there, so joining is O(1) whatever the peer's connections number).
//! A request's close wakes, first come first woken, as many as the allotment has room for (at
//! least one), and every one when the peer has nothing open left (no later close would wake
//! them): one close never wakes a herd of thousands that mostly find the gate shut again,
//! and no queued connection is left waiting while its peer has nothing open. A queued
//! connection that closed is skipped without taking a turn.
//!
//! A woken connection holds a pass for its next read. While others of its peer wait, a
//! connection without one meets the gate shut and queues behind them (first come, first
//! read), so that a connection just answered cannot take the place a woken one was woken for
//! (measured with 10,000 connections of one peer: that cost several wasted wakes per call and
//! left some connections waiting seconds). A read that began with a pass hands the turn on
//! when it ends, used or not, and so does a connection that closes holding one: a place is
//! never held by a connection that does not use it. Queueing while the allotment has room wakes
//! the head of the queue at once.
//!
//! The HTTP API's `/json` requests and RLQS reports in work count in the same requests open,
//! so a peer's calls share one part whatever the protocol. HTTP/1.1 has no streams to leave in
//! the kernel, but a connection brings its next request only once the last is answered (and an
//! RLQS stream its next report only once the last is assigned): one that meets its peer's gate
//! shut waits for it parked ([`Peer::request_turn`]: no CPU, not in the runtime's queue), woken
//! one per request of the peer that closes. What waits is that peer's excess, never another
//! peer's calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{ConnState, Peer};

/// No peer's allotment of the requests open (twice its allotment of the decisions in flight) is smaller
/// than this.
pub(super) const MIN_ALLOTMENT: u32 = 8;

/// Whether a peer's connections may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Well within its allotment: read as much as comes.
    Open,
    /// Past half its allotment: read in small steps, so one read cannot bring far more than the allotment.
    Narrow,
    /// At its allotment: read only to the end of a request already begun.
    Shut,
}

impl Peer {
    /// `n` requests of this peer were handed to the server.
    pub fn requests_opened(&self, n: u32) {
        if n > 0 && self.requests.fetch_add(n, Ordering::AcqRel) == 0 {
            self.tally.requesters.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// `n` requests of this peer closed.
    pub fn requests_closed(&self, n: u32) {
        if n == 0 {
            return;
        }
        // SeqCst with `request_turn`'s: either it sees this close, or this sees it waiting.
        if self.requests.fetch_sub(n, Ordering::SeqCst) == n {
            self.tally.requesters.fetch_sub(1, Ordering::AcqRel);
        }
        // One wake per place freed, never more than wait.
        for _ in 0..n.min(self.parked.load(Ordering::SeqCst)) {
            self.unparked.notify_one();
        }
        self.wake_waiting();
    }

    /// A request of this peer from the HTTP API (or an RLQS report), once its gate is open to
    /// it: counted in its requests open until the [`OpenRequest`] is dropped. While the gate is
    /// shut it waits, woken by the peer's next request that closes.
    pub async fn request_turn(self: &Arc<Self>) -> OpenRequest {
        let mut paused = false;
        loop {
            let waiting = Waiting::on(&self.parked);
            let turn = self.unparked.notified();
            let mut turn = std::pin::pin!(turn);
            turn.as_mut().enable();
            if self.gate_at(self.requests.load(Ordering::SeqCst)) != Gate::Shut {
                drop(waiting);
                self.requests_opened(1);
                return OpenRequest(Arc::clone(self));
            }
            if !paused {
                paused = true;
                self.reads_paused();
            }
            turn.await;
        }
    }

    /// Requests of this peer open now.
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Whether this peer's connections may be read now.
    pub fn gate(&self) -> Gate {
        self.gate_at(self.requests())
    }

    fn gate_at(&self, open: u32) -> Gate {
        let allotment = self.allotment();
        if open >= allotment {
            Gate::Shut
        } else if open.saturating_mul(2) >= allotment {
            Gate::Narrow
        } else {
            Gate::Open
        }
    }

    /// The requests this peer may have open: twice its allotment of the budget (the decisions in
    /// flight): what gets through over its allotment of the decisions is refused at once by
    /// admission, the rest waits in the kernel.
    fn allotment(&self) -> u32 {
        let requesters = self.tally.requesters.load(Ordering::Relaxed).max(1);
        let budget = self.tally.budget.load(Ordering::Relaxed);
        let budget = budget.min(self.tally.timed.load(Ordering::Relaxed));
        (budget / requesters).saturating_mul(2).max(MIN_ALLOTMENT)
    }

    /// Puts `conn` in the queue at the gate unless it is there already.
    pub(super) fn queue_at_gate(&self, conn: &Arc<ConnState>) {
        if conn.at_gate.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.push_back(Arc::downgrade(conn));
            self.anyone_waiting.store(true, Ordering::Release);
        } else {
            conn.at_gate.store(false, Ordering::Release);
            return;
        }
        // Queued while there is room (a close came between its look at the gate and now):
        // the head of the queue is woken now, not at the next close, which may never come.
        self.wake_waiting();
    }

    /// Connections waiting at the gate now.
    pub fn waiting_at_gate(&self) -> usize {
        self.waiting.lock().map_or(0, |waiting| waiting.len())
    }

    /// Whether connections of this peer wait in the queue at the gate.
    pub fn anyone_waiting(&self) -> bool {
        self.anyone_waiting.load(Ordering::Acquire)
    }

    /// A woken connection took its pass (it is reading).
    pub(super) fn pass_taken(&self) {
        self.passes.fetch_sub(1, Ordering::AcqRel);
    }

    /// A read that began with a pass ended, whether it opened a request or found nothing to
    /// read (or the connection closed): the place it leaves, if any, goes to the next in the
    /// queue, so that no place is held by a connection that does not use it.
    pub fn turn_ended(&self) {
        self.wake_waiting();
    }

    /// Wakes as many queued connections as the allotment has room for beyond the passes already
    /// out (every one when nothing is open), if any wait and the gate is no longer shut.
    fn wake_waiting(&self) {
        if !self.anyone_waiting() || self.gate() == Gate::Shut {
            return;
        }
        let open = self.requests();
        let turns = if open == 0 {
            u32::MAX
        } else {
            let passes = self.passes.load(Ordering::Acquire);
            self.allotment().saturating_sub(open).saturating_sub(passes)
        };
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        let mut woken = 0;
        while woken < turns {
            let Some(conn) = waiting.pop_front() else {
                break;
            };
            let Some(conn) = conn.upgrade() else {
                continue;
            };
            // Out of the queue before it is woken: if it must wait again, it queues again.
            conn.at_gate.store(false, Ordering::Release);
            if !conn.pass.swap(true, Ordering::AcqRel) {
                self.passes.fetch_add(1, Ordering::AcqRel);
            }
            conn.wake();
            woken += 1;
        }
        self.anyone_waiting
            .store(!waiting.is_empty(), Ordering::Release);
    }
}

/// A request of the HTTP API (or an RLQS report in work) counted in its peer's requests open;
/// closed when dropped.
#[derive(Debug)]
pub struct OpenRequest(Arc<Peer>);

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.requests_closed(1);
    }
}

/// One request counted as parked at the gate while it lives (a waiter dropped by its caller
/// stops counting too).
struct Waiting<'a>(&'a AtomicU32);

impl<'a> Waiting<'a> {
    fn on(count: &'a AtomicU32) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
