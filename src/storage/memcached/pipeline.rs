//! A pipelined memcached meta-protocol connection of our own, shared by any number of callers
//! (the [`Pipelined`](super::pipelined::Pipelined) transport holds a few per server). A writer task takes every queued command and writes them in one go; a reader
//! task parses the answers in order (memcached answers in order, and error lines carry no
//! opaque, so order is the only reliable match) and completes each caller's oneshot. This
//! replaces one round trip per connection checkout with one write per batch, and measured well
//! ahead of the bb8 + async-memcached pool (see BENCHMARKS.md). Only meta commands are sent.
//!
//! Both queues are bounded: a caller waits for room in the command queue (backpressure instead
//! of unbounded memory when memcached or the writer falls behind), and the writer waits for room
//! in the queue of answers being awaited.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::transport::{Sent, TransportError};

/// Callers' batches that may wait for the writer on one connection.
const COMMAND_QUEUE: usize = 4_096;
/// Written batches whose answers the reader has not read yet, on one connection.
const PENDING_QUEUE: usize = 16_384;

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// `VA` with the counter's value.
    Value(u64),
    /// `NF`: no such counter.
    NotFound,
    /// `MN`.
    Noop,
    /// `VA` with a bucket state and its CAS token (`mg ... v c`).
    State {
        /// The stored TAT.
        value: u128,
        /// The item's CAS token.
        cas: u64,
    },
    /// `EN`: no such item (`mg`).
    Miss,
    /// `HD`: stored (`ms`).
    Stored,
    /// `NS` or `EX` or `NF` to `ms`: someone else created or changed the item first.
    NotStored,
    /// An error line or anything unexpected.
    Error(String),
}

/// A caller waiting for `count` answers.
type Pending = (usize, oneshot::Sender<Vec<Reply>>);

/// One caller's command lines (a request's commands for this server), answered together.
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
    commands: mpsc::Sender<Command>,
    /// Cleared when the reader stops (the server closed the connection or sent garbage), so the
    /// next caller reconnects instead of queueing on a dead connection.
    alive: Arc<AtomicBool>,
}

impl Pipeline {
    /// Connects to `addr` and starts the writer and reader tasks.
    pub(super) async fn connect(addr: std::net::SocketAddr) -> io::Result<Pipeline> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        let (commands, queue) = mpsc::channel::<Command>(COMMAND_QUEUE);
        let (pending_tx, pending_rx) = mpsc::channel::<Pending>(PENDING_QUEUE);
        tokio::spawn(writer(write, queue, pending_tx));
        let alive = Arc::new(AtomicBool::new(true));
        let reading = Alive(Arc::clone(&alive));
        tokio::spawn(async move {
            let _reading = reading;
            reader(BufReader::with_capacity(64 * 1024, read), pending_rx).await;
        });
        Ok(Pipeline { commands, alive })
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
        let closed = || {
            TransportError::Io(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "connection closed",
            ))
        };
        let (reply, answer) = oneshot::channel();
        let command = Command {
            lines,
            count,
            reply,
            sent,
        };
        self.commands.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => TransportError::Overloaded(format!(
                "{COMMAND_QUEUE} batches already wait for one memcached connection"
            )),
            mpsc::error::TrySendError::Closed(_) => closed(),
        })?;
        answer.await.map_err(|_| closed())
    }
}

async fn writer(
    mut write: tokio::net::tcp::OwnedWriteHalf,
    mut queue: mpsc::Receiver<Command>,
    pending: mpsc::Sender<Pending>,
) {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut written: Vec<Sent> = Vec::new();
    while let Some(first) = queue.recv().await {
        // Let the other ready tasks (requests of this and other connections) queue their
        // commands first, so one write carries many: fewer syscalls under load, two
        // scheduler passes of delay when idle. Two passes, because the first runs the HTTP/2
        // connections that spawn the calls the second pass runs: at saturation (perf stat,
        // 1 descriptor) one `sendto` per 45 calls instead of per 28, and a `sendto` on
        // loopback costs ~9 us of the server's core (it delivers to memcached and wakes it).
        for _ in 0..2 {
            tokio::task::yield_now().await;
        }
        buf.clear();
        let mut next = Some(first);
        // Everything already queued goes out in the same write.
        while let Some(command) = next {
            // A caller that gave up before its commands left (its deadline passed in the
            // queue) was told they were not sent: keep that true, and do not count them.
            if !command.reply.is_closed() {
                buf.extend_from_slice(&command.lines);
                written.extend(command.sent);
                if pending.send((command.count, command.reply)).await.is_err() {
                    return;
                }
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
        if write.write_all(&buf).await.is_err() {
            return;
        }
        for sent in written.drain(..) {
            sent.store(true, Ordering::Release);
        }
    }
}

/// Marks the connection dead when the reader stops, however it stops.
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn reader(
    mut read: BufReader<tokio::net::tcp::OwnedReadHalf>,
    mut pending: mpsc::Receiver<Pending>,
) {
    let mut line = String::new();
    let mut data = Vec::new();
    loop {
        // Wait for the next caller, but notice a closed connection while idle, so the next
        // caller reconnects instead of failing. Answers only ever follow their caller's entry
        // (the writer queues it before writing), so pending entries come first.
        let (count, caller) = tokio::select! {
            biased;
            next = pending.recv() => match next {
                Some(next) => next,
                None => return,
            },
            // End of stream, an error, or bytes nobody asked for: the connection is done.
            _ = read.fill_buf() => return,
        };
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            match read_reply(&mut read, &mut line, &mut data).await {
                Ok(Some(reply)) => replies.push(reply),
                Ok(None) | Err(_) => return,
            }
        }
        // A caller that gave up (deadline) no longer listens; the order is kept all the same.
        let _ = caller.send(replies);
    }
}

/// The longest value a reply carries: a u128 bucket state in decimal is at most 39 digits.
const MAX_VALUE_LEN: usize = 48;

/// Reads one reply (`None` at the end of the stream); `line` and `data` are reused buffers.
pub(super) async fn read_reply<R: AsyncBufRead + Unpin>(
    read: &mut R,
    line: &mut String,
    data: &mut Vec<u8>,
) -> io::Result<Option<Reply>> {
    line.clear();
    if read.read_line(line).await? == 0 {
        return Ok(None);
    }
    parse(line, read, data).await.map(Some)
}

async fn parse<R: AsyncBufRead + Unpin>(
    line: &str,
    read: &mut R,
    data: &mut Vec<u8>,
) -> io::Result<Reply> {
    let line = line.trim_end();
    let mut words = line.split(' ');
    Ok(match words.next() {
        Some("VA") => {
            // A length beyond any counter is a broken stream, never an allocation to make.
            let len: usize = words
                .next()
                .and_then(|l| l.parse().ok())
                .filter(|len| *len <= MAX_VALUE_LEN)
                .ok_or_else(|| bad(line))?;
            let cas = words.find_map(|w| w.strip_prefix('c').and_then(|c| c.parse().ok()));
            data.clear();
            data.resize(len + 2, 0);
            read.read_exact(data).await?;
            let text = String::from_utf8_lossy(&data[..len]);
            let text = text.trim();
            match (cas, text.parse::<u128>()) {
                (Some(cas), Ok(value)) => Reply::State { value, cas },
                (None, Ok(n)) => u64::try_from(n).map_or_else(
                    |_| Reply::Error(format!("not a counter: {text:?}")),
                    Reply::Value,
                ),
                (_, Err(_)) => Reply::Error(format!("not a counter: {text:?}")),
            }
        }
        Some("NF") => Reply::NotFound,
        Some("MN") => Reply::Noop,
        Some("EN") => Reply::Miss,
        Some("HD") => Reply::Stored,
        Some("NS" | "EX") => Reply::NotStored,
        _ => Reply::Error(line.to_owned()),
    })
}

/// Parses `input` as a stream of replies, as the reader does, and returns how many it read
/// before the end or an error. For the fuzz target only (`cargo fuzz` sets `cfg(fuzzing)`).
#[cfg(fuzzing)]
pub fn fuzz_replies(input: &[u8]) -> usize {
    use std::future::Future;
    let mut read = input;
    let (mut line, mut data) = (String::new(), Vec::new());
    let mut parsed = 0;
    loop {
        let mut next = std::pin::pin!(read_reply(&mut read, &mut line, &mut data));
        // An in-memory reader never waits: one poll finishes the future.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match next.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(Ok(Some(_))) => parsed += 1,
            _ => return parsed,
        }
    }
}

fn bad(line: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad memcached answer: {line:?}"),
    )
}

#[cfg(test)]
mod tests;
