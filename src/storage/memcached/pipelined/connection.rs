//! One pipelined memcached meta-protocol connection of our own ([`Pipeline`]), shared by any
//! number of callers (the [`Pipelined`](super::Pipelined) transport holds a few per server). A
//! writer task takes every queued command and writes them in one go; a reader task parses the
//! answers in order (memcached answers in order, and error lines carry no opaque, so order is
//! the only reliable match) and hands them over: a call's part of counter commands (a
//! [`Ticket`]) gets its counts written into the call's slots, other commands' callers get their
//! replies through a oneshot. One write per batch of callers, instead of one round trip per
//! connection checkout: measured against the bb8 + async-memcached pool in BENCHMARKS.md. Only
//! meta commands are sent.
//!
//! Both queues are bounded: a caller waits for room in the command queue (backpressure instead
//! of unbounded memory when memcached or the writer falls behind), and the writer waits for room
//! in the queue of answers being awaited.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::gather::{Ticket, Written, closed};
use super::reply::{Reply, read_reply};
use crate::storage::memcached::transport::{Sent, TransportError};
use crate::storage::pipelined::{Awaited, spawn_reader};

/// Callers' batches that may wait for the writer on one connection.
const COMMAND_QUEUE: usize = 4_096;
/// Written batches whose answers the reader has not read yet, on one connection.
const PENDING_QUEUE: usize = 16_384;

/// What a caller queues on a connection.
enum Outgoing {
    /// Command lines of its own, answered as replies (token-bucket states, probes).
    Lines(Command),
    /// A call's part of counter commands, answered in place.
    Part(Ticket),
}

/// Written commands whose answers are awaited, in order.
enum Pending {
    /// A caller waiting for `count` replies.
    Replies(usize, oneshot::Sender<Vec<Reply>>),
    /// A call's part waiting for its counts.
    Part(Ticket),
}

/// When a batch's commands were written, recorded once they are.
enum Mark {
    Sent(Sent),
    Part(Written),
}

/// One caller's command lines, answered together.
struct Command {
    lines: Vec<u8>,
    count: usize,
    reply: oneshot::Sender<Vec<Reply>>,
    /// Set once the lines are written to the socket.
    sent: Option<Sent>,
}

/// A shared, pipelined connection. Dropping the last handle closes it.
#[derive(Debug, Clone)]
pub(super) struct Pipeline {
    commands: mpsc::Sender<Outgoing>,
    /// Cleared when the reader stops (the server closed the connection or sent garbage), so the
    /// next caller reconnects instead of queueing on a dead connection.
    alive: Arc<AtomicBool>,
}

impl Pipeline {
    /// Connects to `addr` (over TLS when `tls` is given) and starts the writer and reader
    /// tasks.
    pub(super) async fn connect(
        addr: std::net::SocketAddr,
        tls: Option<&crate::storage::tls::ServerTls>,
    ) -> io::Result<Pipeline> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(match tls {
            None => {
                let (read, write) = stream.into_split();
                Self::start(addr, read, write)
            }
            Some(tls) => {
                let (read, write) = tokio::io::split(tls.handshake(stream).await?);
                Self::start(addr, read, write)
            }
        })
    }

    /// Starts the writer and reader tasks on a connected stream's halves.
    fn start<R, W>(addr: std::net::SocketAddr, read: R, write: W) -> Pipeline
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (commands, queue) = mpsc::channel::<Outgoing>(COMMAND_QUEUE);
        let (pending_tx, pending_rx) = mpsc::channel::<Pending>(PENDING_QUEUE);
        tokio::spawn(writer(write, queue, pending_tx, addr));
        let read = BufReader::with_capacity(64 * 1024, read);
        let alive = spawn_reader(read, pending_rx, "memcached", addr.to_string()).alive;
        Pipeline { commands, alive }
    }

    /// Whether the connection has stopped (an I/O error or the server closed it).
    pub(super) fn is_closed(&self) -> bool {
        self.commands.is_closed() || !self.alive.load(Ordering::Acquire)
    }

    /// Queues `count` command lines (written together) and waits for their answers, in order.
    /// A full queue is Turnstile's overload, reported at once rather than waited out.
    pub(super) async fn call(
        &self,
        lines: Vec<u8>,
        count: usize,
        sent: Option<Sent>,
    ) -> Result<Vec<Reply>, TransportError> {
        let (reply, answer) = oneshot::channel();
        let command = Command {
            lines,
            count,
            reply,
            sent,
        };
        self.commands
            .try_send(Outgoing::Lines(command))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => overloaded(),
                mpsc::error::TrySendError::Closed(_) => closed(),
            })?;
        answer.await.map_err(|_| closed())
    }

    /// Queues a call's part of counter commands; its outcome comes through the ticket. A full
    /// queue is Turnstile's overload; a closed connection drops the ticket, which reports it.
    pub(super) fn send(&self, ticket: Ticket) {
        if let Err(mpsc::error::TrySendError::Full(Outgoing::Part(ticket))) =
            self.commands.try_send(Outgoing::Part(ticket))
        {
            ticket.fail(overloaded());
        }
    }
}

/// A connection's command queue is full.
fn overloaded() -> TransportError {
    TransportError::Overloaded(format!(
        "{COMMAND_QUEUE} batches already wait for one memcached connection"
    ))
}

async fn writer<W: AsyncWrite + Unpin>(
    mut write: W,
    mut queue: mpsc::Receiver<Outgoing>,
    pending: mpsc::Sender<Pending>,
    addr: std::net::SocketAddr,
) {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut written: Vec<Mark> = Vec::new();
    while let Some(first) = queue.recv().await {
        // Written at once, with whatever else queued while this task waited its turn (the
        // runtime has no LIFO slot: a woken writer runs after the tasks already ready, so
        // under load one write still carries many calls). Not yielding first for bigger
        // writes: that holds every server's part back, and a call waits for the slowest of
        // its servers (BENCHMARKS.md, "memcached").
        buf.clear();
        let mut next = Some(first);
        // Everything already queued goes out in the same write.
        while let Some(outgoing) = next {
            // A caller that gave up before its commands left (its deadline passed in the
            // queue) was told they were not sent: keep that true, and do not count them.
            let awaited = match outgoing {
                Outgoing::Lines(command) if !command.reply.is_closed() => {
                    buf.extend_from_slice(&command.lines);
                    written.extend(command.sent.map(Mark::Sent));
                    Some(Pending::Replies(command.count, command.reply))
                }
                Outgoing::Part(ticket) if !ticket.abandoned() => {
                    buf.extend_from_slice(ticket.lines());
                    written.push(Mark::Part(ticket.written()));
                    Some(Pending::Part(ticket))
                }
                _ => None,
            };
            if let Some(awaited) = awaited
                && pending.send(awaited).await.is_err()
            {
                return;
            }
            next = if buf.len() < 256 * 1024 {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        if buf.is_empty() {
            continue;
        }
        let wrote = write.write_all(&buf).await;
        // Marked whether or not the write succeeded: one that fails part way may have
        // delivered some of it, so its callers must not take their commands for unsent.
        let at = tokio::time::Instant::now();
        for mark in written.drain(..) {
            match mark {
                Mark::Sent(sent) => sent.mark(at),
                Mark::Part(part) => part.mark(at),
            }
        }
        if let Err(e) = wrote {
            // Said here: the reader then stops without a reason of its own (no entry left).
            tracing::warn!(server = %addr, error = %e, "a memcached connection's write failed");
            return;
        }
    }
}

impl Awaited for Pending {
    type Scratch = Buffers;

    async fn answer<R: AsyncBufRead + Unpin + Send>(
        self,
        read: &mut R,
        buffers: &mut Buffers,
    ) -> io::Result<()> {
        match self {
            // A caller that gave up (deadline) no longer listens; the order is kept.
            Pending::Replies(count, caller) => buffers
                .replies(read, count)
                .await
                .map(|replies| drop(caller.send(replies))),
            Pending::Part(ticket) => match buffers.counts(read, ticket.count()).await {
                Ok((counts, failure)) => {
                    ticket.answer(counts, failure);
                    Ok(())
                }
                Err(e) => {
                    ticket.fail(TransportError::Io(copy(&e)));
                    Err(e)
                }
            },
        }
    }

    /// A call's part fails with the reason; a caller of its own lines sees its reply channel
    /// closed.
    fn fail(self, why: &io::Error) {
        if let Pending::Part(ticket) = self {
            ticket.fail(TransportError::Io(copy(why)));
        }
    }
}

/// The end of the stream where answers were awaited.
fn ended(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what)
}

/// `error` again, for another caller (an I/O error is not `Clone`).
fn copy(error: &io::Error) -> io::Error {
    io::Error::new(error.kind(), error.to_string())
}

/// The reader's buffers, reused from one answer to the next.
#[derive(Default)]
struct Buffers {
    line: String,
    data: Vec<u8>,
    counts: Vec<u64>,
}

impl Buffers {
    /// The next `count` replies; an error when the stream ends or breaks first.
    async fn replies<R: AsyncBufRead + Unpin>(
        &mut self,
        read: &mut R,
        count: usize,
    ) -> io::Result<Vec<Reply>> {
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            replies.push(next_reply(read, &mut self.line, &mut self.data).await?);
        }
        Ok(replies)
    }

    /// The next `count` counts, and the first answer that was not a count; an error when the
    /// stream ends or breaks first.
    async fn counts<R: AsyncBufRead + Unpin>(
        &mut self,
        read: &mut R,
        count: usize,
    ) -> io::Result<(&[u64], Option<TransportError>)> {
        self.counts.clear();
        let mut failure = None;
        for _ in 0..count {
            let reply = next_reply(read, &mut self.line, &mut self.data).await?;
            let count = reply.into_count().unwrap_or_else(|e| {
                failure.get_or_insert(e);
                0
            });
            self.counts.push(count);
        }
        Ok((&self.counts, failure))
    }
}

/// The next reply; the end of the stream is an error here, since a reply is awaited.
async fn next_reply<R: AsyncBufRead + Unpin>(
    read: &mut R,
    line: &mut String,
    data: &mut Vec<u8>,
) -> io::Result<Reply> {
    read_reply(read, line, data)
        .await?
        .ok_or_else(|| ended("memcached closed the connection with answers awaited"))
}
