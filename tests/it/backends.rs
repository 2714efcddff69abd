//! Runs one scenario on every counter store: the memory store and a real memcached process
//! (meta protocol). `on_every_backend!` stamps one test per backend.

use std::time::Duration;

use turnstile::clock::{Clock, ManualClock, SystemClock};

use crate::support::{Memcached, Options, TestServer, memcached_store, start_memory, start_with};

/// Which store a scenario runs on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    Memcached,
}

/// A server plus whatever it needs kept alive.
pub struct Harness {
    pub server: TestServer,
    /// Kept alive for the server's lifetime.
    pub _memcached: Option<Memcached>,
}

impl std::ops::Deref for Harness {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.server
    }
}

impl Backend {
    /// Starts a server on this backend, or `None` when memcached is not installed (reported).
    pub async fn start(self, files: &[(&str, &str)], options: Options) -> Option<Harness> {
        match self {
            Backend::Memory => Some(Harness {
                server: start_memory(files, options).await,
                _memcached: None,
            }),
            Backend::Memcached => {
                let mc = Memcached::start()?;
                // memcached expires items in real time, so the frozen test clock stands at the
                // real present (absolute expiry times beyond 30 days must be in the future).
                let clock = ManualClock::new(SystemClock.now());
                let store = memcached_store(&[&mc], &clock, Duration::from_millis(500));
                Some(Harness {
                    server: start_with(store, clock, files, options).await,
                    _memcached: Some(mc),
                })
            }
        }
    }
}

#[macro_export]
macro_rules! on_every_backend {
    ($($scenario:ident),* $(,)?) => {
        mod memory_backend {
            $(#[tokio::test] async fn $scenario() { super::$scenario($crate::backends::Backend::Memory).await })*
        }
        mod memcached_backend {
            $(#[tokio::test] async fn $scenario() { super::$scenario($crate::backends::Backend::Memcached).await })*
        }
    };
}
