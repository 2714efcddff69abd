//! The pipelined transport to one server: a few shared [`Pipeline`] connections, used round
//! robin, connected on first use and again after they break.
//!
//! How many (`MEMCACHE_PIPELINED_CONNECTIONS`) is the app's choice; by default one per runtime
//! worker thread, at most four. memcached serves a connection on one of its worker threads, so
//! a replica's load reaches as many of them as the replica has cores to send from; on one core
//! a second connection only splits every write in two (one `sendto` a batch, and one wake of
//! memcached, is most of what a batch costs): measured in BENCHMARKS.md.
//!
//! Inside: `connection` (one shared connection, its writer and reader), `meta` (the command
//! lines), `reply` (the answers' parser), `gather` (one call's parts across servers, answered in
//! place), `call` (a counter batch as one gathered call). TLS is `storage::tls::ServerTls`.

pub(super) mod call;
mod connection;
mod gather;
mod meta;
mod reply;

#[cfg(fuzzing)]
pub use reply::fuzz_replies;

use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwapOption;

use crate::storage::tls::ServerTls;

use crate::storage::memcached::transport::{
    Answer, Connections, Sent, StateWrite, StoredState, Transport, TransportError,
};
use connection::Pipeline;
use gather::Ticket;
use meta::{push_read_state, push_write_state};
use reply::Reply;

/// One pipelined connection slot, connected on first use and again after it breaks.
#[derive(Debug, Default)]
struct Slot {
    current: ArcSwapOption<Pipeline>,
    connecting: tokio::sync::Mutex<()>,
}

/// The pipelined transport to one server: a few shared connections, used round robin.
#[derive(Debug)]
pub(super) struct Pipelined {
    server: String,
    /// `MEMCACHE_TLS`: the client configuration every connection's handshake uses.
    tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    slots: Vec<Slot>,
    next: AtomicUsize,
}

impl Pipelined {
    /// A transport to `server` (`host:port`) over `connections` connections, made lazily, over
    /// TLS with `tls`.
    pub(super) fn new(
        server: String,
        connections: NonZeroUsize,
        tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    ) -> Self {
        Self {
            server,
            tls,
            slots: (0..connections.get()).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// A live connection (round robin), connecting when needed.
    async fn connection(&self) -> io::Result<Arc<Pipeline>> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        if let Some(pipe) = slot.current.load_full().filter(|p| !p.is_closed()) {
            return Ok(pipe);
        }
        // Boxed: connecting (DNS, TCP) is rare and its future large; inline, it would grow
        // every call's future, which is moved on every call (tests/future_size.rs).
        Box::pin(self.connect(slot)).await
    }

    /// Connects `slot`, unless a caller that held the lock before did.
    async fn connect(&self, slot: &Slot) -> io::Result<Arc<Pipeline>> {
        let _connecting = slot.connecting.lock().await;
        if let Some(pipe) = slot.current.load_full().filter(|p| !p.is_closed()) {
            return Ok(pipe);
        }
        let addr = super::discovery::resolve(&self.server).await?;
        let tls = match &self.tls {
            Some(config) => Some(ServerTls::new(config, "memcached", &self.server)?),
            None => None,
        };
        let pipe = Arc::new(Pipeline::connect(addr, tls.as_ref()).await?);
        slot.current.store(Some(Arc::clone(&pipe)));
        Ok(pipe)
    }

    /// Queues a call's part of counter commands for this server; its outcome comes through
    /// the ticket, whether the part is answered or cannot be sent.
    async fn send(&self, ticket: Ticket) {
        match self.connection().await {
            Ok(pipe) => pipe.send(ticket),
            Err(e) => ticket.fail(TransportError::Connect(e)),
        }
    }

    async fn call(
        &self,
        lines: Vec<u8>,
        count: usize,
        sent: Option<Sent>,
    ) -> Result<Vec<Reply>, TransportError> {
        let pipe = self.connection().await.map_err(TransportError::Connect)?;
        pipe.call(lines, count, sent).await
    }

    /// One command line and its one answer.
    async fn one(&self, line: Vec<u8>, sent: &Sent) -> Result<Reply, TransportError> {
        let mut replies = self.call(line, 1, Some(sent.clone())).await?;
        replies
            .pop()
            .ok_or_else(|| TransportError::Protocol("no answer".into()))
    }
}

impl Transport for Pipelined {
    async fn read_state(&self, key: &str, sent: &Sent) -> Answer<Option<StoredState>> {
        let mut line = Vec::with_capacity(64);
        push_read_state(&mut line, key);
        match self.one(line, sent).await? {
            Reply::State { value, cas } => Ok(Some(StoredState { value, cas })),
            Reply::Miss => Ok(None),
            other => Err(other.unexpected("mg")),
        }
    }

    async fn write_state(&self, write: StateWrite<'_>, sent: &Sent) -> Answer<bool> {
        let mut line = Vec::with_capacity(96);
        push_write_state(&mut line, write);
        match self.one(line, sent).await? {
            Reply::Stored => Ok(true),
            Reply::NotStored | Reply::NotFound => Ok(false),
            other => Err(other.unexpected("ms")),
        }
    }

    async fn probe(&self) -> Result<(), TransportError> {
        match self.call(b"mn\r\n".to_vec(), 1, None).await?.as_slice() {
            [Reply::Noop] => Ok(()),
            other => Err(TransportError::Protocol(format!("{other:?} to mn"))),
        }
    }

    fn reset(&self) {
        for slot in &self.slots {
            slot.current.store(None);
        }
    }

    fn connections(&self) -> Connections {
        let open = self
            .slots
            .iter()
            .filter(|s| s.current.load().as_ref().is_some_and(|p| !p.is_closed()))
            .count();
        Connections {
            open: u64::try_from(open).unwrap_or(u64::MAX),
            idle: 0,
        }
    }
}
