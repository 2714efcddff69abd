//! A TCP relay between Turnstile and a store that the test can cut: [`Proxy::down`] closes
//! every relayed connection and closes each new one at once (the store looks unreachable),
//! [`Proxy::up`] relays again. It runs on the test's runtime and stops with it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A relay to one upstream address.
pub struct Proxy {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A relay on a free loopback port to `upstream` (`host:port`), passing.
    pub async fn start(upstream: &str) -> Proxy {
        let upstream: SocketAddr = upstream.parse().expect("an upstream address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let down = Arc::new(AtomicBool::new(false));
        let (cut, _) = watch::channel(0u64);
        let task = tokio::spawn(accept(listener, upstream, Arc::clone(&down), cut.clone()));
        Proxy {
            addr,
            down,
            cut,
            task,
        }
    }

    /// The address to give Turnstile.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Cuts every relayed connection and refuses new ones until [`Proxy::up`].
    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.send_modify(|generation| *generation += 1);
    }

    /// Relays again.
    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    down: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        if down.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let mut cut = cut.subscribe();
        tokio::spawn(async move {
            let Ok(mut server) = TcpStream::connect(upstream).await else {
                return;
            };
            let mut client = client;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = cut.changed() => {}
            }
        });
    }
}
