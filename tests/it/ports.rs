//! Ports for peers that must be told their port before they start (Envoy's bootstrap, memcached,
//! redis-server); Turnstile and the tests' own listeners bind port 0 instead.
//!
//! A port found by binding port 0 and letting go is one of the kernel's ephemeral ports, the
//! ones it also gives the client end of every outgoing connection: between the check and the
//! peer's own bind, any connection on the machine can take it (one full run had Envoy fail to
//! start with "cannot bind '127.0.0.1:43911': Address already in use" while other tests opened
//! thousands of connections). So ports come from a range below the ephemeral ones (this
//! machine's `ip_local_port_range` starts at 32768), in turn from a start that depends on the
//! process id, each checked free when handed out and never handed out twice by one process
//! (short of wrapping the whole range); a Redis cluster node's bus port (its port + 10000) falls
//! below the ephemeral range too.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The range: 12000–21999 (above memcached's 11211, Redis's 6379 and PostgreSQL's 5432).
const FIRST: u32 = 12_000;
const COUNT: u32 = 10_000;

/// How many ports this process has handed out (or found taken).
static TAKEN: AtomicU32 = AtomicU32::new(0);

/// A loopback port nothing listens on, outside the ephemeral range.
pub fn free_port() -> u16 {
    let start = std::process::id() % COUNT;
    for _ in 0..COUNT {
        let n = TAKEN.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + n) % COUNT;
        let port = u16::try_from(port).expect("the range is below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}–{}", FIRST + COUNT - 1);
}
