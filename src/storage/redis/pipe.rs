//! A pipelined connection of our own to one Redis server or cluster node (TCP, over TLS with
//! `REDIS_TLS`, or a unix socket), shared by every caller, for the hot path: a request's
//! fixed-window commands (`counters`, `cluster`); a cluster's are held per node ([`NodePipes`]).
//! A writer task takes every queued request and writes them in one go, and hands the reader
//! one entry for the write; the reader reads the replies in order (Redis answers in order) and
//! hands each request its own. Behind Sentinel it goes to the master the sentinels name when it
//! connects (`connect`). Scripts, probes and a cluster's slot map stay on redis-rs.
//!
//! Why our own: on redis-rs's multiplexed connection, a request's commands, their encoding,
//! its `Value` replies and its driver task cost about a third of Turnstile's CPU at five
//! descriptors (perf, BENCHMARKS.md "Redis"); here a request is one buffer and one channel,
//! and its replies are read straight into counts, as the memcached path does.
//!
//! Both queues are bounded: a full request queue is Turnstile's overload, reported at once.
//!
//! Must not touch: what the commands are (`counters`), breakers, what an error means to a
//! caller.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use super::resp::{Reply, command, read_reply};
use super::{RedisAuth, RedisOptions, RedisTarget, RedisTlsOptions};
use crate::storage::pipelined::{Awaited, spawn_reader};
use crate::storage::remote::lock;
use crate::storage::tls::ServerTls;

/// Requests that may wait for the writer.
const REQUEST_QUEUE: usize = 4_096;
/// Writes whose replies the reader has not read yet.
const PENDING_QUEUE: usize = 16_384;

/// Why a request got no replies.
#[derive(Debug)]
pub(super) enum PipeError {
    /// The request queue is full: Turnstile's overload.
    Overloaded,
    /// The connection ended (why).
    Closed(String),
}

/// One request: its commands and how many replies they get.
struct Request {
    bytes: Vec<u8>,
    replies: usize,
    answer: oneshot::Sender<Result<Vec<Reply>, PipeError>>,
}

/// A request written, awaiting its replies.
struct Pending {
    replies: usize,
    answer: oneshot::Sender<Result<Vec<Reply>, PipeError>>,
}

/// A shared, pipelined connection. Dropping the last handle closes it.
#[derive(Debug)]
pub(super) struct Pipe {
    requests: mpsc::Sender<Request>,
    /// Cleared when the reader stops, so the next caller reconnects.
    alive: Arc<AtomicBool>,
    /// Requests whose replies were read: a call that times out with this unchanged since it
    /// was queued found the connection hung (open, and answering nothing).
    answered: Arc<AtomicU64>,
    /// Stops the reader when the pipe is given up, so a hung connection is closed (its read
    /// half goes with the reader; the writer ends with the queue).
    reader: tokio::task::AbortHandle,
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Pipe {
    /// Connects to a single server (`target` must be `Tcp`, or `Unix` without TLS), over TLS
    /// when `tls` is given, authenticates with `auth`, and starts the writer and reader.
    pub(super) async fn connect(
        target: &RedisTarget,
        auth: Option<&RedisAuth>,
        tls: Option<&RedisTlsOptions>,
    ) -> io::Result<Pipe> {
        match target {
            RedisTarget::Tcp(address) => {
                let stream = tokio::net::TcpStream::connect(address.as_str()).await?;
                stream.set_nodelay(true)?;
                match tls {
                    None => {
                        let (read, write) = stream.into_split();
                        Self::start(read, write, auth, address.clone()).await
                    }
                    Some(tls) => {
                        let tls = ServerTls::new(&tls.config, "redis", address)?;
                        let (read, write) = tokio::io::split(tls.handshake(stream).await?);
                        Self::start(read, write, auth, address.clone()).await
                    }
                }
            }
            RedisTarget::Unix(path) if tls.is_none() => {
                let (read, write) = tokio::net::UnixStream::connect(path).await?.into_split();
                Self::start(read, write, auth, path.clone()).await
            }
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a pipe goes to one server, over TLS only by TCP",
            )),
        }
    }

    async fn start<R, W>(
        read: R,
        mut write: W,
        auth: Option<&RedisAuth>,
        peer: String,
    ) -> io::Result<Pipe>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut read = BufReader::with_capacity(64 * 1024, read);
        if let Some(auth) = auth {
            let mut out = Vec::new();
            match &auth.user {
                Some(user) => command(
                    &mut out,
                    &[b"AUTH", user.as_bytes(), auth.password.as_bytes()],
                ),
                None => command(&mut out, &[b"AUTH", auth.password.as_bytes()]),
            }
            write.write_all(&out).await?;
            if let Reply::Error(said) = read_reply(&mut read, &mut Vec::new()).await? {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, said));
            }
        }
        let (requests, queue) = mpsc::channel::<Request>(REQUEST_QUEUE);
        let (pending_tx, pending_rx) = mpsc::channel::<Written>(PENDING_QUEUE);
        let answered = Arc::new(AtomicU64::new(0));
        tokio::spawn(writer(write, queue, pending_tx, Arc::clone(&answered)));
        let reader = spawn_reader(read, pending_rx, "Redis", peer);
        Ok(Pipe {
            requests,
            alive: reader.alive,
            answered,
            reader: reader.abort,
        })
    }

    /// How many requests have had their replies read so far.
    pub(super) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Acquire)
    }

    /// Whether the connection has stopped.
    pub(super) fn is_closed(&self) -> bool {
        self.requests.is_closed() || !self.alive.load(Ordering::Acquire)
    }

    /// Queues `bytes` (commands) for the writer: what it gives is the request's `replies`
    /// once read (errors Redis answered among them: what each command got). Not async, so a
    /// caller's future holds only the answer's receiver while it waits.
    pub(super) fn queue(&self, bytes: Vec<u8>, replies: usize) -> Result<Answered, PipeError> {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            bytes,
            replies,
            answer,
        };
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => PipeError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => closed(),
        })?;
        Ok(answered)
    }
}

/// A queued request's replies, once read; a dropped sender means the connection closed.
pub(super) type Answered = oneshot::Receiver<Result<Vec<Reply>, PipeError>>;

/// A cluster's pipelined connections, one per node (`host:port`), connected on first use. A
/// node's breaker keeps calls away from one that does not answer, so a failed connect is not
/// backed off here.
#[derive(Debug, Default)]
pub(super) struct NodePipes(Mutex<HashMap<String, Arc<Pipe>>>);

impl NodePipes {
    /// The live connection to `node`, connecting first when there is none.
    pub(super) async fn get(&self, node: &str, options: &RedisOptions) -> io::Result<Arc<Pipe>> {
        if let Some(pipe) = lock(&self.0).get(node).filter(|pipe| !pipe.is_closed()) {
            return Ok(Arc::clone(pipe));
        }
        let target = RedisTarget::Tcp(node.to_owned());
        let connect = Pipe::connect(&target, options.auth.as_ref(), options.tls.as_ref());
        let pipe = match tokio::time::timeout(options.timeout, connect).await {
            Ok(connected) => Arc::new(connected?),
            Err(_) => {
                let why = format!("connecting to redis node {node} timed out");
                return Err(io::Error::new(io::ErrorKind::TimedOut, why));
            }
        };
        // Two callers may connect at once; the later one's connection is kept.
        lock(&self.0).insert(node.to_owned(), Arc::clone(&pipe));
        Ok(pipe)
    }

    /// Forgets the connection to `node` after a fault.
    pub(super) fn reset(&self, node: &str) {
        lock(&self.0).remove(node);
    }
}

/// The error of a request whose connection closed before it was answered.
pub(super) fn closed() -> PipeError {
    PipeError::Closed("the connection to Redis closed".into())
}

async fn writer<W: AsyncWrite + Unpin>(
    mut write: W,
    mut queue: mpsc::Receiver<Request>,
    pending: mpsc::Sender<Written>,
    answered: Arc<AtomicU64>,
) {
    let mut buf = Vec::with_capacity(16 * 1024);
    while let Some(first) = queue.recv().await {
        buf.clear();
        let mut written = Vec::new();
        let mut next = Some(first);
        // Everything already queued goes out in the same write. A caller that gave up before
        // its commands left (its deadline passed in the queue) is skipped: they never count.
        while let Some(request) = next {
            if !request.answer.is_closed() {
                buf.extend_from_slice(&request.bytes);
                written.push(Pending {
                    replies: request.replies,
                    answer: request.answer,
                });
            }
            next = match buf.len() < 256 * 1024 {
                true => queue.try_recv().ok(),
                false => None,
            };
        }
        if written.is_empty() {
            continue;
        }
        // The reader learns of the requests before their replies can arrive.
        let entry = Written(written, Arc::clone(&answered));
        if pending.send(entry).await.is_err() || write.write_all(&buf).await.is_err() {
            return;
        }
    }
}

/// The requests of one write, in order: one entry for the reader, not one a request; and the
/// pipe's count of requests answered.
struct Written(Vec<Pending>, Arc<AtomicU64>);

impl Awaited for Written {
    type Scratch = Vec<u8>;

    async fn answer<R: AsyncBufRead + Unpin + Send>(
        self,
        read: &mut R,
        partial: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut requests = self.0.into_iter();
        while let Some(request) = requests.next() {
            match replies(read, partial, request.replies).await {
                Ok(replies) => {
                    self.1.fetch_add(1, Ordering::Release);
                    drop(request.answer.send(Ok(replies)));
                }
                Err(why) => {
                    request.fail(&why);
                    requests.for_each(|request| request.fail(&why));
                    return Err(why);
                }
            }
        }
        Ok(())
    }

    fn fail(self, why: &io::Error) {
        self.0.into_iter().for_each(|request| request.fail(why));
    }
}

impl Pending {
    fn fail(self, why: &io::Error) {
        drop(self.answer.send(Err(PipeError::Closed(why.to_string()))));
    }
}

/// One request's `count` replies (`partial`: `read_reply`'s buffer for a reply cut in two).
async fn replies<R: AsyncBufRead + Unpin>(
    read: &mut R,
    partial: &mut Vec<u8>,
    count: usize,
) -> io::Result<Vec<Reply>> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(read_reply(read, partial).await?);
    }
    Ok(out)
}
