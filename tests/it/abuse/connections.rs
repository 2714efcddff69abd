//! Hostile connections: ones that never send the HTTP/2 preface are closed and every open
//! connection is counted on a task of its own that ends with it; a connection beyond the cap is
//! served and the longest idle closed; rapid resets and thousands of idle connections leave honest calls answered.

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use crate::process::{Process, RULES, metric, rules_root};
use crate::support::until;

use super::{h2_client, honest_latencies};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_a_preface_are_closed_and_connections_are_counted() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[("GRPC_HANDSHAKE_TIMEOUT", "300ms")]);
    let tasks = || metric(&p.metrics(), "turnstile_runtime_alive_tasks");
    let open = || metric(&p.metrics(), "turnstile_grpc_connections_open");
    let idle_tasks = idle_task_count(&p).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let honest = tokio::spawn(honest_latencies(p.grpc, std::sync::Arc::clone(&stop)));
    // A slowloris: connects and sends nothing.
    let mut silent = TcpStream::connect(("127.0.0.1", p.grpc)).expect("connect");
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(h2_client(p.grpc).await);
    }
    // The accept loop registers connections as they come: at least the five and the honest
    // client's (the silent one too, until its 300 ms handshake timeout closes it).
    until(Duration::from_secs(5), "open connections counted", || {
        open().unwrap_or(0) >= 6
    })
    .await;
    // Each runs on a task of its own once the gRPC server has taken it from the accept loop (a
    // connection is counted open before that, so the count of tasks may trail it for a moment).
    until(
        Duration::from_secs(5),
        &format!("every open connection runs on a task of its own ({idle_tasks} idle)"),
        || tasks().unwrap_or(0) >= idle_tasks + 6,
    )
    .await;
    // The server speaks first (its SETTINGS), then closes the connection that never sent the
    // preface: the read ends with end-of-stream, not with our 10 s read timeout.
    let mut seen = Vec::new();
    let end = silent.read_to_end(&mut seen);
    assert!(
        end.is_ok(),
        "the server closed the silent connection (got {} bytes, then {end:?})",
        seen.len()
    );
    drop(clients);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (calls, median, slowest) = honest.await.expect("honest client");
    eprintln!(
        "during the connection flood: {calls} honest calls, median {median:?}, slowest {slowest:?}"
    );
    assert!(calls > 0, "the honest client made no call");
    // Once the honest client is gone too, at most the silent one is left counted.
    until(
        Duration::from_secs(5),
        "closed connections are uncounted",
        || open().unwrap_or(u64::MAX) <= 1,
    )
    .await;
    // Every connection's tasks end with it: the runtime is back to the tasks it had idle.
    drop(silent);
    // Polled every 100 ms, so that scrapes do not keep their own tasks alive.
    crate::support::wait::until_polling_every(
        Duration::from_millis(100),
        Duration::from_secs(10),
        &format!("connection tasks end ({idle_tasks} alive when idle)"),
        || tasks().unwrap_or(u64::MAX) <= idle_tasks,
    )
    .await;
}

/// The idle task count, once the gRPC server has served a connection (so every background task
/// is running) and that connection has closed; the smallest of a few scrapes, since a scrape's
/// own HTTP connection task can outlive its answer for a moment.
async fn idle_task_count(p: &Process) -> u64 {
    let mut warm = p.client().await;
    let call = crate::support::req1("ops", &[("user", "warm-up")]);
    assert!(warm.should_rate_limit(call).await.is_ok());
    drop(warm);
    until(
        Duration::from_secs(5),
        "the warm-up connection closes",
        || metric(&p.metrics(), "turnstile_grpc_connections_open") == Some(0),
    )
    .await;
    let mut idle_tasks = u64::MAX;
    for _ in 0..5 {
        let now = metric(&p.metrics(), "turnstile_runtime_alive_tasks");
        idle_tasks = idle_tasks.min(now.expect("the runtime's task gauge is exposed"));
        tokio::time::sleep(Duration::from_millis(50)).await; // pacing of the scrapes
    }
    idle_tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_beyond_the_cap_is_served_and_the_longest_idle_is_closed() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[("GRPC_MAX_CONNECTIONS", "2")]);
    let mut first = p.client().await;
    let mut second = p.client().await;
    let call = crate::support::req1("ops", &[("user", "cap")]);
    assert!(first.should_rate_limit(call.clone()).await.is_ok());
    assert!(second.should_rate_limit(call.clone()).await.is_ok());
    // A third connection is served at once (never left in the listen backlog): the peer's
    // longest-idle connection, the first, is closed to make room.
    let mut third = p.client().await;
    let served = tokio::time::timeout(Duration::from_secs(5), third.should_rate_limit(call))
        .await
        .expect("the third connection's call was answered");
    assert!(served.is_ok(), "{served:?}");
    let text = p.metrics();
    assert_eq!(
        metric(
            &text,
            "turnstile_grpc_connections_closed_total{reason=\"make_room\""
        ),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_resets_and_thousands_of_idle_connections_leave_honest_calls_answered() {
    let root = rules_root(RULES);
    // 2,000 idle connections from one address: its own cap raised past them.
    let p = Process::start(&root, &[("GRPC_MAX_CONNECTIONS_PER_PEER", "5000")]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let honest = tokio::spawn(honest_latencies(p.grpc, std::sync::Arc::clone(&stop)));

    // Rapid reset: 20,000 streams opened and cancelled at once (RST_STREAM) on one connection.
    let mut attacker = h2_client(p.grpc).await;
    let mut reset = 0;
    for _ in 0..20_000 {
        match attacker.ready().await {
            Ok(ready) => attacker = ready,
            Err(_) => break, // the server may close an abusive connection: that is fine
        }
        let request = http::Request::post(
            "http://localhost/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        )
        .header("content-type", "application/grpc")
        .body(())
        .expect("request");
        // Opened and dropped at once: the client sends RST_STREAM.
        match attacker.send_request(request, false) {
            Ok(stream) => drop(stream),
            Err(_) => break, // the server closed the abusive connection: that is fine
        }
        reset += 1;
    }
    // 2,000 idle connections that completed the HTTP/2 handshake.
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        idle.push(h2_client(p.grpc).await);
    }
    // The server accepts them as they come: wait until it holds all of them.
    until(
        Duration::from_secs(10),
        "2,000 idle connections held open",
        || metric(&p.metrics(), "turnstile_grpc_connections_open").unwrap_or(0) >= 2_000,
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (calls, median, slowest) = honest.await.expect("honest client");
    eprintln!(
        "during {reset} resets and 2,000 idle connections: {calls} honest calls, median {median:?}, slowest {slowest:?}"
    );
    assert!(calls > 0, "the honest client made no call");
}
