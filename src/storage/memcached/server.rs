//! One memcached server: its connection pool and its health. A server that fails to connect or
//! times out is marked down with an exponential backoff (50 ms doubling to 1 s); while it is
//! down, its operations fail at once instead of each waiting for a deadline, and one operation
//! per backoff period is let through as a probe. A success clears the failure count.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::sync::atomic::AtomicUsize;

use arc_swap::ArcSwapOption;
use bb8::Pool;

use super::connection::{Manager, resolve};
use super::pipeline::Pipeline;

/// One pipelined connection, made on first use and again after it breaks.
#[derive(Debug, Default)]
struct PipeSlot {
    current: ArcSwapOption<Pipeline>,
    connecting: tokio::sync::Mutex<()>,
}

const BACKOFF_START_MS: u64 = 50;
const BACKOFF_MAX_MS: u64 = 1_000;

/// A server, its pool and its health.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) pool: Pool<Manager>,
    pipes: Vec<PipeSlot>,
    next_pipe: AtomicUsize,
    failures: AtomicU32,
    /// Milliseconds since `epoch` until which the server counts as down.
    down_until_ms: AtomicU64,
    epoch: Instant,
}

impl Server {
    /// A server with a pool of `pool_size` connections and `pipelines` pipelined connections
    /// (both made lazily).
    pub(crate) fn new(name: String, pool_size: u32, pipelines: usize, timeout: Duration) -> Server {
        let pool = Pool::builder()
            .max_size(pool_size)
            .min_idle(None)
            .test_on_check_out(false)
            .connection_timeout(timeout)
            .build_unchecked(Manager {
                server: name.clone(),
            });
        Server {
            name,
            pool,
            pipes: (0..pipelines.max(1)).map(|_| PipeSlot::default()).collect(),
            next_pipe: AtomicUsize::new(0),
            failures: AtomicU32::new(0),
            down_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// A pipelined connection (round robin over the server's), connecting when needed.
    pub(crate) async fn pipeline(&self) -> std::io::Result<std::sync::Arc<Pipeline>> {
        let slot = &self.pipes[self.next_pipe.fetch_add(1, Ordering::Relaxed) % self.pipes.len()];
        if let Some(pipe) = slot.current.load_full().filter(|p| !p.is_closed()) {
            return Ok(pipe);
        }
        let _connecting = slot.connecting.lock().await;
        if let Some(pipe) = slot.current.load_full().filter(|p| !p.is_closed()) {
            return Ok(pipe);
        }
        let pipe = std::sync::Arc::new(Pipeline::connect(resolve(&self.name).await?).await?);
        slot.current.store(Some(std::sync::Arc::clone(&pipe)));
        Ok(pipe)
    }

    /// How many pipelined connections are open.
    pub(crate) fn open_pipelines(&self) -> u64 {
        let open = self
            .pipes
            .iter()
            .filter(|s| s.current.load().as_ref().is_some_and(|p| !p.is_closed()))
            .count();
        u64::try_from(open).unwrap_or(u64::MAX)
    }

    /// Forgets the pipelined connections (after a failure), so the next use reconnects.
    pub(crate) fn drop_pipelines(&self) {
        for slot in &self.pipes {
            slot.current.store(None);
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether an operation may go to this server now. While down, only the caller that claims
    /// the next probe slot is let through.
    pub(crate) fn admit(&self) -> bool {
        if self.failures.load(Ordering::Acquire) == 0 {
            return true;
        }
        let now = self.now_ms();
        let until = self.down_until_ms.load(Ordering::Acquire);
        now >= until
            && self
                .down_until_ms
                .compare_exchange(
                    until,
                    now + self.backoff_ms(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Whether the server is currently considered reachable.
    pub(crate) fn is_up(&self) -> bool {
        self.failures.load(Ordering::Acquire) == 0
    }

    fn backoff_ms(&self) -> u64 {
        let failures = self.failures.load(Ordering::Acquire).min(16);
        (BACKOFF_START_MS << failures.saturating_sub(1)).min(BACKOFF_MAX_MS)
    }

    pub(crate) fn record_success(&self) {
        if self.failures.swap(0, Ordering::AcqRel) != 0 {
            tracing::warn!(server = %self.name, "memcached server is reachable again");
        }
    }

    pub(crate) fn record_failure(&self) {
        if self.failures.fetch_add(1, Ordering::AcqRel) == 0 {
            tracing::error!(server = %self.name, "memcached server unreachable; retrying with backoff");
        }
        let until = self.now_ms() + self.backoff_ms();
        self.down_until_ms.store(until, Ordering::Release);
    }
}
