//! Accepting gRPC connections with limits: at most `max_connections` open at once (further
//! clients wait in the listen backlog), accept errors (such as running out of file
//! descriptors) answered with a growing pause instead of a busy loop, and every connection
//! closed when it stalls — no complete HTTP/2 preface within the handshake timeout (slowloris),
//! or no byte read for the idle timeout. Open connections are counted for `/metrics`.
//!
//! Must not touch: protocol handling (hyper and tonic do that on top of these streams).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::metrics::OpenConnections;
use crate::settings::GrpcLimits;

/// The HTTP/2 client preface is this long; a connection that has not sent it within the
/// handshake timeout is closed.
const PREFACE_LEN: u64 = 24;
/// The longest pause after repeated accept errors.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// An accepted connection: a permit of the connection limit, the open count, and the stall
/// deadlines.
#[derive(Debug)]
pub(super) struct Conn<S> {
    inner: S,
    _permit: OwnedSemaphorePermit,
    open: Arc<OpenConnections>,
    read: u64,
    limits: GrpcLimits,
    deadline: Pin<Box<Sleep>>,
}

impl<S> Conn<S> {
    /// Wraps `inner`, counting it open until dropped.
    pub(super) fn new(
        inner: S,
        permit: OwnedSemaphorePermit,
        open: Arc<OpenConnections>,
        limits: GrpcLimits,
    ) -> Self {
        open.opened();
        Self {
            inner,
            _permit: permit,
            open,
            read: 0,
            limits,
            deadline: Box::pin(tokio::time::sleep(limits.handshake_timeout)),
        }
    }
}

impl<S> Drop for Conn<S> {
    fn drop(&mut self) {
        self.open.closed();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                let n = (buf.filled().len() - before) as u64;
                if n > 0 {
                    this.read += n;
                    // Past the preface the idle timeout applies, restarted by every read.
                    if this.read >= PREFACE_LEN {
                        let next = Instant::now() + this.limits.idle_timeout;
                        this.deadline.as_mut().reset(next);
                    }
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    if this.read < PREFACE_LEN {
                        "no HTTP/2 preface within the handshake timeout"
                    } else {
                        "connection idle"
                    },
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: Connected> Connected for Conn<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts on `listener` within `limits`; `wrap` turns an accepted TCP stream into the served
/// stream (plain, or a finished TLS handshake), or `None` to drop it. The accept loop ends when
/// the returned stream is dropped.
pub(super) fn accept<S, W, F>(
    listener: TcpListener,
    limits: GrpcLimits,
    open: Arc<OpenConnections>,
    wrap: W,
) -> ReceiverStream<io::Result<Conn<S>>>
where
    S: Send + 'static,
    W: Fn(tokio::net::TcpStream) -> F + Send + 'static,
    F: Future<Output = Option<S>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::spawn(async move {
        let mut pause = Duration::ZERO;
        loop {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                return;
            };
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
            let _ = stream.set_nodelay(true);
            let (sender, open, wrapped) = (tx.clone(), Arc::clone(&open), wrap(stream));
            tokio::spawn(async move {
                if let Some(served) = wrapped.await {
                    let conn = Conn::new(served, permit, open, limits);
                    let _ = sender.send(Ok(conn)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
