//! Real memcached processes for tests, on free ports, and stores over them. A process stops
//! when its handle is dropped or killed, and when the test binary exits (`lifeline`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use turnstile::clock::ManualClock;
use turnstile::storage::memcached::{MemcachedOptions, MemcachedStore, MemcachedTransport};

use crate::support::lifeline::Supervised;
use crate::support::{free_port, missing};

/// A memcached process on a free port, killed on drop.
pub struct Memcached {
    pub port: u16,
    child: Option<Supervised>,
    /// Arguments beyond the address, port and user (TLS: `-Z -o ssl_chain_cert=…`).
    extra: Vec<String>,
}

fn memcached_binary() -> Option<PathBuf> {
    ["/usr/bin/memcached", "/usr/local/bin/memcached"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

impl Memcached {
    /// Starts memcached, or `None` (after [`missing`]) when it is not installed.
    pub fn start() -> Option<Memcached> {
        Self::start_with(&[])
    }

    /// Starts memcached with `extra` arguments (e.g. `-Z -o ssl_chain_cert=…,ssl_key=…`).
    pub fn start_with(extra: &[&str]) -> Option<Memcached> {
        let Some(binary) = memcached_binary() else {
            missing("memcached");
            return None;
        };
        // memcached cannot be told to pick a port: try free ones until one is ours (another
        // process may take a port between our probe and memcached's bind).
        for _ in 0..10 {
            let mut mc = Memcached {
                port: free_port(),
                child: None,
                extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            };
            if mc.spawn(&binary) {
                return Some(mc);
            }
        }
        panic!("memcached did not start on any of 10 free ports");
    }

    /// Starts the process on `self.port`; false if it exits (the port was taken). It is
    /// [`Supervised`]: stopped when the handle is, and when the test binary exits.
    fn spawn(&mut self, binary: &PathBuf) -> bool {
        let port = self.port.to_string();
        let mut command = Command::new(binary);
        command
            .args(["-l", "127.0.0.1", "-p", &port, "-U", "0", "-m", "64"])
            .args(["-u", "root"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = Supervised::spawn(&mut command, "TERM").expect("spawn memcached");
        // Listening (true), or exited because the port was taken (false).
        let what = format!("memcached to start on {}", self.port);
        let started = crate::support::wait::blocking_some(Duration::from_secs(10), &what, || {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                Some(true)
            } else {
                child.has_exited().then_some(false)
            }
        });
        if !started {
            return false;
        }
        self.child = Some(child);
        true
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the process, and waits until it has exited (its port is free again).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.stop();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let binary = memcached_binary().expect("memcached");
        assert!(self.spawn(&binary), "memcached restarts on {}", self.port);
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A memcached store over `servers` on `clock`.
pub fn memcached_store_with(
    transport: MemcachedTransport,
    servers: &[&Memcached],
    clock: &ManualClock,
    timeout: Duration,
) -> MemcachedStore {
    let options = MemcachedOptions {
        servers: servers.iter().map(|m| m.addr()).collect(),
        client: turnstile::storage::memcached::MemcachedClient {
            transport,
            pool_size: 16,
            pipelined_connections: Some(std::num::NonZeroUsize::new(2).expect("2")),
            timeout,
            jitter_max_seconds: 0,
        },
        tls: None,
    };
    MemcachedStore::new(options, Arc::new(clock.clone())).expect("store")
}

/// A memcached store with the default (pipelined) transport.
pub fn memcached_store(
    servers: &[&Memcached],
    clock: &ManualClock,
    timeout: Duration,
) -> MemcachedStore {
    memcached_store_with(MemcachedTransport::default(), servers, clock, timeout)
}

/// A loopback address nothing listens on (a port bound and let go).
pub fn nothing_listens() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    address.to_string()
}

/// A memcached store (pipelined, one connection, 1 s deadline) over an address nothing
/// listens on: every call to it fails, as to a memcached that is down.
pub fn unreachable_memcached_store(clock: &ManualClock) -> MemcachedStore {
    let options = MemcachedOptions {
        servers: vec![nothing_listens()],
        client: turnstile::storage::memcached::MemcachedClient {
            transport: MemcachedTransport::Pipelined,
            pool_size: 2,
            pipelined_connections: Some(std::num::NonZeroUsize::MIN),
            timeout: Duration::from_secs(1),
            jitter_max_seconds: 0,
        },
        tls: None,
    };
    MemcachedStore::new(options, Arc::new(clock.clone())).expect("store")
}
