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

use super::frames::{self, ENHANCE_YOUR_CALM, Frames, NO_ERROR, PREFACE_LEN, PingPolicy};
use super::intake::{HOLD_AT_GATE, Intake};

mod writing;
use crate::metrics::OpenConnections;
use crate::peers::{CloseReason, ConnHandle, ConnState, Gate};
use crate::settings::GrpcLimits;

/// How much one read takes while the peer is past half its part of the calls open (a few
/// requests of Envoy's size), so that one read cannot bring far more than the part.
const NARROW_READ: usize = 1024;

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
    limits: GrpcLimits,
    deadline: Pin<Box<Sleep>>,
    intake: Intake,
    outgoing: Frames,
    pings: PingPolicy,
    goodbye: Option<Goodbye>,
    ended: bool,
    /// The hard end: `GRPC_MAX_CONNECTION_AGE` plus its grace after it was accepted.
    hard_end: Option<Pin<Box<Sleep>>>,
}

impl<S> Conn<S> {
    /// Wraps `inner`, counting it open until dropped.
    pub(super) fn new(
        inner: S,
        handle: ConnHandle,
        open: Arc<OpenConnections>,
        limits: GrpcLimits,
        ends: Option<std::time::Duration>,
    ) -> Self {
        open.opened();
        Self {
            inner,
            handle,
            open,
            limits,
            deadline: Box::pin(tokio::time::sleep(limits.handshake_timeout)),
            intake: Intake::default(),
            outgoing: Frames::default(),
            pings: PingPolicy::new(limits.min_ping_interval),
            goodbye: None,
            ended: false,
            hard_end: ends.map(|after| Box::pin(tokio::time::sleep(after))),
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
            frame: frames::goaway(self.intake.last_stream(), code, reason),
            written: 0,
        });
    }

    /// Bytes just read (`hold`: kept in the intake until handed out): the idle timeout armed
    /// once the preface is in, PINGs against the policy.
    fn follow(&mut self, fresh: &[u8], hold: bool) {
        let before = self.intake.read();
        self.intake.follow(fresh, hold);
        if before < PREFACE_LEN && self.intake.read() >= PREFACE_LEN {
            // Past the preface the idle timeout applies, counted from the last call.
            let next = Instant::now() + self.limits.idle_timeout;
            self.deadline.as_mut().reset(next);
        }
        let pings = self.intake.take_pings();
        if pings == 0 {
            return;
        }
        let busy = self.state().idle_for().is_zero();
        // A call started between two PINGs is a stream the client opened: the highest one
        // opened stands for the calls started (clients open streams in increasing order).
        let calls = u64::from(self.intake.last_stream());
        for _ in 0..pings {
            if self.pings.ping(std::time::Instant::now(), calls, busy) {
                self.say_goodbye(CloseReason::TooManyPings);
            }
        }
    }
}

impl<S> Drop for Conn<S> {
    fn drop(&mut self) {
        if self.handle.state().take_pass() {
            // Woken from the gate's queue and closed before it read: the turn goes on.
            self.handle.state().peer().turn_ended();
        }
        self.open.closed();
        self.settle();
        let still_open = self.intake.open_streams();
        self.handle.state().peer().requests_closed(still_open);
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
            if self.intake.read() < PREFACE_LEN {
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
        // Woken from the gate's queue: this read may pass it, and hands the turn on after.
        let mut passed = this.state().take_pass();
        let read = this.poll_read_turn(cx, buf, &mut passed);
        if passed {
            this.state().peer().turn_ended();
        }
        read
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    fn poll_read_turn(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        passed: &mut bool,
    ) -> Poll<io::Result<()>> {
        let this = self;
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        if let Some(end) = &mut this.hard_end
            && end.as_mut().poll(cx).is_ready()
        {
            // hyper's GOAWAY went at the age; what is left after the grace is cut.
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "GRPC_MAX_CONNECTION_AGE and its grace passed",
            )));
        }
        if let Some(why) = this.state().closing() {
            this.say_goodbye(why);
        }
        if this.goodbye.is_some() {
            return this.poll_goodbye(cx);
        }
        let gate = this.state().gate(*passed);
        if gate == Gate::Open && !this.intake.holds() {
            // The common case: read straight into hyper's buffer.
            let before = buf.filled().len();
            return match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {
                    this.follow(&buf.filled()[before..], false);
                    this.intake.hand((buf.filled().len() - before) as u64);
                    this.settle();
                    this.after_read(cx);
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => this.poll_idle(cx),
            };
        }
        this.poll_read_gated(cx, buf, gate, passed)
    }

    /// A read while the peer is near or at its part of the calls open (or others of it wait
    /// in the queue): small steps through the intake, and none past the end of the requests
    /// already begun while the gate is shut.
    fn poll_read_gated(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
        gate: Gate,
        passed: &mut bool,
    ) -> Poll<io::Result<()>> {
        let mut gate = gate;
        loop {
            let shut = gate == Gate::Shut;
            let allowed = usize::try_from(self.intake.allowance(shut)).unwrap_or(usize::MAX);
            if allowed == 0 {
                // Held at the gate, the connection's control frames still go through (a
                // client's window granted, its SETTINGS, its PINGs), and its end is seen.
                if self.intake.hand_control(buf) > 0 {
                    self.settle();
                    return Poll::Ready(Ok(()));
                }
                match self.read_ahead(cx) {
                    Poll::Ready(Ok(true)) => continue,
                    Poll::Ready(Ok(false)) => return Poll::Ready(Ok(())),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
                if self.state().wait_at_gate(cx.waker()) {
                    self.state().peer().reads_paused();
                    // Woken when a request of the peer closes, or when the client sends more
                    // (read ahead registered the socket); the deadline still applies.
                    return self.poll_idle(cx);
                }
                // Not shut to it: one closed meanwhile, or its own queueing gave it the turn.
                *passed |= self.state().take_pass();
                gate = self.state().gate(*passed);
                continue;
            }
            if self.intake.holds() {
                self.intake.hand_withheld(allowed, buf);
                self.settle();
                return Poll::Ready(Ok(()));
            }
            let mut step = [0u8; NARROW_READ];
            let mut chunk = ReadBuf::new(&mut step);
            let read = Pin::new(&mut self.inner).poll_read(cx, &mut chunk);
            let n = chunk.filled().len();
            match read {
                Poll::Ready(Ok(())) if n == 0 => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    self.follow(&step[..n], true);
                    self.after_read(cx);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.poll_idle(cx),
            }
        }
    }

    /// At the gate: reads a little more into the intake while it holds under
    /// [`HOLD_AT_GATE`]; `true` when bytes came, `false` at the end of the stream, pending
    /// when there is nothing to read now (or the intake holds enough: then nothing registers,
    /// and the gate's wake-up reads next).
    fn read_ahead(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        if self.intake.withheld() >= HOLD_AT_GATE {
            return Poll::Pending;
        }
        let mut step = [0u8; NARROW_READ];
        let mut chunk = ReadBuf::new(&mut step);
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, &mut chunk))?;
        let n = chunk.filled().len();
        if n == 0 {
            return Poll::Ready(Ok(false));
        }
        self.follow(&step[..n], true);
        self.after_read(cx);
        Poll::Ready(Ok(true))
    }

    /// Nothing to read now: registers to be woken when the connection is told to close (checked
    /// again after, so a close told meanwhile is not missed), then the deadlines.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.state().register(cx.waker());
        if self.state().closing().is_some() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.poll_deadline(cx)
    }

    /// After a read: a GOAWAY the read made due goes out on the next one.
    fn after_read(&self, cx: &mut Context<'_>) {
        if self.goodbye.is_some() {
            cx.waker().wake_by_ref();
        }
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
