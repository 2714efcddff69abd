//! Readings of fairness between peers: kept by `peers`, rendered by `metrics`
//! (`turnstile_requests_shed_total{reason}`, `turnstile_peers_active`,
//! `turnstile_peer_largest_share`, `turnstile_grpc_connections_closed_total{reason}`, the door's
//! budget and probes), and the counter-store calls' time the door steers on. Every
//! label value is one of a fixed set, so the series are bounded whatever the clients do.
//!
//! Must not touch: the rules of fairness (`peers` owns them); this only holds numbers.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::histogram::Histogram;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Why a call was refused, as the metric's `reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// The peer was over its allotment of the decisions in flight while others were active
    /// (label `peer_over_part`, the name users alert on and messages use).
    PeerOverAllotment,
    /// No place under the limit came within the call's deadline.
    Limit,
    /// The peer already had its most RLQS streams open.
    PeerStreams,
    /// Even the fastest recent decision took longer than the call's deadline (answered
    /// `UNAVAILABLE`: the store, not Turnstile, is too slow).
    StoreTooSlow,
}

impl ShedReason {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            ShedReason::PeerOverAllotment => "peer_over_part",
            ShedReason::Limit => "limit",
            ShedReason::PeerStreams => "peer_streams",
            ShedReason::StoreTooSlow => "store_too_slow",
        }
    }

    /// Every reason, in the order the metric lists them.
    pub const ALL: [ShedReason; 4] = [
        ShedReason::PeerOverAllotment,
        ShedReason::Limit,
        ShedReason::PeerStreams,
        ShedReason::StoreTooSlow,
    ];
}

/// Why Turnstile closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// No call for the idle timeout.
    Idle = 1,
    /// PINGs faster than the policy allows without calls between them.
    TooManyPings = 2,
    /// Its peer opened one more than its cap.
    PeerCap = 3,
    /// All connections were taken and a new one came: this was the longest idle of the peer
    /// holding the most.
    MakeRoom = 4,
}

impl CloseReason {
    /// The label value of the metric.
    pub fn label(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::TooManyPings => "too_many_pings",
            CloseReason::PeerCap => "peer_cap",
            CloseReason::MakeRoom => "make_room",
        }
    }

    /// Every reason, in the order the metric lists them.
    pub const ALL: [CloseReason; 4] = [
        CloseReason::Idle,
        CloseReason::TooManyPings,
        CloseReason::PeerCap,
        CloseReason::MakeRoom,
    ];

    /// The reason stored as `reason as u8`.
    pub fn from_u8(value: u8) -> Option<CloseReason> {
        CloseReason::ALL.into_iter().find(|r| *r as u8 == value)
    }
}

/// Calls refused by reason, connections closed by reason, and the largest peer's hold.
#[derive(Debug, Default)]
pub struct PeerReadings {
    shed: [AtomicU64; ShedReason::ALL.len()],
    closed: [AtomicU64; CloseReason::ALL.len()],
    /// Since the last scrape: the most decisions one peer held, and the most in flight in all
    /// at that moment or any other.
    largest_holding: AtomicU32,
    peak_total: AtomicU32,
    active: AtomicU32,
    reads_paused: AtomicU64,
    /// The door's budget in time (requests open in all; 0 until first steered) and
    /// the last probe of the runtime's queue (µs).
    door_budget: AtomicU32,
    door_queue_us: AtomicU64,
    door_store_queue_us: AtomicU64,
    /// Every counter-store call's time (`turnstile_backend_call_seconds`): observed by the
    /// instrumented store, read by the door as the store's queue.
    pub(crate) store_time: Histogram,
}

impl PeerReadings {
    /// A peer now holds `holding` decisions, of `total` in flight.
    pub fn holding(&self, holding: u32, total: u32) {
        // A load first: on the decision's path the maxima rarely move.
        if holding > self.largest_holding.load(Ordering::Relaxed) {
            self.largest_holding.fetch_max(holding, Ordering::Relaxed);
        }
        if total > self.peak_total.load(Ordering::Relaxed) {
            self.peak_total.fetch_max(total, Ordering::Relaxed);
        }
    }

    /// Peers with a decision in flight now.
    pub fn set_active(&self, active: u32) {
        self.active.store(active, Ordering::Relaxed);
    }

    /// Peers with a decision in flight at the last change.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    /// A connection stopped being read at its peer's allotment of the requests open.
    pub fn reads_paused(&self) {
        self.reads_paused.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections held back so far.
    pub fn reads_paused_total(&self) -> u64 {
        self.reads_paused.load(Ordering::Relaxed)
    }

    /// The door's budget became `budget` after a probe that found the runtime's queue at
    /// `queue` and the store's at `store_queue`.
    pub fn set_door(&self, budget: u32, queue: Duration, store_queue: Duration) {
        self.door_budget.store(budget, Ordering::Relaxed);
        self.door_queue_us.store(micros(queue), Ordering::Relaxed);
        self.door_store_queue_us
            .store(micros(store_queue), Ordering::Relaxed);
    }

    /// The door's budget in time (`None` until steered) and its last probes of the runtime's
    /// queue and the store's.
    pub fn door(&self) -> (Option<u32>, Duration, Duration) {
        let budget = self.door_budget.load(Ordering::Relaxed);
        let queue = self.door_queue_us.load(Ordering::Relaxed);
        let store_queue = self.door_store_queue_us.load(Ordering::Relaxed);
        (
            (budget != 0).then_some(budget),
            Duration::from_micros(queue),
            Duration::from_micros(store_queue),
        )
    }

    /// Counter-store calls so far and their total time.
    pub fn store_calls(&self) -> (u64, Duration) {
        let (calls, nanos) = self.store_time.totals();
        (calls, Duration::from_nanos(nanos))
    }

    /// A call was refused.
    pub fn shed(&self, reason: ShedReason) {
        if let Some(n) = self.shed.get(reason as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connection was told to close.
    pub fn closed(&self, reason: CloseReason) {
        if let Some(n) = self.closed.get(reason as usize - 1) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Calls refused for `reason` so far.
    pub fn shed_total(&self, reason: ShedReason) -> u64 {
        self.shed
            .get(reason as usize)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// Connections closed for `reason` so far.
    pub fn closed_total(&self, reason: CloseReason) -> u64 {
        self.closed
            .get(reason as usize - 1)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    /// The largest share of the decisions in flight one peer held since the last call (0 to
    /// 1; 0 when none was in flight), and starts the next span.
    pub fn take_largest_share(&self) -> f64 {
        let holding = self.largest_holding.swap(0, Ordering::Relaxed);
        let total = self.peak_total.swap(0, Ordering::Relaxed);
        if total == 0 {
            0.0
        } else {
            f64::from(holding) / f64::from(total)
        }
    }
}
