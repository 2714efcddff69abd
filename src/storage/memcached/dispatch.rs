//! The configured transport of one memcached server (`MEMCACHE_TRANSPORT`): [`ServerTransport`],
//! an enum over the kinds, so the [`Transport`] trait is dispatched statically and a call's
//! future is not boxed per server per call (a `dyn Transport` would box it).
//!
//! Must not touch: what a transport sends (its own module's), health, the ring.

use std::future::Future;

use futures_util::future::Either;

use super::pipelined::Pipelined;
use super::pooled::Pooled;
use super::transport::{Command, Connections, Sent, Transport, TransportError};

/// The transport of one server, of the configured kind (`MEMCACHE_TRANSPORT`).
#[derive(Debug)]
pub(super) enum ServerTransport {
    /// Shared pipelined connections (the default).
    Pipelined(Pipelined),
    /// A bb8 pool, meta or classic commands.
    Pooled(Pooled),
}

impl Transport for ServerTransport {
    // Not an `async fn`: the pipelined future is returned as it is (an `async fn` would keep
    // the commands a second time beside it), the pool's boxed.
    fn apply<'k, I>(
        &self,
        commands: I,
        sent: &Sent,
    ) -> impl Future<Output = Result<Vec<u64>, TransportError>> + Send
    where
        I: IntoIterator<Item = Command<'k>> + Send,
        I::IntoIter: Send,
    {
        match self {
            ServerTransport::Pipelined(t) => Either::Left(t.apply(commands, sent)),
            // Boxed: the pool's future (a join over connection checkouts) is several times the
            // pipelined one, and an enum's future is as large as its largest arm, paid in
            // `memmove` on every call (tests/future_size.rs).
            ServerTransport::Pooled(t) => Either::Right(Box::pin(t.apply(commands, sent))),
        }
    }

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
