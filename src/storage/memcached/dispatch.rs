//! The configured transport of one memcached server (`MEMCACHE_CLIENT`, `MEMCACHE_CLASSIC_PROTOCOL`): [`ServerTransport`],
//! an enum over the kinds, so the [`Transport`] trait is dispatched statically and a call's
//! future is not boxed per server per call (a `dyn Transport` would box it); counter batches
//! reach each kind by its own way (`pipelined`, `pooled`).
//!
//! Must not touch: what a transport sends (its own module's), health, the ring.

use super::pipelined::Pipelined;
use super::pooled::Pooled;
use super::transport::{Connections, Sent, Transport, TransportError};

/// The transport of one server, of the configured kind (`MEMCACHE_CLIENT`, `MEMCACHE_CLASSIC_PROTOCOL`).
#[derive(Debug)]
pub(super) enum ServerTransport {
    /// Shared pipelined connections (the default).
    Pipelined(Pipelined),
    /// A bb8 pool, meta or classic commands.
    Pooled(Pooled),
}

impl ServerTransport {
    /// The pipelined transport, when it is that kind.
    pub(super) fn pipelined(&self) -> Option<&Pipelined> {
        match self {
            ServerTransport::Pipelined(t) => Some(t),
            ServerTransport::Pooled(_) => None,
        }
    }

    /// The pooled transport, when it is that kind.
    pub(super) fn pooled(&self) -> Option<&Pooled> {
        match self {
            ServerTransport::Pooled(t) => Some(t),
            ServerTransport::Pipelined(_) => None,
        }
    }
}

impl Transport for ServerTransport {
    async fn read_state<'a>(
        &'a self,
        key: &'a str,
        sent: &'a Sent,
    ) -> Result<Option<(u128, u64)>, TransportError> {
        match self {
            ServerTransport::Pipelined(t) => t.read_state(key, sent).await,
            ServerTransport::Pooled(t) => t.read_state(key, sent).await,
        }
    }

    async fn write_state<'a>(
        &'a self,
        key: &'a str,
        value: u128,
        cas: Option<u64>,
        exptime: u64,
        sent: &'a Sent,
    ) -> Result<bool, TransportError> {
        match self {
            ServerTransport::Pipelined(t) => t.write_state(key, value, cas, exptime, sent).await,
            ServerTransport::Pooled(t) => t.write_state(key, value, cas, exptime, sent).await,
        }
    }

    async fn probe(&self) -> Result<(), TransportError> {
        match self {
            ServerTransport::Pipelined(t) => t.probe().await,
            ServerTransport::Pooled(t) => t.probe().await,
        }
    }

    fn reset(&self) {
        match self {
            ServerTransport::Pipelined(t) => t.reset(),
            ServerTransport::Pooled(t) => t.reset(),
        }
    }

    fn connections(&self) -> Connections {
        match self {
            ServerTransport::Pipelined(t) => t.connections(),
            ServerTransport::Pooled(t) => t.connections(),
        }
    }
}
