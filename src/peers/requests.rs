//! A peer's requests open, against its part of the budget: whether its connections may be
//! read. A request is open from when its connection hands hyper its last frame (the client's
//! END_STREAM) until the stream closes (the server's END_STREAM, or RST_STREAM either way),
//! whether or not its task has been polled yet: what counts is what waits in the runtime. A
//! stream whose client half stays open (an RLQS stream) is not a request waiting, so it never
//! holds its peer's other calls back. A connection that may not be
//! read registers to be woken when one of the peer's requests closes.

use std::sync::atomic::Ordering;
use std::task::Waker;

use super::Peer;

/// No peer's part of the requests open (twice its part of the decisions in flight) is smaller
/// than this.
pub(super) const MIN_PART: u32 = 8;

/// Whether a peer's connections may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Well within its part: read as much as comes.
    Open,
    /// Past half its part: read in small steps, so one read cannot bring far more than the part.
    Narrow,
    /// At its part: read only to the end of a request already begun.
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
        if self.requests.fetch_sub(n, Ordering::AcqRel) == n {
            self.tally.requesters.fetch_sub(1, Ordering::AcqRel);
        }
        self.wake_waiting();
    }

    /// Requests of this peer open now.
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Whether this peer's connections may be read now.
    pub fn gate(&self) -> Gate {
        let open = self.requests();
        let requesters = self.tally.requesters.load(Ordering::Relaxed).max(1);
        // Twice its part of the budget (the decisions in flight): what gets through over its
        // part of the decisions is refused at once by admission, the rest waits in the kernel.
        let budget = self.tally.budget.load(Ordering::Relaxed);
        let budget = budget.min(self.tally.timed.load(Ordering::Relaxed));
        let part = (budget / requesters).saturating_mul(2).max(MIN_PART);
        if open >= part {
            Gate::Shut
        } else if open.saturating_mul(2) >= part {
            Gate::Narrow
        } else {
            Gate::Open
        }
    }

    /// Registers `waker` to be woken when a request of this peer closes; whether the gate is
    /// still shut once registered (when not, the caller reads on: one may have closed meanwhile).
    pub fn wait_at_gate(&self, waker: &Waker) -> bool {
        if let Ok(mut waiting) = self.waiting.lock() {
            if !waiting.iter().any(|w| w.will_wake(waker)) {
                waiting.push(waker.clone());
            }
            self.anyone_waiting.store(true, Ordering::Release);
        }
        self.gate() == Gate::Shut
    }

    /// Wakes the connections waiting at the gate, if any wait and it is no longer shut.
    fn wake_waiting(&self) {
        if !self.anyone_waiting.load(Ordering::Acquire) || self.gate() == Gate::Shut {
            return;
        }
        let woken = match self.waiting.lock() {
            Ok(mut waiting) => {
                self.anyone_waiting.store(false, Ordering::Release);
                std::mem::take(&mut *waiting)
            }
            Err(_) => return,
        };
        woken.into_iter().for_each(Waker::wake);
    }
}
