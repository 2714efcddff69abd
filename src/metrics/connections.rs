//! The count of open gRPC connections: kept by the server's accept loop, rendered by `metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Connections open on the gRPC listener: kept by the server's accept loop, rendered here.
#[derive(Debug, Default)]
pub struct OpenConnections(AtomicU64);

impl OpenConnections {
    /// A connection was accepted.
    pub fn opened(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection closed.
    pub fn closed(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Connections open now.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
