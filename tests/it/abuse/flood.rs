//! A flood of streams from one peer beside well-behaved peers (issues 39 and 52): the flood is
//! held at the door (its connections stop being read) and every call of the others is
//! answered OK, with the door's budget set by count and with the default budget in time.
//! Distinct peers are distinct loopback addresses.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::peers::{a_well_behaved_peer_is_answered, client_from};
use crate::backends::Backend;
use crate::process::{Process, RULES, metric, rules_root};
use crate::support::until;

const HOG: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A flood from `HOG`: `connections` connections of `streams` callers each, calling without
/// pause until stopped; every answer is OK or `RESOURCE_EXHAUSTED` (held or shed, never failed).
struct Flood {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    callers: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    async fn start(port: u16, connections: usize, streams: usize) -> Flood {
        let (stop, answered) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let mut callers = Vec::new();
        for c in 0..connections {
            let client = client_from(HOG, port).await;
            for i in 0..streams {
                let (mut client, stop, answered) =
                    (client.clone(), Arc::clone(&stop), Arc::clone(&answered));
                callers.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let user = format!("flood-{c}-{i}-{n}");
                        n += 1;
                        let call = crate::support::req1("ops", &[("user", &user)]);
                        match client.should_rate_limit(call).await {
                            Ok(_) => {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(status) => {
                                assert_eq!(
                                    status.code(),
                                    tonic::Code::ResourceExhausted,
                                    "{status:?}"
                                );
                            }
                        }
                    }
                }));
            }
        }
        let flood = Flood {
            stop,
            answered,
            callers,
        };
        until(Duration::from_secs(10), "the flood under way", || {
            flood.answered.load(Ordering::Relaxed) >= 1_000
        })
        .await;
        flood
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for caller in self.callers {
            caller.await.expect("flood caller");
        }
    }
}

/// The flood was held at the door (its excess waited in the kernel) or shed.
fn assert_held_or_shed(p: &Process) {
    let metrics = p.metrics();
    let paused = metric(&metrics, "turnstile_peer_reads_paused_total").unwrap_or(0);
    let shed: f64 = (metrics.lines())
        .filter(|l| l.starts_with("turnstile_requests_shed_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        paused > 0 || shed > 0.0,
        "the flooding peer was held back or shed: paused {paused}, shed {shed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_streams_is_held_back_while_a_well_behaved_peer_is_answered() {
    let root = rules_root(RULES);
    // The door's budget by count, far below the flood's streams, so it is held for certain.
    let p = Process::start(&root, &[("GRPC_FAIR_REQUESTS_OPEN", "64")]);
    let flood = Flood::start(p.grpc, 8, 128).await;
    a_well_behaved_peer_is_answered(p.grpc, "ops").await;
    flood.stop().await;
    assert_held_or_shed(&p);
}

/// The default door (its budget steered to `GRPC_FAIR_QUEUE_TARGET` on the runtime's queue and
/// the store's): ten well-behaved peers, one connection each, calling at once beside a flood of
/// 1,024 streams, are all answered OK. (On memcached, run in the full suite once, the flood's
/// calls met memcached closing the connection: `UNAVAILABLE`, not yet explained, issue 52.)
async fn ten_well_behaved_peers_beside_a_flood(backend: Backend) {
    let Some(store) = backend.env() else { return };
    let root = rules_root(RULES);
    let p = Process::start(&root, &store.pairs());
    let flood = Flood::start(p.grpc, 8, 128).await;
    let mut peers = Vec::new();
    for peer in 0..10u8 {
        let mut client = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 30 + peer)), p.grpc).await;
        peers.push(tokio::spawn(async move {
            for i in 0..50 {
                let user = format!("honest-{peer}-{i}");
                let answer = client
                    .should_rate_limit(crate::support::req1("ops", &[("user", &user)]))
                    .await;
                assert!(answer.is_ok(), "peer {peer}'s call {i}: {answer:?}");
            }
        }));
    }
    for peer in peers {
        peer.await.expect("well-behaved peer");
    }
    flood.stop().await;
    assert_held_or_shed(&p);
    // The door reads both queues and says so.
    let metrics = p.metrics();
    for gauge in [
        "turnstile_door_queue_seconds",
        "turnstile_door_store_queue_seconds",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(gauge)),
            "{gauge} in /metrics"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_well_behaved_peers_beside_a_flood_are_all_answered_on_memory() {
    ten_well_behaved_peers_beside_a_flood(Backend::Memory).await;
}

/// Issue 54: one peer's 250 connections of 8 callers each, calling at once, against a part
/// of 16 requests open (the least `GRPC_FAIR_REQUESTS_OPEN` allows, the adaptive limit off so
/// that it is the budget): one read of a connection brings up to 8 requests, so most
/// connections wait at the gate in turn; every call is answered OK (no connection is left in
/// the queue), and once the clients close, every connection is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_many_connections_take_turns_at_the_gate_and_all_are_answered() {
    const CONNECTIONS: usize = 250;
    const CALLERS: usize = 8;
    let root = rules_root(RULES);
    let env = [
        ("GRPC_FAIR_REQUESTS_OPEN", "16"),
        ("GRPC_ADAPTIVE_CONCURRENCY", "false"),
    ];
    let p = Process::start(&root, &env);
    let start = Arc::new(tokio::sync::Barrier::new(CONNECTIONS * CALLERS));
    let mut callers = Vec::new();
    for c in 0..CONNECTIONS {
        let client = client_from(HOG, p.grpc).await;
        for k in 0..CALLERS {
            let (mut client, start) = (client.clone(), Arc::clone(&start));
            callers.push(tokio::spawn(async move {
                start.wait().await;
                for i in 0..5 {
                    let user = format!("mesh-{c}-{k}-{i}");
                    let call = crate::support::req1("ops", &[("user", &user)]);
                    // A connection left in the queue would never be answered: a deadline.
                    let answer = tokio::time::timeout(
                        Duration::from_secs(20),
                        client.should_rate_limit(call),
                    )
                    .await;
                    let answer = answer.expect("answered, not left at the gate");
                    assert!(answer.is_ok(), "connection {c}'s call {k}.{i}: {answer:?}");
                }
            }));
        }
    }
    for caller in callers {
        caller.await.expect("caller");
    }
    let paused = metric(&p.metrics(), "turnstile_peer_reads_paused_total").unwrap_or(0);
    assert!(paused > 0, "the gate held connections back: {paused}");
    until(
        Duration::from_secs(10),
        "every connection given back",
        || metric(&p.metrics(), "turnstile_grpc_connections_open") == Some(0),
    )
    .await;
}
