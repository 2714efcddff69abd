//! The deadline and health tracking around every memcached call: a server in backoff is not
//! asked, time spent before the write is Turnstile's own overload (never a dead server), a late
//! answer is checked by a probe on the side before the server is called down, and connection
//! faults mark it down at once.
//!
//! Must not touch: what the commands are (counters, bucket states), the ring.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::PROBE_DEADLINE;
use super::health::Server;
use super::transport::{Sent, Transport, TransportError};
use crate::storage::StorageError;
use crate::storage::lateness::SchedulingDelay;
use crate::storage::remote::late;

/// What every call to a server is held to: the operation's deadline (`MEMCACHE_TIMEOUT`) and
/// the runtime's scheduling delay (to tell Turnstile's overload from a late server).
#[derive(Debug)]
pub(super) struct Deadline {
    pub(super) timeout: Duration,
    pub(super) scheduling: Arc<SchedulingDelay>,
}

impl Server {
    /// Runs `call` (which sets `sent` once its commands are written) under the operation
    /// deadline and this server's health tracking: a server in backoff is not asked; time
    /// spent before the write is Turnstile's overload; a late answer is checked by a probe
    /// before the server is called down; connection faults mark it down at once.
    pub(super) async fn guarded<T>(
        self: &Arc<Self>,
        deadline: &Deadline,
        sent: &Sent,
        call: impl Future<Output = Result<T, TransportError>>,
    ) -> Result<T, StorageError> {
        let server = self;
        if !server.admit() {
            return Err(StorageError::unavailable(format!(
                "memcached {} is down (retrying with backoff)",
                server.name
            )));
        }
        // One clock read serves both the deadline and the lateness measure.
        let started = tokio::time::Instant::now();
        let error = match tokio::time::timeout_at(started + deadline.timeout, call).await {
            Ok(Ok(answer)) => {
                server.record_success();
                return Ok(answer);
            }
            Ok(Err(err)) => err,
            Err(_) if !sent.load(Ordering::Acquire) => {
                // Never written: the time went in Turnstile's own queue.
                return Err(StorageError::overloaded(format!(
                    "commands for memcached {} waited {:?} in Turnstile without being sent",
                    server.name, deadline.timeout
                )));
            }
            Err(_) => {
                // Written, not answered in time: ask the server on the side before calling it
                // down (Turnstile may have been too busy to read the answer).
                self.probe_later();
                let store = format!("memcached {}", server.name);
                return Err(late(
                    &store,
                    started.into_std(),
                    deadline.timeout,
                    &deadline.scheduling,
                ));
            }
        };
        if let TransportError::Overloaded(why) = error {
            return Err(StorageError::overloaded(why));
        }
        if error.is_connection_fault() {
            server.record_failure();
            server.transport.reset();
            Err(StorageError::unavailable(format!(
                "memcached {}: {error}",
                server.name
            )))
        } else {
            server.record_success();
            Err(StorageError::protocol(format!(
                "memcached {}: {error}",
                server.name
            )))
        }
    }

    /// Probes this server in the background (one probe at a time); a probe that fails within
    /// [`PROBE_DEADLINE`] marks it down.
    fn probe_later(self: &Arc<Self>) {
        if !self.start_probe() {
            return;
        }
        let server = Arc::clone(self);
        tokio::spawn(async move {
            let answered = matches!(
                tokio::time::timeout(PROBE_DEADLINE, server.transport.probe()).await,
                Ok(Ok(()))
            );
            if !answered {
                server.transport.reset();
            }
            server.probe_done(answered);
        });
    }
}
