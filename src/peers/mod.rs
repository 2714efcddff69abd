//! The clients as peers, the unit of fairness: a peer is the client's IP address, or the
//! identity of its certificate under mTLS (one Envoy's connections share one peer whatever
//! their number). This module owns what is counted per peer and the rules that divide the
//! service between peers:
//!
//! - **Decisions in flight.** When the decisions in flight reach the limit (the adaptive limit
//!   or the fixed one), each active peer (one with a decision in flight) gets an equal allotment of
//!   it: `limit / active peers`, at least one. A peer within its allotment is admitted at once even
//!   when the limit is full (it never queues behind another peer's backlog: the places it
//!   takes beyond the limit are bounded by the allotments, so the total stays under twice the
//!   limit and falls back as the peer over its allotment is refused); a peer over its allotment while
//!   others are active is refused at once; a peer alone waits for a place as before. This is
//!   per-peer partitions of the limit rather than deficit round robin: it needs no queue per
//!   peer and no scheduler, only two counters read on the call's path.
//! - **Requests open**, from the client's END_STREAM handed to hyper to the answer, polled or
//!   not: a peer holding its allotment of the budget (`GRPC_FAIR_REQUESTS_OPEN`, or twice the
//!   adaptive limit, divided by the peers with a request open; at least 8) is not read further
//!   until it has fewer (see [`Gate`]): its excess waits in the kernel (TCP flow control), not in
//!   the runtime's queue ahead of everyone else's calls, and one peer alone is held to the whole
//!   budget. The budget is steered in time under that count ([`door`]: the runtime's queue
//!   kept within `GRPC_FAIR_QUEUE_TARGET`), which is also why no queue per peer is needed
//!   after the door. Admission then refuses what gets through over its allotment of the decisions.
//! - **RLQS streams** open per peer, bounded (`RLQS_MAX_STREAMS_PER_PEER`).
//! - **Connections** per peer and in all (the [`Connections`] registry): a new connection is
//!   always let in; at a cap, the longest-idle connection of the peer holding the most (or of
//!   the newcomer's own peer, at its own cap) is closed instead.
//!
//! Peers are kept while something holds them (a connection, a call): the index holds weak
//! references and forgets the dead ones as it grows.
//!
//! Must not touch: protocols (the server and the HTTP API read identities and answer refusals),
//! the decision, the stores. Readings go to [`PeerReadings`] for `metrics` to render.

mod connections;
mod decisions;
pub mod door;
mod requests;

pub use crate::metrics::{CloseReason, ShedReason};
pub use connections::{CallGuard, ConnHandle, ConnState, ConnectionLimits, Connections};
pub use decisions::{Decision, Fair, Stream};
pub use requests::{Gate, OpenRequest};

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crate::metrics::PeerReadings;

/// Who a client is, for fairness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerId {
    /// The client's IP address (an IPv4-mapped IPv6 address is its IPv4 address).
    Address(IpAddr),
    /// The client certificate presented under mTLS: the XXH3-64 digest of its DER bytes.
    Certificate(u64),
    /// A client on the Unix domain socket (no address to tell clients apart).
    Local,
}

impl PeerId {
    /// The peer of a client at `address`.
    pub fn of_address(address: IpAddr) -> PeerId {
        PeerId::Address(address.to_canonical())
    }

    /// The peer of a client that presented the certificate `der`.
    pub fn of_certificate(der: &[u8]) -> PeerId {
        PeerId::Certificate(xxhash_rust::xxh3::xxh3_64(der))
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerId::Address(ip) => write!(f, "{ip}"),
            PeerId::Certificate(digest) => write!(f, "client certificate {digest:016x}"),
            PeerId::Local => f.write_str("a client on the Unix socket"),
        }
    }
}

/// One peer's counts. Held by its connections and calls; see the module doc.
#[derive(Debug)]
pub struct Peer {
    id: PeerId,
    /// Where the address came from, for the log (the certificate's first connection).
    seen_at: Option<IpAddr>,
    decisions: AtomicU32,
    /// Requests open on the peer's connections (see `requests`).
    requests: AtomicU32,
    /// Connections that stopped reading while the peer was at its allotment of the requests open,
    /// first come first woken; each at most once (see `requests`).
    waiting: Mutex<std::collections::VecDeque<Weak<ConnState>>>,
    anyone_waiting: std::sync::atomic::AtomicBool,
    /// Connections woken from the queue that have not read yet (each holds a pass).
    passes: AtomicU32,
    /// Requests parked for room in the allotment (the HTTP API's, RLQS reports), and their
    /// wake (see `requests`).
    parked: AtomicU32,
    unparked: tokio::sync::Notify,
    streams: AtomicU32,
    connections: AtomicU32,
    /// Calls refused since the last log line about this peer.
    shed_unlogged: AtomicU64,
    /// When the last log line about this peer was written (ms since the tally's epoch; 0: never).
    logged_ms: AtomicU64,
    tally: Arc<Tally>,
}

impl Peer {
    /// Connections this peer has open (those not being closed).
    pub fn connections(&self) -> u32 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.id, self.seen_at) {
            (PeerId::Certificate(_), Some(ip)) => write!(f, "{} (from {ip})", self.id),
            _ => write!(f, "{}", self.id),
        }
    }
}

/// What every peer adds to: decisions in flight in all, peers active.
#[derive(Debug)]
struct Tally {
    decisions: AtomicU32,
    active: AtomicU32,
    /// Peers with a request open, and the requests open all peers may share (the limit on
    /// decisions in flight: a peer's allotment of it is what its connections may have open before
    /// they stop being read).
    requesters: AtomicU32,
    budget: AtomicU32,
    /// The budget in time (`door`): at most `budget`, steered on the runtime's queue.
    timed: AtomicU32,
    /// The limit on decisions in flight (the adaptive one as it moves, or the fixed one): what
    /// `/json`'s decisions are fair against, as gRPC's are.
    limit: AtomicU32,
    epoch: Instant,
    readings: Arc<PeerReadings>,
}

impl Tally {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Every peer of the process: the index by identity, the shared tally and the connections.
#[derive(Debug)]
pub struct Peers {
    index: Mutex<Index>,
    tally: Arc<Tally>,
    connections: Arc<Connections>,
    stream_cap: u32,
}

#[derive(Debug, Default)]
struct Index {
    peers: HashMap<PeerId, Weak<Peer>>,
    /// Forget dead entries when the index reaches this size.
    prune_at: usize,
}

impl Peers {
    /// Peers under these connection limits, at most `stream_cap` RLQS streams each, reporting
    /// to `readings`.
    pub fn new(
        limits: ConnectionLimits,
        stream_cap: u32,
        readings: Arc<PeerReadings>,
    ) -> Arc<Peers> {
        let tally = Arc::new(Tally {
            decisions: AtomicU32::new(0),
            active: AtomicU32::new(0),
            requesters: AtomicU32::new(0),
            budget: AtomicU32::new(u32::MAX),
            timed: AtomicU32::new(u32::MAX),
            limit: AtomicU32::new(u32::MAX),
            epoch: Instant::now(),
            readings: Arc::clone(&readings),
        });
        Arc::new(Peers {
            index: Mutex::new(Index::default()),
            connections: Connections::new(limits, readings),
            tally,
            stream_cap: stream_cap.max(1),
        })
    }

    /// The peer `id` (the same value for every connection and call of it while any is held);
    /// `seen_at` is the address it was seen at, for the log.
    pub fn peer(&self, id: PeerId, seen_at: Option<IpAddr>) -> Arc<Peer> {
        let Ok(mut index) = self.index.lock() else {
            // A panic elsewhere while holding the index: a peer of its own still counts.
            return self.fresh(id, seen_at);
        };
        if let Some(peer) = index.peers.get(&id).and_then(Weak::upgrade) {
            return peer;
        }
        if index.peers.len() >= index.prune_at {
            index.peers.retain(|_, peer| peer.strong_count() > 0);
            index.prune_at = (index.peers.len() * 2).max(64);
        }
        let peer = self.fresh(id, seen_at);
        index.peers.insert(id, Arc::downgrade(&peer));
        peer
    }

    fn fresh(&self, id: PeerId, seen_at: Option<IpAddr>) -> Arc<Peer> {
        Arc::new(Peer {
            id,
            seen_at,
            decisions: AtomicU32::new(0),
            requests: AtomicU32::new(0),
            waiting: Mutex::new(std::collections::VecDeque::new()),
            anyone_waiting: std::sync::atomic::AtomicBool::new(false),
            passes: AtomicU32::new(0),
            parked: AtomicU32::new(0),
            unparked: tokio::sync::Notify::new(),
            streams: AtomicU32::new(0),
            connections: AtomicU32::new(0),
            shed_unlogged: AtomicU64::new(0),
            logged_ms: AtomicU64::new(0),
            tally: Arc::clone(&self.tally),
        })
    }

    /// The connection registry.
    pub fn connections(&self) -> &Arc<Connections> {
        &self.connections
    }

    /// Decisions in flight now, every peer's.
    pub fn decisions(&self) -> u32 {
        self.tally.decisions.load(Ordering::Relaxed)
    }

    /// Sets the budget: half the requests open all peers may share (the adaptive limit on
    /// decisions in flight as it moves, or half of `GRPC_FAIR_REQUESTS_OPEN`).
    pub fn set_budget(&self, budget: u32) {
        self.tally.budget.store(budget.max(1), Ordering::Relaxed);
    }

    /// Sets the limit on decisions in flight.
    pub fn set_limit(&self, limit: u32) {
        self.tally.limit.store(limit.max(1), Ordering::Relaxed);
    }

    /// The most RLQS streams one peer may have open.
    pub fn stream_cap(&self) -> u32 {
        self.stream_cap
    }
}

#[cfg(test)]
mod tests;
