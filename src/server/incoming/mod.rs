//! Accepting gRPC connections with limits. Every connection is let in: at the cap in all
//! (`GRPC_MAX_CONNECTIONS`) or its peer's (`GRPC_MAX_CONNECTIONS_PER_PEER`), the registry in
//! `peers` tells another connection to close instead (the longest idle of the peer holding the
//! most), so no newcomer waits in the listen backlog behind connections that only PING. Accept
//! errors (such as running out of file descriptors) are answered with a growing pause instead
//! of a busy loop. A connection is closed when it stalls (no complete HTTP/2 preface within the
//! handshake timeout: slowloris), when it has had no call for the idle timeout (PINGs,
//! SETTINGS and WINDOW_UPDATEs do not count), when it PINGs faster than the policy allows
//! (`frames::PingPolicy`), or when the registry tells it to; each of the last three with a
//! GOAWAY first, written between two of hyper's frames. Open connections are counted for
//! `/metrics`.
//!
//! Must not touch: protocol handling (hyper and tonic do that on top of these streams; only
//! frame headers are followed here).

mod frames;

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::metrics::OpenConnections;
use crate::peers::{CloseReason, ConnHandle, ConnState, PeerId, Peers};
use crate::settings::GrpcLimits;
use frames::{ENHANCE_YOUR_CALM, Frame, Frames, NO_ERROR, PREFACE_LEN, PingPolicy};

/// The longest pause after repeated accept errors.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A served stream's peer: its address, or under mTLS its client certificate.
pub(super) trait PeerOf {
    /// Who the client is, and the address it came from.
    fn peer_of(&self) -> (PeerId, Option<IpAddr>);
}

impl PeerOf for TcpStream {
    fn peer_of(&self) -> (PeerId, Option<IpAddr>) {
        match self.peer_addr() {
            Ok(addr) => (PeerId::of_address(addr.ip()), Some(addr.ip())),
            Err(_) => (PeerId::Local, None),
        }
    }
}

impl PeerOf for tokio_rustls::server::TlsStream<TcpStream> {
    fn peer_of(&self) -> (PeerId, Option<IpAddr>) {
        let (tcp, session) = self.get_ref();
        let (by_address, ip) = tcp.peer_of();
        match session.peer_certificates().and_then(|certs| certs.first()) {
            Some(cert) => (PeerId::of_certificate(cert.as_ref()), ip),
            None => (by_address, ip),
        }
    }
}

/// The GOAWAY being written before the connection ends.
#[derive(Debug)]
struct Goodbye {
    frame: Vec<u8>,
    written: usize,
}

/// An accepted connection: its place in the registry, the open count, the stall and idle
/// deadline, the frames followed both ways, and its ending.
#[derive(Debug)]
pub(super) struct Conn<S> {
    inner: S,
    handle: ConnHandle,
    open: Arc<OpenConnections>,
    read: u64,
    limits: GrpcLimits,
    deadline: Pin<Box<Sleep>>,
    incoming: Frames,
    outgoing: Frames,
    pings: PingPolicy,
    last_stream: u32,
    goodbye: Option<Goodbye>,
    ended: bool,
}

impl<S> Conn<S> {
    /// Wraps `inner`, counting it open until dropped.
    pub(super) fn new(
        inner: S,
        handle: ConnHandle,
        open: Arc<OpenConnections>,
        limits: GrpcLimits,
    ) -> Self {
        open.opened();
        Self {
            inner,
            handle,
            open,
            read: 0,
            limits,
            deadline: Box::pin(tokio::time::sleep(limits.handshake_timeout)),
            incoming: Frames::default(),
            outgoing: Frames::default(),
            pings: PingPolicy::new(limits.min_ping_interval),
            last_stream: 0,
            goodbye: None,
            ended: false,
        }
    }

    fn state(&self) -> &Arc<ConnState> {
        self.handle.state()
    }

    /// Starts the ending: GOAWAY with `code` and `reason`, then end of stream.
    fn say_goodbye(&mut self, why: CloseReason) {
        if self.goodbye.is_some() {
            return;
        }
        self.handle.close(why);
        let code = match why {
            CloseReason::TooManyPings => ENHANCE_YOUR_CALM,
            _ => NO_ERROR,
        };
        let reason = match why {
            CloseReason::TooManyPings => "too_many_pings",
            other => other.label(),
        };
        self.goodbye = Some(Goodbye {
            frame: frames::goaway(self.last_stream, code, reason),
            written: 0,
        });
    }

    /// The bytes just read (`fresh`, the preface's excluded): PINGs against the policy, streams
    /// opened.
    fn follow(&mut self, fresh: &[u8]) {
        let before = self.read;
        self.read += fresh.len() as u64;
        let skip = usize::try_from(PREFACE_LEN.saturating_sub(before)).unwrap_or(usize::MAX);
        let Some(frames) = fresh.get(skip.min(fresh.len())..) else {
            return;
        };
        if before < PREFACE_LEN && self.read >= PREFACE_LEN {
            // Past the preface the idle timeout applies, counted from the last call.
            let next = Instant::now() + self.limits.idle_timeout;
            self.deadline.as_mut().reset(next);
        }
        let (mut pings, mut last_stream) = (0u32, self.last_stream);
        self.incoming.pass(frames, |frame| match frame {
            Frame::Ping => pings += 1,
            Frame::Headers(stream) => last_stream = last_stream.max(stream),
            Frame::Other => {}
        });
        self.last_stream = last_stream;
        let state = Arc::clone(self.state());
        let busy = state.idle_for().is_zero();
        for _ in 0..pings {
            if self.pings.ping(std::time::Instant::now(), state.calls(), busy) {
                self.say_goodbye(CloseReason::TooManyPings);
            }
        }
    }
}

impl<S> Drop for Conn<S> {
    fn drop(&mut self) {
        self.open.closed();
    }
}

impl<S: AsyncWrite + Unpin> Conn<S> {
    /// Writes the GOAWAY once hyper's last frame is out, flushes, and ends the stream.
    fn poll_goodbye(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.outgoing.at_boundary() {
            // hyper is inside a frame; `poll_write` wakes this task when it ends.
            return Poll::Pending;
        }
        std::task::ready!(self.poll_goodbye_frame(cx));
        std::task::ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        self.ended = true;
        Poll::Ready(Ok(()))
    }

    /// Writes what is left of the GOAWAY frame (a failed write ends it: the connection is
    /// going anyway).
    fn poll_goodbye_frame(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(goodbye) = &mut self.goodbye {
            while goodbye.written < goodbye.frame.len() {
                let rest = &goodbye.frame[goodbye.written..];
                match Pin::new(&mut self.inner).poll_write(cx, rest) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => goodbye.written = usize::MAX,
                    Poll::Ready(Ok(n)) => goodbye.written += n,
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
        Poll::Ready(())
    }

    /// Before hyper's next frame: the GOAWAY, if one waits for a frame's end.
    fn poll_before_write(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let waiting = (self.goodbye.as_ref()).is_some_and(|g| g.written < g.frame.len());
        if waiting && self.outgoing.at_boundary() {
            std::task::ready!(self.poll_goodbye_frame(cx));
            // The read side flushes it and ends the stream.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(())
    }

    /// The deadline passed: the handshake timed out, or the idle timeout is checked against the
    /// last call (and rearmed when one came since).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.deadline.as_mut().poll(cx));
            if self.read < PREFACE_LEN {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 preface within the handshake timeout",
                )));
            }
            let idle = self.state().idle_for();
            if idle >= self.limits.idle_timeout {
                self.say_goodbye(CloseReason::Idle);
                return self.poll_goodbye(cx);
            }
            let next = Instant::now() + (self.limits.idle_timeout - idle);
            self.deadline.as_mut().reset(next);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        this.state().register(cx.waker());
        if let Some(why) = this.state().closing() {
            this.say_goodbye(why);
        }
        if this.goodbye.is_some() {
            return this.poll_goodbye(cx);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.follow(&buf.filled()[before..]);
                if this.goodbye.is_some() {
                    // Hand these bytes over; the GOAWAY goes out on the next read.
                    cx.waker().wake_by_ref();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.poll_deadline(cx),
        }
    }
}

impl<S> Conn<S> {
    /// A GOAWAY waits and hyper's frame just ended: the read side writes it now.
    fn wake_for_goodbye(&self, cx: &mut Context<'_>) {
        if self.goodbye.is_some() && self.outgoing.at_boundary() {
            cx.waker().wake_by_ref();
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_before_write(cx));
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.outgoing.pass(&buf[..n.min(buf.len())], |_| {});
        this.wake_for_goodbye(cx);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_before_write(cx));
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for slice in bufs {
            let taken = left.min(slice.len());
            this.outgoing.pass(&slice[..taken], |_| {});
            left -= taken;
            if left == 0 {
                break;
            }
        }
        this.wake_for_goodbye(cx);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S> Connected for Conn<S> {
    /// The connection's state: its peer, and its calls for the idle timeout. Every call's
    /// request carries it (tonic puts it in the request's extensions).
    type ConnectInfo = Arc<ConnState>;

    fn connect_info(&self) -> Self::ConnectInfo {
        Arc::clone(self.state())
    }
}

/// Accepts on `listener` within `limits`; `wrap` turns an accepted TCP stream into the served
/// stream (plain, or a finished TLS handshake), or `None` to drop it; `peers` registers each
/// connection under its peer. At most `GRPC_MAX_CONNECTIONS` handshakes run at once (a stream
/// beyond is closed at once). The accept loop ends when the returned stream is dropped.
pub(super) fn accept<S, W, F>(
    listener: TcpListener,
    limits: GrpcLimits,
    open: Arc<OpenConnections>,
    peers: Arc<Peers>,
    wrap: W,
) -> ReceiverStream<io::Result<Conn<S>>>
where
    S: PeerOf + Send + 'static,
    W: Fn(TcpStream) -> F + Send + 'static,
    F: Future<Output = Option<S>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        let mut pause = Duration::ZERO;
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let stream = match stream {
                Ok((stream, _)) => {
                    pause = Duration::ZERO;
                    stream
                }
                Err(e) => {
                    // Out of descriptors or memory: wait before trying again instead of
                    // spinning; the pause doubles up to a second while errors repeat.
                    pause = (pause * 2).clamp(Duration::from_millis(5), ACCEPT_BACKOFF_MAX);
                    tracing::warn!(error = %e, ?pause, "accepting a gRPC connection failed");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            let Ok(handshake) = Arc::clone(&handshakes).try_acquire_owned() else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (sender, open, wrapped) = (tx.clone(), Arc::clone(&open), wrap(stream));
            let peers = Arc::clone(&peers);
            tokio::spawn(async move {
                let served = wrapped.await;
                drop(handshake);
                if let Some(served) = served {
                    let (id, ip) = served.peer_of();
                    let handle = peers.connections().open(peers.peer(id, ip));
                    let conn = Conn::new(served, handle, open, limits);
                    let _ = sender.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
