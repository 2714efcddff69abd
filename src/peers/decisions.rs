//! A peer's allotment of the decisions in flight (the rule is in the module doc of `peers`), the
//! guards that count a decision or an RLQS stream while it lasts, and the refusal's record: a
//! metric by reason and at most one log line per peer every [`LOG_EVERY_MS`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Peer;
use crate::metrics::ShedReason;

/// At most one log line per peer being refused in this many milliseconds.
const LOG_EVERY_MS: u64 = 10_000;

/// Whether one more decision of a peer fits its allotment of `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fair {
    /// Within its allotment: admit it now, even past the limit.
    Within,
    /// Over its allotment, but no other peer is active: it may wait for a place.
    Alone,
    /// Over its allotment while others are active: refuse it now.
    Over {
        /// Decisions the peer has in flight.
        holding: u32,
        /// Its allotment of the limit.
        allotment: u32,
        /// Peers active, this one included.
        active: u32,
    },
}

/// A decision in flight, counted for its peer (and in the tally) until dropped.
#[derive(Debug)]
pub struct Decision {
    peer: Arc<Peer>,
}

impl Drop for Decision {
    fn drop(&mut self) {
        self.peer.decision_ended();
    }
}

/// An RLQS stream open, counted for its peer until dropped.
#[derive(Debug)]
pub struct Stream {
    peer: Arc<Peer>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.peer.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Peer {
    /// Counts a decision of this peer in flight until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> Decision {
        self.decision_started();
        Decision {
            peer: Arc::clone(self),
        }
    }

    /// Counts a decision of this peer in flight; the caller's guard ends it
    /// ([`Decision`], or a [`CallGuard`](super::CallGuard) that carries one).
    pub(super) fn decision_started(&self) {
        let tally = &self.tally;
        let total = tally.decisions.fetch_add(1, Ordering::AcqRel) + 1;
        let holding = self.decisions.fetch_add(1, Ordering::AcqRel) + 1;
        if holding == 1 {
            let active = tally.active.fetch_add(1, Ordering::AcqRel) + 1;
            tally.readings.set_active(active);
        }
        tally.readings.holding(holding, total);
    }

    /// A decision of this peer ended.
    pub(super) fn decision_ended(&self) {
        let tally = &self.tally;
        tally.decisions.fetch_sub(1, Ordering::AcqRel);
        if self.decisions.fetch_sub(1, Ordering::AcqRel) == 1 {
            let active = tally.active.fetch_sub(1, Ordering::AcqRel) - 1;
            tally.readings.set_active(active);
        }
    }

    /// Decisions of this peer in flight now.
    pub fn decisions(&self) -> u32 {
        self.decisions.load(Ordering::Relaxed)
    }

    /// A decision of this peer without waiting (the HTTP API's `/json`): counted when the
    /// decisions in flight are under the limit or the peer is within its allotment or alone;
    /// otherwise the refusal, recorded, saying why.
    pub fn try_enter(self: &Arc<Self>) -> Result<Decision, String> {
        let limit = self.tally.limit.load(Ordering::Relaxed);
        if self.tally.decisions.load(Ordering::Relaxed) < limit {
            return Ok(self.enter());
        }
        match self.fair(limit) {
            Fair::Over {
                holding,
                allotment,
                active,
            } => Err(self.refuse_over_allotment(limit, holding, allotment, active)),
            _ => Ok(self.enter()),
        }
    }

    /// Records the refusal of a decision of this peer, which holds `holding` of `limit` decisions
    /// in flight, over its `allotment` of it among `active` peers, and says why.
    pub fn refuse_over_allotment(
        &self,
        limit: u32,
        holding: u32,
        allotment: u32,
        active: u32,
    ) -> String {
        let why = format!(
            "Turnstile is at its limit of {limit} decisions in flight and {self} holds {holding} of \
             them, over its part ({allotment}, the limit shared by {active} active clients); try again \
             later"
        );
        self.shed(ShedReason::PeerOverAllotment, &why);
        why
    }

    /// Whether one more decision of this peer fits its allotment of `limit`.
    pub fn fair(&self, limit: u32) -> Fair {
        let holding = self.decisions();
        let others = self
            .tally
            .active
            .load(Ordering::Relaxed)
            .saturating_sub(u32::from(holding > 0));
        let active = others + 1;
        let allotment = (limit / active).max(1);
        if holding < allotment {
            Fair::Within
        } else if others == 0 {
            Fair::Alone
        } else {
            Fair::Over {
                holding,
                allotment,
                active,
            }
        }
    }

    /// Opens an RLQS stream for this peer, or `None` when it has `cap` open already.
    pub fn open_stream(self: &Arc<Self>, cap: u32) -> Option<Stream> {
        self.streams
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()?;
        Some(Stream {
            peer: Arc::clone(self),
        })
    }

    /// Records a call of this peer refused for `reason`: the metric, and a log line naming the
    /// peer at most every 10 s (with the refusals since the last one).
    pub fn shed(&self, reason: ShedReason, why: &str) {
        self.tally.readings.shed(reason);
        self.log_at_most_every(reason.label(), why);
    }

    /// Records a connection of this peer held back at its allotment of the requests open: the
    /// metric, and the same rate-limited log line (only while another peer has requests open).
    pub fn reads_paused(&self) {
        self.tally.readings.reads_paused();
        if self.tally.requesters.load(Ordering::Relaxed) < 2 {
            // Alone, it is held to the whole limit: the service is saturated, not unfair.
            return;
        }
        self.log_at_most_every(
            "held_back",
            "its requests open reached its part (GRPC_FAIR_REQUESTS_OPEN, or twice the adaptive \
             limit, shared by the clients with requests open); its connections are read again \
             as its requests are answered",
        );
    }

    fn log_at_most_every(&self, reason: &str, why: &str) {
        self.shed_unlogged.fetch_add(1, Ordering::Relaxed);
        let now = self.tally.now_ms().max(1);
        let last = self.logged_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < LOG_EVERY_MS {
            return;
        }
        if self
            .logged_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            let times = self.shed_unlogged.swap(0, Ordering::Relaxed);
            tracing::warn!(peer = %self, reason, times, "a client is being shed: {why}");
        }
    }
}
