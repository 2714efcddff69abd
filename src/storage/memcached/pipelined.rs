//! The pipelined transport to one server: a few shared [`Pipeline`] connections, used round
//! robin, connected on first use and again after they break.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwapOption;

use super::meta::{
    push_add, push_lease, push_read_state, push_release, push_sub, push_write_state,
};
use super::pipeline::Pipeline;
use super::reply::Reply;
use super::transport::{Command as CounterCommand, Connections, Sent, Transport, TransportError};
use crate::storage::Change;

/// Pipelined connections per server: two keep a write in flight while the other fills.
const CONNECTIONS_PER_SERVER: usize = 2;

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
    slots: Vec<Slot>,
    next: AtomicUsize,
}

impl Pipelined {
    /// A transport to `server` (`host:port`); connections are made lazily.
    pub(super) fn new(server: String) -> Self {
        Self {
            server,
            slots: (0..CONNECTIONS_PER_SERVER)
                .map(|_| Slot::default())
                .collect(),
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
        let pipe = Arc::new(Pipeline::connect(addr).await?);
        slot.current.store(Some(Arc::clone(&pipe)));
        Ok(pipe)
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

/// An answer that does not belong to the command sent.
fn unexpected(reply: &Reply, command: &str) -> TransportError {
    match reply {
        Reply::Error(e) => TransportError::Protocol(e.clone()),
        other => TransportError::Protocol(format!("unexpected {other:?} to {command}")),
    }
}

impl Transport for Pipelined {
    async fn apply<'k, I>(&self, commands: I, sent: &Sent) -> Result<Vec<u64>, TransportError>
    where
        I: IntoIterator<Item = CounterCommand<'k>> + Send,
        I::IntoIter: Send,
    {
        // All of a request's commands for this server in one write.
        let commands = commands.into_iter();
        let mut lines = Vec::with_capacity(commands.size_hint().0.max(1) * 64);
        let mut count = 0;
        for c in commands {
            match c.change {
                Change::Add(n) => push_add(&mut lines, c.key, n, c.exptime),
                Change::Sub(n) => push_sub(&mut lines, c.key, n),
                Change::Lease(n) => push_lease(&mut lines, c.key, n, c.exptime),
                Change::Release(n) => push_release(&mut lines, c.key, n, c.exptime),
            }
            count += 1;
        }
        self.call(lines, count, Some(sent.clone()))
            .await?
            .into_iter()
            .map(|reply| match reply {
                Reply::Value(n) => Ok(n),
                Reply::NotFound => Ok(0),
                Reply::Error(e) => Err(TransportError::Protocol(e)),
                other => Err(unexpected(&other, "ma")),
            })
            .collect()
    }

    async fn read_state<'a>(
        &'a self,
        key: &'a str,
        sent: &'a Sent,
    ) -> Result<Option<(u128, u64)>, TransportError> {
        let mut line = Vec::with_capacity(64);
        push_read_state(&mut line, key);
        match self.one(line, sent).await? {
            Reply::State { value, cas } => Ok(Some((value, cas))),
            Reply::Miss => Ok(None),
            other => Err(unexpected(&other, "mg")),
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
        let mut line = Vec::with_capacity(96);
        push_write_state(&mut line, key, value, cas, exptime);
        match self.one(line, sent).await? {
            Reply::Stored => Ok(true),
            Reply::NotStored | Reply::NotFound => Ok(false),
            other => Err(unexpected(&other, "ms")),
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
