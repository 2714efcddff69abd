//! Readings of the adaptive limit on decisions in flight: kept by the server's `admission`
//! layer, rendered by `metrics` (`turnstile_concurrency_limit`, `turnstile_concurrency_in_flight`,
//! `turnstile_requests_shed_total` is kept by fairness's readings, by reason).
//!
//! Must not touch: the limit's arithmetic (the server owns it); this only holds numbers.

use std::sync::atomic::{AtomicU64, Ordering};

/// The adaptive limit's current value and the decisions in flight under it.
#[derive(Debug, Default)]
pub struct AdmissionReadings {
    limit: AtomicU64,
    in_flight: AtomicU64,
}

impl AdmissionReadings {
    /// The limit changed.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(u64::from(limit), Ordering::Relaxed);
    }

    /// A call was admitted: the calls in flight now, this one included.
    pub fn enter(&self) -> u64 {
        self.in_flight.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// An admitted call was answered (or dropped).
    pub fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// The current limit (0 before a server set one, or when the limit is off).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Decisions in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}
