//! The configured kind of a server's transport (`MEMCACHE_CLIENT`,
//! `MEMCACHE_CLASSIC_PROTOCOL`): [`ServerTransport`], an enum over the two clients. The trait
//! is dispatched statically through it, since a `dyn Transport` would box every call's future,
//! per server per call. It sits above the clients (it names them) and the trait below them
//! (`transport`), so no two files of the store import each other.
//!
//! Must not touch: what the commands are, the ring, a server's health.

use super::pipelined::Pipelined;
use super::pooled::Pooled;
use super::transport::{
    Answer, Connections, Sent, StateWrite, StoredState, Transport, TransportError,
};

/// The transport of one server, of the configured kind (`MEMCACHE_CLIENT`,
/// `MEMCACHE_CLASSIC_PROTOCOL`).
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
    async fn read_state(&self, key: &str, sent: &Sent) -> Answer<Option<StoredState>> {
        match self {
            ServerTransport::Pipelined(t) => t.read_state(key, sent).await,
            ServerTransport::Pooled(t) => t.read_state(key, sent).await,
        }
    }

    async fn write_state(&self, write: StateWrite<'_>, sent: &Sent) -> Answer<bool> {
        match self {
            ServerTransport::Pipelined(t) => t.write_state(write, sent).await,
            ServerTransport::Pooled(t) => t.write_state(write, sent).await,
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
