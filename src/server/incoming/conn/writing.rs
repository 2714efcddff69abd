//! A connection's write side: hyper's bytes passed through with their frames followed (where
//! each ends, so a GOAWAY goes between two; the streams the server ends or resets), and the
//! peer's count of requests open kept in step with what was handed and answered.
//!
//! Must not touch: the read side's gate and intake rules (`conn`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use super::super::frames::{Frame, Seen};
use super::Conn;

impl<S> Conn<S> {
    /// Streams handed or closed since the last time: the peer's count of requests open.
    pub(super) fn settle(&mut self) {
        let (opened, closed) = self.intake.take_changes();
        let peer = self.handle.state().peer();
        peer.requests_opened(opened);
        peer.requests_closed(closed);
    }

    /// Bytes hyper wrote: where its frames end, and the streams its END_STREAM or RST_STREAM
    /// closed (the peer's requests open).
    fn sent(&mut self, bytes: &[u8]) {
        let (outgoing, intake) = (&mut self.outgoing, &mut self.intake);
        outgoing.pass(bytes, |seen| match seen {
            Seen::Start(Frame::Headers {
                stream, ends: true, ..
            })
            | Seen::Start(Frame::Data { stream, ends: true })
            | Seen::Start(Frame::Reset(stream)) => intake.close(stream),
            _ => {}
        });
        self.settle();
    }

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
        this.sent(&buf[..n.min(buf.len())]);
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
            this.sent(&slice[..taken]);
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
