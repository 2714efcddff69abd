//! The open connections by peer: a cap in all and per peer that never leaves a newcomer
//! waiting (at the cap in all, a connection that never made a call, else the longest-idle
//! connection of the peer holding the most; at a peer's own cap, its own connection that never
//! made a call or has been idle longest, is told to close), and each connection's calls, so that
//! idle means "no call open and none started for the idle timeout" whatever the client sends
//! besides (PINGs, SETTINGS, WINDOW_UPDATEs).
//!
//! Must not touch: the bytes of a connection (the server's `incoming` module closes a
//! connection told to close, with a GOAWAY).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;

use super::Peer;
use crate::metrics::{CloseReason, PeerReadings};

/// The connection caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once, in all.
    pub max: usize,
    /// Connections open at once from one peer.
    pub per_peer: usize,
}

/// One open connection: its peer, its calls, and whether it has been told to close.
#[derive(Debug)]
pub struct ConnState {
    id: u64,
    peer: Arc<Peer>,
    epoch: Instant,
    /// `CloseReason as u8`, 0 while it may stay open.
    close: AtomicU8,
    waker: AtomicWaker,
    /// The calls open (the low [`OPEN_BITS`] bits) and when the connection last became idle
    /// (ms since `epoch`, the bits above), in one word: a call's end reads the clock only when
    /// it leaves the connection idle, and a reader never sees "idle" with an older time.
    activity: AtomicU64,
    /// Whether a call was ever made on it (one that never made one is closed first for room).
    used: AtomicBool,
    /// Whether it is in its peer's queue at the gate (it is there at most once).
    pub(super) at_gate: AtomicBool,
    /// Whether it was woken from that queue and has not read since: its next read may pass
    /// the queue (one of the places the wake was for).
    pub(super) pass: AtomicBool,
}

/// Bits of [`ConnState::activity`] that count the calls open (more than any connection may
/// have: `GRPC_MAX_CONCURRENT_STREAMS` is at most 1,000,000).
const OPEN_BITS: u32 = 20;
const OPEN_MASK: u64 = (1 << OPEN_BITS) - 1;

impl ConnState {
    /// The connection's peer.
    pub fn peer(&self) -> &Arc<Peer> {
        &self.peer
    }

    /// Counts a call open on this connection until the guard is dropped.
    pub fn call(self: &Arc<Self>) -> CallGuard {
        // Not idle while it is open; the time is taken when the last one open ends.
        self.activity.fetch_add(1, Ordering::AcqRel);
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
        CallGuard {
            conn: Arc::clone(self),
            decision: false,
        }
    }

    /// How long the connection has had no call open (zero while one is).
    pub fn idle_for(&self) -> Duration {
        let activity = self.activity.load(Ordering::Acquire);
        if activity & OPEN_MASK > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(activity >> OPEN_BITS);
        self.epoch.elapsed().saturating_sub(last)
    }

    /// Why the connection was told to close, if it was.
    pub fn closing(&self) -> Option<CloseReason> {
        CloseReason::from_u8(self.close.load(Ordering::Acquire))
    }

    /// Wakes the connection's reader when it is told to close.
    pub fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    /// Registers `waker` and queues the connection at its peer's gate, to be woken when a
    /// request of the peer closes and leaves room; whether the gate is still shut to it once
    /// queued (when not, the caller reads on: one may have closed meanwhile, or its turn came).
    pub fn wait_at_gate(self: &Arc<Self>, waker: &std::task::Waker) -> bool {
        self.waker.register(waker);
        self.peer.queue_at_gate(self);
        self.gate(self.pass.load(Ordering::Acquire)) == super::Gate::Shut
    }

    /// The gate as this connection meets it: the peer's gate when it holds a pass (`passed`),
    /// else shut too while others of its peer wait in the queue, so that it queues behind them
    /// (first come, first read) instead of taking the place one of them was woken for.
    pub fn gate(&self, passed: bool) -> super::Gate {
        let gate = self.peer.gate();
        if passed || gate == super::Gate::Shut || !self.peer.anyone_waiting() {
            gate
        } else {
            super::Gate::Shut
        }
    }

    /// Takes the pass its wake from the queue gave it, if any: a read that begins with one
    /// hands the turn on when it ends ([`Peer::turn_ended`]), used or not.
    pub fn take_pass(&self) -> bool {
        let passed = self.pass.swap(false, Ordering::AcqRel);
        if passed {
            self.peer.pass_taken();
        }
        passed
    }

    /// Wakes the connection's task (its turn at the gate came).
    pub(super) fn wake(&self) {
        self.waker.wake();
    }

    /// Tells the connection to close (the first reason stays); counts it.
    pub fn close(&self, reason: CloseReason, readings: &PeerReadings) {
        let told = self
            .close
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if told {
            readings.closed(reason);
            self.waker.wake();
        }
    }

    /// Milliseconds since `epoch`, as [`ConnState::activity`] holds them.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis())
            .map_or(u64::MAX >> OPEN_BITS, |ms| ms.min(u64::MAX >> OPEN_BITS))
    }

    /// A call ended: one fewer open, and when it was the last, the connection idle from now.
    fn call_ended(&self) {
        let mut now = None;
        let mut current = self.activity.load(Ordering::Acquire);
        loop {
            let next = match current & OPEN_MASK {
                // Every end has its start: none open cannot happen, and changes nothing.
                0 => return,
                1 => *now.get_or_insert_with(|| self.now_ms()) << OPEN_BITS,
                _ => current - 1,
            };
            match self.activity.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Whether a call was ever made on it.
    fn used(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    /// Which connection to close first: one that never made a call, then idle ones before
    /// busy ones, the longest idle first, the oldest first among equals.
    fn keep_score(&self) -> (bool, bool, u64, u64) {
        let activity = self.activity.load(Ordering::Relaxed);
        let busy = activity & OPEN_MASK > 0;
        (self.used(), busy, activity >> OPEN_BITS, self.id)
    }
}

/// A call open on a connection, until dropped.
#[derive(Debug)]
pub struct CallGuard {
    conn: Arc<ConnState>,
    /// Whether the call is also a decision counted for the connection's peer (one guard, one
    /// reference to count both: a decision's path holds no second `Arc`).
    decision: bool,
}

impl CallGuard {
    /// The call is a decision: counted for the connection's peer until the guard is dropped.
    pub fn deciding(mut self) -> CallGuard {
        if !self.decision {
            self.conn.peer.decision_started();
            self.decision = true;
        }
        self
    }

    /// The connection's peer.
    pub fn peer(&self) -> &Arc<Peer> {
        &self.conn.peer
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.decision {
            self.conn.peer.decision_ended();
        }
        self.conn.call_ended();
    }
}

/// The connections open, by id.
#[derive(Debug)]
pub struct Connections {
    limits: ConnectionLimits,
    live: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    epoch: Instant,
    readings: Arc<PeerReadings>,
}

/// An open connection's place in the registry, given back when dropped.
#[derive(Debug)]
pub struct ConnHandle {
    state: Arc<ConnState>,
    registry: Arc<Connections>,
}

impl ConnHandle {
    /// The connection's state, shared with its calls.
    pub fn state(&self) -> &Arc<ConnState> {
        &self.state
    }

    /// Tells this connection to close.
    pub fn close(&self, reason: CloseReason) {
        self.registry.forget(&self.state);
        self.state.close(reason, &self.registry.readings);
    }
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        self.registry.forget(&self.state);
    }
}

impl Connections {
    pub(super) fn new(limits: ConnectionLimits, readings: Arc<PeerReadings>) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            readings,
        })
    }

    /// Registers a new connection of `peer`; at a cap, tells another to close to make room.
    pub fn open(self: &Arc<Self>, peer: Arc<Peer>) -> ConnHandle {
        let state = Arc::new(ConnState {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            peer,
            epoch: self.epoch,
            close: AtomicU8::new(0),
            waker: AtomicWaker::new(),
            activity: AtomicU64::new(0),
            used: AtomicBool::new(false),
            at_gate: AtomicBool::new(false),
            pass: AtomicBool::new(false),
        });
        state
            .activity
            .store(state.now_ms() << OPEN_BITS, Ordering::Release);
        let victim = match self.live.lock() {
            Ok(mut live) => {
                let victim = self.victim(&live, &state.peer);
                if let Some((victim, _)) = &victim {
                    live.remove(&victim.id);
                    victim.peer.connections.fetch_sub(1, Ordering::AcqRel);
                }
                live.insert(state.id, Arc::clone(&state));
                state.peer.connections.fetch_add(1, Ordering::AcqRel);
                victim
            }
            Err(_) => None,
        };
        if let Some((victim, reason)) = victim {
            victim.close(reason, &self.readings);
        }
        ConnHandle {
            state,
            registry: Arc::clone(self),
        }
    }

    /// The connection to close for a new one of `peer`, if a cap is reached.
    fn victim(
        &self,
        live: &HashMap<u64, Arc<ConnState>>,
        peer: &Arc<Peer>,
    ) -> Option<(Arc<ConnState>, CloseReason)> {
        let of = |owner: &Arc<Peer>| {
            live.values()
                .filter(|c| Arc::ptr_eq(&c.peer, owner))
                .min_by_key(|c| c.keep_score())
                .cloned()
        };
        if peer.connections() as usize >= self.limits.per_peer {
            return of(peer).map(|c| (c, CloseReason::PeerCap));
        }
        if live.len() < self.limits.max {
            return None;
        }
        // A connection that never made a call costs nobody a call; the oldest of them first.
        let unused = live.values().filter(|c| !c.used()).min_by_key(|c| c.id);
        if let Some(unused) = unused {
            return Some((Arc::clone(unused), CloseReason::MakeRoom));
        }
        let largest = live
            .values()
            .max_by_key(|c| c.peer.connections())
            .map(|c| Arc::clone(&c.peer))?;
        of(&largest).map(|c| (c, CloseReason::MakeRoom))
    }

    fn forget(&self, state: &Arc<ConnState>) {
        if let Ok(mut live) = self.live.lock()
            && live.remove(&state.id).is_some()
        {
            state.peer.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Connections registered and not told to close.
    pub fn live(&self) -> usize {
        self.live.lock().map(|l| l.len()).unwrap_or(0)
    }
}
