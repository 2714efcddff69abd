//! What the pipelined connections of our own (memcached's `pipeline`, Redis's `pipe`) share: a
//! reader's wait for the next awaited answer that notices a connection the server closed while
//! idle, and the flag that tells callers the reader has stopped.
//!
//! Must not touch: protocols, queues' contents, what an answer means.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::mpsc;

/// Marks a connection dead when its reader stops, however it stops.
pub(crate) struct Alive(pub(crate) Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The next awaited entry (`None`: no caller is left), or why the connection ended while none
/// was awaited: `server` closed it or sent bytes that answer nothing. Answers only ever follow
/// their entry (a writer queues it before writing), so pending entries come first.
pub(crate) async fn next_awaited<T, R: AsyncBufRead + Unpin>(
    pending: &mut mpsc::Receiver<T>,
    read: &mut R,
    server: &str,
) -> io::Result<Option<T>> {
    tokio::select! {
        biased;
        next = pending.recv() => Ok(next),
        filled = read.fill_buf() => Err(match filled {
            Ok([]) => io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{server} closed the connection"),
            ),
            Ok(_) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{server} sent bytes that answer no command"),
            ),
            Err(e) => e,
        }),
    }
}
