//! What the pipelined connections of our own (memcached's `pipelined::connection`, Redis's
//! `pipe`) share: the reader's loop (the next awaited entry, its answers read and handed over,
//! and on a broken stream every entry still awaited failed with the reason), its wait for the
//! next entry that notices a connection the server closed while idle, and the flag that tells
//! callers the reader has stopped. What an entry is and how its answers are read is each
//! protocol's ([`Awaited`]).
//!
//! Must not touch: protocols, queues' contents, what an answer means.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::sync::mpsc;

/// Marks a connection dead when its reader stops, however it stops.
struct Alive(Arc<AtomicBool>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An entry a reader awaits answers for: a protocol's own.
pub(crate) trait Awaited: Sized {
    /// What the reader keeps from one entry to the next (buffers).
    type Scratch: Default + Send;

    /// Reads this entry's answers off `read` and hands them to its caller; an error ends the
    /// connection (the entry's caller already told).
    fn answer<R: AsyncBufRead + Unpin + Send>(
        self,
        read: &mut R,
        scratch: &mut Self::Scratch,
    ) -> impl Future<Output = io::Result<()>> + Send;

    /// The connection ended (`why`) before this entry was answered.
    fn fail(self, why: &io::Error);
}

/// A started reader: the flag that turns false when it stops, however it stops, and the
/// handle that stops it (a connection given up for hanging: its read half is dropped with it).
pub(crate) struct ReaderTask {
    pub(crate) alive: Arc<AtomicBool>,
    pub(crate) abort: tokio::task::AbortHandle,
}

/// Starts the reader task of a connection to `server` (`peer`, its address, for the log):
/// [`reader`] until no caller is left or the connection ends.
pub(crate) fn spawn_reader<T, R>(
    read: R,
    pending: mpsc::Receiver<T>,
    server: &'static str,
    peer: String,
) -> ReaderTask
where
    T: Awaited + Send + 'static,
    R: AsyncBufRead + Unpin + Send + 'static,
{
    let alive = Arc::new(AtomicBool::new(true));
    let reading = Alive(Arc::clone(&alive));
    let task = tokio::spawn(async move {
        let _reading = reading;
        if let Some(why) = reader(read, pending, server).await {
            tracing::warn!(server = %peer, error = %why, "a {server} connection ended");
        }
    });
    ReaderTask {
        alive,
        abort: task.abort_handle(),
    }
}

/// Reads answers until no caller is left (`None`) or the connection to `server` ends (why: it
/// closed, an I/O error, or bytes that answer nothing). The entry being read and every one
/// still awaited then fail with that reason; the writer stops at its next entry.
async fn reader<T: Awaited + Send, R: AsyncBufRead + Unpin + Send>(
    mut read: R,
    mut pending: mpsc::Receiver<T>,
    server: &str,
) -> Option<io::Error> {
    let mut scratch = T::Scratch::default();
    loop {
        let awaited = match next_awaited(&mut pending, &mut read, server).await {
            Ok(Some(awaited)) => awaited,
            Ok(None) => return None,
            Err(why) => return Some(why),
        };
        if let Err(why) = awaited.answer(&mut read, &mut scratch).await {
            pending.close();
            while let Ok(awaited) = pending.try_recv() {
                awaited.fail(&why);
            }
            return Some(why);
        }
    }
}

/// The next awaited entry (`None`: no caller is left), or why the connection ended while none
/// was awaited: `server` closed it or sent bytes that answer nothing. Answers only ever follow
/// their entry (a writer queues it before writing), so pending entries come first.
async fn next_awaited<T, R: AsyncBufRead + Unpin>(
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
            Ok(bytes) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{server} sent bytes that answer no command: {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(64)])
                ),
            ),
            Err(e) => e,
        }),
    }
}
