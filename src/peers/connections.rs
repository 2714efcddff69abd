//! The open connections by peer: a cap in all and per peer that never leaves a newcomer
//! waiting (at a cap, the longest-idle connection of the peer holding the most, or of the
//! newcomer's own peer at its own cap, is told to close), and each connection's calls, so that
//! idle means "no call open and none started for the idle timeout" whatever the client sends
//! besides (PINGs, SETTINGS, WINDOW_UPDATEs).
//!
//! Must not touch: the bytes of a connection (the server's `incoming` module closes a
//! connection told to close, with a GOAWAY).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
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
    /// When the last call started or ended (ms since `epoch`).
    last_call_ms: AtomicU64,
    /// Calls started on this connection so far.
    calls: AtomicU64,
    open_calls: AtomicU32,
}

impl ConnState {
    /// The connection's peer.
    pub fn peer(&self) -> &Arc<Peer> {
        &self.peer
    }

    /// Counts a call open on this connection until the guard is dropped.
    pub fn call(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // Not idle while it is open; the time is taken when it ends.
        self.open_calls.fetch_add(1, Ordering::AcqRel);
        CallGuard {
            conn: Arc::clone(self),
        }
    }

    /// Calls started on this connection so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// How long the connection has had no call open (zero while one is).
    pub fn idle_for(&self) -> Duration {
        if self.open_calls.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_call_ms.load(Ordering::Relaxed));
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

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_call_ms.store(ms, Ordering::Relaxed);
    }

    /// Which connection to close first: idle ones before busy ones, the longest idle first,
    /// the oldest first among equals.
    fn keep_score(&self) -> (bool, u64, u64) {
        (
            self.open_calls.load(Ordering::Relaxed) > 0,
            self.last_call_ms.load(Ordering::Relaxed),
            self.id,
        )
    }
}

/// A call open on a connection, until dropped.
#[derive(Debug)]
pub struct CallGuard {
    conn: Arc<ConnState>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.conn.touch();
        self.conn.open_calls.fetch_sub(1, Ordering::AcqRel);
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
            last_call_ms: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            open_calls: AtomicU32::new(0),
        });
        state.touch();
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
