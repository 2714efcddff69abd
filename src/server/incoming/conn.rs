//! One accepted connection: its place in the peers' registry, the handshake and idle
//! deadline, the HTTP/2 frame headers followed both ways (PINGs against the policy, streams
//! opened, where hyper's frames end), and its ending with a GOAWAY written between two frames.
//!
//! Must not touch: protocol handling beyond frame headers (hyper and tonic do it).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use super::frames::{self, ENHANCE_YOUR_CALM, Frame, Frames, NO_ERROR, PREFACE_LEN, PingPolicy};
use crate::metrics::OpenConnections;
use crate::peers::{CloseReason, ConnHandle, ConnState};
use crate::settings::GrpcLimits;

/// The GOAWAY being written before the connection ends.
#[derive(Debug)]
struct Goodbye {
    frame: Vec<u8>,
    written: usize,
}

/// An accepted connection: its place in the registry, the open count, the stall and idle
/// deadline, the frames followed both ways, and its ending.
#[derive(Debug)]
pub(in crate::server) struct Conn<S> {
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
        if pings == 0 {
            return;
        }
        let state = Arc::clone(self.state());
        let busy = state.idle_for().is_zero();
        for _ in 0..pings {
            if self
                .pings
                .ping(std::time::Instant::now(), state.calls(), busy)
            {
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
