//! The faulty wire of the fault test: memcached in a network namespace of its own behind a veth
//! pair (iptables there drops packets), and a relay on the host that delays every chunk.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::lifeline::Supervised;
use crate::support::missing;

const HOST_IP: &str = "169.254.213.1";
const MEMCACHED_IP: &str = "169.254.213.2";

fn run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A namespace with memcached behind a veth pair; torn down on drop.
pub(super) struct Netns {
    name: String,
    host_dev: String,
    memcached: Option<Supervised>,
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(mut child) = self.memcached.take() {
            child.stop();
        }
        run(&["ip", "link", "del", &self.host_dev]);
        run(&["ip", "netns", "del", &self.name]);
    }
}

impl Netns {
    pub(super) fn create() -> Option<Netns> {
        let id = std::process::id() % 100_000;
        let ns = Netns {
            name: format!("ts-fault-{id}"),
            host_dev: format!("tsh{id}"),
            memcached: None,
        };
        let ns_dev = format!("tsn{id}");
        let steps: [&[&str]; 7] = [
            &["ip", "netns", "add", &ns.name],
            &[
                "ip",
                "link",
                "add",
                &ns.host_dev,
                "type",
                "veth",
                "peer",
                "name",
                &ns_dev,
            ],
            &["ip", "link", "set", &ns_dev, "netns", &ns.name],
            &[
                "ip",
                "addr",
                "add",
                &format!("{HOST_IP}/30"),
                "dev",
                &ns.host_dev,
            ],
            &["ip", "link", "set", &ns.host_dev, "up"],
            &[
                "ip",
                "netns",
                "exec",
                &ns.name,
                "ip",
                "addr",
                "add",
                &format!("{MEMCACHED_IP}/30"),
                "dev",
                &ns_dev,
            ],
            &[
                "ip", "netns", "exec", &ns.name, "ip", "link", "set", &ns_dev, "up",
            ],
        ];
        for step in steps {
            if !run(step) {
                missing(&format!(
                    "network namespaces (as root, `ip netns`; {step:?} failed)"
                ));
                return None;
            }
        }
        Some(ns)
    }

    pub(super) fn start_memcached(&mut self) {
        let mut command = Command::new("ip");
        command.args([
            "netns",
            "exec",
            &self.name,
            "memcached",
            "-l",
            MEMCACHED_IP,
            "-p",
            "11211",
            "-U",
            "0",
            "-u",
            "root",
        ]);
        // `ip netns exec` becomes memcached: the signal reaches memcached itself.
        let child = Supervised::spawn(&mut command, "KILL").expect("memcached in the namespace");
        self.memcached = Some(child);
        crate::support::wait::blocking(
            Duration::from_secs(10),
            "memcached started in the namespace",
            || std::net::TcpStream::connect((MEMCACHED_IP, 11211)).is_ok(),
        );
    }

    /// Replaces the packet filter of the namespace: drop incoming packets with `probability`
    /// (1.0 is a partition, `None` heals).
    pub(super) fn drop_packets(&self, probability: Option<&str>) {
        let ipt = |args: &[&str]| {
            let mut cmd = vec!["ip", "netns", "exec", &self.name, "iptables"];
            cmd.extend_from_slice(args);
            run(&cmd)
        };
        ipt(&["-F", "INPUT"]);
        if let Some(p) = probability {
            let ok = if p == "1" {
                ipt(&["-A", "INPUT", "-j", "DROP"])
            } else {
                ipt(&[
                    "-A",
                    "INPUT",
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    p,
                    "-j",
                    "DROP",
                ])
            };
            assert!(ok, "iptables in the namespace (drop {p})");
        }
    }
}

/// A TCP relay on the host's loopback to memcached in the namespace that holds every chunk for
/// `delay` (each way), keeping the order and the pipelining of what passes.
pub(super) async fn delaying_relay(
    delay: Arc<std::sync::atomic::AtomicU64>,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        delay: Arc<std::sync::atomic::AtomicU64>,
    ) {
        let (tx, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        tokio::spawn(async move {
            while let Some((due, chunk)) = rx.recv().await {
                tokio::time::sleep_until(due).await;
                if to.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                return;
            }
            let ms = delay.load(std::sync::atomic::Ordering::Relaxed);
            let due = tokio::time::Instant::now() + Duration::from_millis(ms);
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    }
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect((MEMCACHED_IP, 11211)).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, Arc::clone(&delay)));
            tokio::spawn(pump(sr, cw, Arc::clone(&delay)));
        }
    });
    addr
}
