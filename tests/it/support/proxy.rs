//! A TCP relay between Turnstile and a store that the test can cut: [`Proxy::down`] closes
//! every relayed connection and closes each new one at once (the store looks unreachable),
//! [`Proxy::up`] relays again, and [`Proxy::freeze_open`] stops the connections open now from
//! relaying while they stay open (a store that hangs one connection and answers new ones).
//! It runs on the test's runtime and stops with it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the relayed connections are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// Go on relaying.
    Relay,
    /// Close.
    Cut,
    /// Stop relaying and stay open until told again.
    Freeze,
}

/// A relay to one upstream address.
pub struct Proxy {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    told: watch::Sender<Told>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A relay on a free loopback port to `upstream` (`host:port`), passing.
    pub async fn start(upstream: &str) -> Proxy {
        let upstream: SocketAddr = upstream.parse().expect("an upstream address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let down = Arc::new(AtomicBool::new(false));
        let (told, _) = watch::channel(Told::Relay);
        let accepted = Arc::new(AtomicU64::new(0));
        let relay = Relay {
            upstream,
            down: Arc::clone(&down),
            told: told.clone(),
            accepted: Arc::clone(&accepted),
        };
        let task = tokio::spawn(accept(listener, relay));
        Proxy {
            addr,
            down,
            told,
            accepted,
            task,
        }
    }

    /// The address to give Turnstile.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// How many connections it has relayed.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Cuts every relayed connection and refuses new ones until [`Proxy::up`].
    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.told.send_replace(Told::Cut);
    }

    /// Relays again; connections frozen by [`Proxy::freeze_open`] are closed.
    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
        self.told.send_replace(Told::Relay);
    }

    /// The connections relayed now stop relaying and stay open (nothing read, nothing
    /// answered) until [`Proxy::up`]; new connections are relayed as before.
    pub fn freeze_open(&self) {
        self.told.send_replace(Told::Freeze);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.told.send_replace(Told::Cut);
    }
}

/// What the accept loop relays to, and how.
struct Relay {
    upstream: SocketAddr,
    down: Arc<AtomicBool>,
    told: watch::Sender<Told>,
    accepted: Arc<AtomicU64>,
}

async fn accept(listener: TcpListener, relay: Relay) {
    while let Ok((client, _)) = listener.accept().await {
        if relay.down.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        relay.accepted.fetch_add(1, Ordering::SeqCst);
        let mut told = relay.told.subscribe();
        told.mark_unchanged();
        tokio::spawn(relayed(client, relay.upstream, told));
    }
}

/// One connection relayed until it ends, or until told to close or freeze.
async fn relayed(mut client: TcpStream, upstream: SocketAddr, mut told: watch::Receiver<Told>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    {
        let mut copy = std::pin::pin!(tokio::io::copy_bidirectional(&mut client, &mut server));
        loop {
            tokio::select! {
                _ = &mut copy => return,
                changed = told.changed() => match (changed, *told.borrow_and_update()) {
                    (Err(_), _) | (_, Told::Cut) => return,
                    (_, Told::Relay) => continue,
                    (_, Told::Freeze) => break,
                },
            }
        }
    }
    // Frozen: both sockets held open, nothing relayed, until told again.
    let _ = told.changed().await;
}
