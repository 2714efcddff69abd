//! `/json` beside gRPC (issue 52): the HTTP API's requests count in their peer's requests open,
//! so a flood of them from one peer waits at that peer's gate (parked, answered in turn, never
//! refused for it) while another peer's gRPC calls are answered. Distinct peers are distinct
//! loopback addresses.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::peers::a_well_behaved_peer_is_answered;
use crate::backends::Backend;
use crate::process::{Process, RULES, metric, rules_root};
use crate::support::until;

const HOG: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// One `POST /json` from `local` to the HTTP API on `port`: its status.
async fn json_from(local: IpAddr, port: u16, user: &str) -> std::io::Result<u16> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    let mut stream = socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await?;
    let body = format!(
        r#"{{"domain":"ops","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}]}}]}}"#
    );
    let request = format!(
        "POST /json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let status = String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok());
    status.ok_or_else(|| std::io::Error::other("no HTTP status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_flood_waits_at_its_peers_gate_while_a_grpc_peer_is_answered() {
    // On memcached, so that the flood's requests stay open over a round trip each (on memory
    // one is answered within one poll and few are open at once).
    let Some(store) = Backend::Memcached.env() else {
        return;
    };
    let root = rules_root(RULES);
    // The door's budget by count at its least, 16: the flooding peer's part is 32 requests
    // open, far below its 128 callers, so many of them wait at its gate.
    let mut env = store.pairs();
    env.push(("GRPC_FAIR_REQUESTS_OPEN", "16"));
    let p = Process::start(&root, &env);
    let (stop, answered) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut callers = Vec::new();
    for c in 0..128 {
        let (stop, answered, port) = (Arc::clone(&stop), Arc::clone(&answered), p.http);
        callers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let status = json_from(HOG, port, &format!("flood-{c}-{n}")).await;
                let status = status.expect("the flood's /json answered");
                assert!(
                    status == 200 || status == 429,
                    "held in turn, not refused: {status}"
                );
                answered.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    until(Duration::from_secs(10), "the /json flood under way", || {
        answered.load(Ordering::Relaxed) >= 500
    })
    .await;
    a_well_behaved_peer_is_answered(p.grpc, "ops").await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.expect("flood caller");
    }
    let paused = metric(&p.metrics(), "turnstile_peer_reads_paused_total").unwrap_or(0);
    assert!(
        paused > 0,
        "the flood's /json requests waited at its gate: {paused}"
    );
}
