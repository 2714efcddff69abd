//! The limit's shared state: the places (a semaphore resized as the limit moves), the
//! permits that hold them and time their calls, the hand-over of a closed period's
//! measurements (`measuring`) to the [`Controller`], the wait a call may have, and the refusal.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::controller::Controller;
use super::measuring::{Measuring, micros};
use crate::metrics::AdmissionReadings;
use crate::peers::{Fair, Peer, PeerId, Peers, ShedReason, Stream};
use crate::settings::AdaptiveConcurrency;

/// What the layer and every call's permit share.
#[derive(Debug)]
pub(super) struct Shared {
    /// `GRPC_ADAPTIVE_CONCURRENCY`: off admits every call untimed, fairly under `fixed`.
    pub(super) enabled: bool,
    /// The limit on decisions in flight when the adaptive one is off.
    fixed: u32,
    max_wait: Option<Duration>,
    /// How long a call without a deadline may wait for a place.
    default_timeout: Duration,
    peers: Arc<Peers>,
    /// The peer of calls that came without a connection's state (the Unix socket).
    local: Arc<Peer>,
    /// One permit per place under the limit.
    pub(super) places: Arc<Semaphore>,
    /// Places still to be taken away after the limit shrank while they were in use: a permit
    /// given back while this is above zero is forgotten instead.
    debt: AtomicU32,
    limit: AtomicU32,
    /// The last period's mean latency (µs): what an admitted call is expected to take.
    expected_us: AtomicU64,
    /// The last period's fastest call (µs): when even that is longer than a caller's deadline,
    /// the store (not Turnstile's load) is what keeps the call from an answer in time.
    fastest_recent_us: AtomicU64,
    /// In slow start, a period also ends after this many calls (`u64::MAX`: by time only).
    round: AtomicU64,
    /// The period being measured.
    measuring: Measuring,
    controller: Mutex<Controller>,
    readings: Arc<AdmissionReadings>,
}

impl Shared {
    /// The shared state of a limit with these bounds (`fixed` when off), fair between `peers`,
    /// reporting to `readings`.
    pub(super) fn new(
        bounds: AdaptiveConcurrency,
        fixed: u32,
        default_timeout: Duration,
        peers: Arc<Peers>,
        readings: Arc<AdmissionReadings>,
    ) -> Shared {
        let controller = Controller::new(bounds);
        let limit = controller.limit();
        if bounds.enabled {
            readings.set_limit(limit);
        }
        if bounds.enabled {
            // Else the budget stays `GRPC_FAIR_REQUESTS_OPEN`'s.
            peers.set_budget(limit);
        }
        peers.set_limit(if bounds.enabled { limit } else { fixed.max(1) });
        Shared {
            enabled: bounds.enabled,
            fixed: fixed.max(1),
            max_wait: bounds.max_wait,
            default_timeout,
            local: peers.peer(PeerId::Local, None),
            peers,
            places: Arc::new(Semaphore::new(usize::try_from(limit).unwrap_or(usize::MAX))),
            debt: AtomicU32::new(0),
            limit: AtomicU32::new(limit),
            expected_us: AtomicU64::new(0),
            fastest_recent_us: AtomicU64::new(0),
            round: AtomicU64::new(controller.round().unwrap_or(u64::MAX)),
            measuring: Measuring::new(),
            controller: Mutex::new(controller),
            readings,
        }
    }
}

/// A place among the decisions in flight; given back on drop (or taken away, when the limit
/// shrank meanwhile).
#[derive(Debug)]
pub(in crate::server) struct Permit {
    shared: Arc<Shared>,
    place: Option<OwnedSemaphorePermit>,
    admitted: Instant,
}

impl Permit {
    pub(super) fn new(shared: &Arc<Shared>, place: OwnedSemaphorePermit) -> Permit {
        let in_flight = shared.readings.enter();
        shared
            .measuring
            .entered(u32::try_from(in_flight).unwrap_or(u32::MAX));
        Permit {
            shared: Arc::clone(shared),
            place: Some(place),
            admitted: Instant::now(),
        }
    }

    /// The call was answered, or dropped unanswered (its caller cancelled it or its deadline
    /// passed: it took at least this long): its latency joins the period, which may end here.
    fn finished(&self) {
        let now = Instant::now();
        let shared = &self.shared;
        let round = shared.round.load(Ordering::Relaxed);
        if shared.measuring.finished(self.admitted, now, round) {
            shared.end_period(now);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.finished();
        self.shared.readings.leave();
        let owed = self
            .shared
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
            .is_ok();
        if let (true, Some(place)) = (owed, self.place.take()) {
            place.forget();
        }
    }
}

impl Shared {
    /// The peer of calls without a connection's state.
    pub(super) fn local_peer(&self) -> Arc<Peer> {
        Arc::clone(&self.local)
    }

    /// An RLQS stream for `peer`, or the refusal when it has its most open.
    pub(super) fn open_stream(&self, peer: &Arc<Peer>) -> Result<Stream, tonic::Status> {
        let cap = self.peers.stream_cap();
        peer.open_stream(cap).ok_or_else(|| {
            let why = format!(
                "{peer} has {cap} RLQS streams open, the most one client may \
                 (RLQS_MAX_STREAMS_PER_PEER); close one first"
            );
            peer.shed(ShedReason::PeerStreams, &why);
            tonic::Status::resource_exhausted(why)
        })
    }

    /// With the adaptive limit off: whether `peer`'s next decision fits the fixed limit, or
    /// its allotment of it.
    pub(super) fn fixed_admits(&self, peer: &Arc<Peer>) -> Result<(), tonic::Status> {
        if self.peers.decisions() < self.fixed {
            return Ok(());
        }
        self.fair(peer).map(|_| ())
    }

    /// Where `peer`'s next decision stands against its allotment of the limit: the refusal when it
    /// is over its allotment while others are active.
    pub(super) fn fair(&self, peer: &Arc<Peer>) -> Result<Fair, tonic::Status> {
        let limit = match self.enabled {
            true => self.limit.load(Ordering::Relaxed),
            false => self.fixed,
        };
        match peer.fair(limit) {
            Fair::Over {
                holding,
                allotment,
                active,
            } => Err(tonic::Status::resource_exhausted(
                peer.refuse_over_allotment(limit, holding, allotment, active),
            )),
            fair => Ok(fair),
        }
    }

    /// The refusal of `peer`'s call that found no place in time: `RESOURCE_EXHAUSTED`
    /// (Turnstile's overload), or `UNAVAILABLE` when even the fastest recent call took longer
    /// than the caller's deadline: then the store is too slow for it, however few calls are
    /// admitted.
    pub(super) fn refusal(&self, peer: &Arc<Peer>, deadline: Option<Duration>) -> tonic::Status {
        let fastest = Duration::from_micros(self.fastest_recent_us.load(Ordering::Relaxed));
        match deadline {
            // Not even the fastest call (answered, or given up on after that long) would have
            // left the margin `wait_budget` keeps: no admission policy gets this call answered.
            Some(deadline) if fastest >= deadline - deadline / 10 => {
                let why = format!(
                    "counter store too slow for this call: the fastest decision lately took {} ms, \
                     the call's deadline is {} ms",
                    fastest.as_millis(),
                    deadline.as_millis()
                );
                peer.shed(ShedReason::StoreTooSlow, &why);
                tonic::Status::unavailable(why)
            }
            _ => {
                let why = format!(
                    "Turnstile is overloaded: {} decisions in flight (the adaptive limit, which \
                     follows the latency of the calls it admits); try again later",
                    self.limit.load(Ordering::Relaxed)
                );
                peer.shed(ShedReason::Limit, &why);
                tonic::Status::resource_exhausted(why)
            }
        }
    }

    /// How long a call may wait for a place: until its `grpc-timeout` (or the default
    /// timeout, when it has none) less the expected latency of an admitted call and a tenth of
    /// the timeout for the answer's way back (it could not be answered in time after that),
    /// at most `max_wait`.
    pub(super) fn wait_budget(&self, deadline: Option<Duration>) -> Duration {
        let expected = Duration::from_micros(self.expected_us.load(Ordering::Relaxed));
        let deadline = deadline.unwrap_or(self.default_timeout);
        let budget = deadline.saturating_sub(expected + deadline / 10);
        self.max_wait.map_or(budget, |most| budget.min(most))
    }

    /// Moves the semaphore's places from `from` to `to`: new places at once; places taken
    /// away at once when free, else as their calls finish.
    fn resize(&self, from: u32, to: u32) {
        if to < from {
            let cut = usize::try_from(from - to).unwrap_or(usize::MAX);
            let taken = self.places.forget_permits(cut);
            let owed = u32::try_from(cut - taken).unwrap_or(u32::MAX);
            self.debt.fetch_add(owed, Ordering::AcqRel);
        } else if to > from {
            let mut grow = to - from;
            // Cancel what is still owed first.
            let _ = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    let cancelled = d.min(to - from);
                    grow = to - from - cancelled;
                    Some(d - cancelled)
                });
            self.places
                .add_permits(usize::try_from(grow).unwrap_or(usize::MAX));
        }
    }

    /// Takes the period's measurements (the one caller that won the period's end) and sets
    /// the next limit.
    fn end_period(&self, now: Instant) {
        let in_flight = u32::try_from(self.readings.in_flight()).unwrap_or(u32::MAX);
        let period = self.measuring.take(in_flight);
        let Ok(mut controller) = self.controller.lock() else {
            // A panic elsewhere while updating: keep the limit as it was.
            return;
        };
        let before = controller.limit();
        let limit = controller.update(&period, now.into_std());
        self.resize(before, limit);
        self.round
            .store(controller.round().unwrap_or(u64::MAX), Ordering::Relaxed);
        self.limit.store(limit, Ordering::Relaxed);
        self.expected_us
            .store(micros(period.mean), Ordering::Relaxed);
        if let Some(fastest) = period.fastest {
            self.fastest_recent_us
                .store(micros(fastest), Ordering::Relaxed);
        }
        self.readings.set_limit(limit);
        self.peers.set_budget(limit);
        self.peers.set_limit(limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PeerReadings;
    use crate::peers::ConnectionLimits;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn shared() -> Arc<Shared> {
        let limits = ConnectionLimits {
            max: 64,
            per_peer: 64,
        };
        let peers = Peers::new(limits, 2, Arc::new(PeerReadings::default()));
        let bounds = AdaptiveConcurrency {
            enabled: true,
            ..AdaptiveConcurrency::default()
        };
        let readings = Arc::new(AdmissionReadings::default());
        Arc::new(Shared::new(
            bounds,
            64,
            Duration::from_secs(1),
            peers,
            readings,
        ))
    }

    /// On a paused clock: once a period of calls that each took 30 ms has closed, a call may
    /// wait its deadline less those 30 ms and a tenth of the deadline; a caller whose deadline
    /// the fastest call does not fit is told the store is too slow (`UNAVAILABLE`), any other
    /// that Turnstile is overloaded (`RESOURCE_EXHAUSTED`).
    #[tokio::test(start_paused = true)]
    async fn a_closed_period_sets_the_wait_and_the_refusal() {
        let shared = shared();
        let peer = shared.local_peer();
        assert_eq!(
            shared.wait_budget(Some(MS(100))),
            MS(90),
            "nothing measured yet"
        );
        assert_eq!(shared.wait_budget(None), MS(900), "the default timeout");
        for _ in 0..5 {
            let place = Arc::clone(&shared.places)
                .try_acquire_owned()
                .expect("a free place");
            let permit = Permit::new(&shared, place);
            tokio::time::advance(MS(30)).await;
            drop(permit);
        }
        assert_eq!(shared.wait_budget(Some(MS(100))), MS(60));
        let code = |deadline| shared.refusal(&peer, Some(MS(deadline))).code();
        assert_eq!(code(30), tonic::Code::Unavailable);
        assert_eq!(code(100), tonic::Code::ResourceExhausted);
        assert_eq!(
            shared.refusal(&peer, None).code(),
            tonic::Code::ResourceExhausted
        );
    }
}
