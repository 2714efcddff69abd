//! One client never takes the service from the others (issue 39): connections that only PING
//! are closed (idle means no call; PINGs faster than the policy get GOAWAY
//! `ENHANCE_YOUR_CALM`), a new peer gets in when a PING-only hog holds every connection, and a
//! peer over its part of the decisions in flight is refused while a peer within its part is
//! answered. Distinct peers are distinct loopback addresses (127.0.0.2, 127.0.0.3).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::{Process, RULES, metric, rules_root};
use crate::support::until;

const HOG: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const NEWCOMER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// A TCP connection to `port` on 127.0.0.1 from `local`.
async fn tcp_from(local: IpAddr, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

/// A gRPC client whose one connection comes from `local`.
pub(super) async fn client_from(
    local: IpAddr,
    port: u16,
) -> RateLimitServiceClient<tonic::transport::Channel> {
    client_dialling(local, port, Arc::default()).await
}

/// [`client_from`], counting in `dials` each time it connects (again).
async fn client_dialling(
    local: IpAddr,
    port: u16,
    dials: Arc<AtomicU64>,
) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::new(channel_dialling(local, port, dials).await)
}

/// A well-behaved peer from 127.0.0.3: 100 calls in `domain`, one at a time on one
/// connection, every one answered OK.
pub(super) async fn a_well_behaved_peer_is_answered(port: u16, domain: &str) {
    let mut honest = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)), port).await;
    for i in 0..100 {
        let call = crate::support::req1(domain, &[("user", &format!("honest-{i}"))]);
        let answer = honest.should_rate_limit(call).await;
        assert!(
            answer.is_ok(),
            "the well-behaved peer's call {i}: {answer:?}"
        );
    }
}

/// A channel whose one connection comes from `local` (for any gRPC service).
pub(super) async fn channel_from(local: IpAddr, port: u16) -> tonic::transport::Channel {
    channel_dialling(local, port, Arc::default()).await
}

async fn channel_dialling(
    local: IpAddr,
    port: u16,
    dials: Arc<AtomicU64>,
) -> tonic::transport::Channel {
    let connector = tower::service_fn(move |_: http::Uri| {
        dials.fetch_add(1, Ordering::Relaxed);
        async move {
            tcp_from(local, port)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }
    });
    tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("url")
        .connect_with_connector(connector)
        .await
        .expect("connect")
}

/// An HTTP/2 connection from `local` that PINGs every `every`, never calls, and ends with how
/// the server closed it (`None`: it was not closed within `limit`).
async fn pinger(
    local: IpAddr,
    port: u16,
    every: Duration,
    limit: Duration,
) -> Option<Result<(), h2::Error>> {
    let tcp = tcp_from(local, port).await.expect("connect");
    let (_client, mut connection) = h2::client::handshake(tcp).await.expect("h2");
    let mut ping_pong = connection.ping_pong().expect("ping_pong");
    let mut ended = Box::pin(tokio::time::timeout(limit, connection));
    loop {
        tokio::select! {
            end = &mut ended => return end.ok(),
            _ = ping_pong.ping(h2::Ping::opaque()) => tokio::time::sleep(every).await, // pacing
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_without_calls_are_answered_with_goaway_enhance_your_calm() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[("GRPC_MIN_PING_INTERVAL", "10s")]);
    let end = pinger(
        HOG,
        p.grpc,
        Duration::from_millis(20),
        Duration::from_secs(10),
    )
    .await;
    let error = end
        .expect("the server closed the connection")
        .expect_err("with a GOAWAY error");
    assert_eq!(
        error.reason(),
        Some(h2::Reason::ENHANCE_YOUR_CALM),
        "{error}"
    );
    assert_eq!(
        metric(
            &p.metrics(),
            "turnstile_grpc_connections_closed_total{reason=\"too_many_pings\""
        ),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_do_not_keep_a_connection_open_past_the_idle_timeout() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("GRPC_IDLE_TIMEOUT", "500ms"),
            ("GRPC_MIN_PING_INTERVAL", "0s"),
        ],
    );
    let end = pinger(
        HOG,
        p.grpc,
        Duration::from_millis(50),
        Duration::from_secs(10),
    )
    .await;
    // Closed with GOAWAY NO_ERROR: h2 reports a clean end of the connection.
    let end = end.expect("the server closed the PING-only connection");
    assert!(end.is_ok(), "closed without an error code: {end:?}");
    assert_eq!(
        metric(
            &p.metrics(),
            "turnstile_grpc_connections_closed_total{reason=\"idle\""
        ),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_only_hog_holding_every_connection_does_not_lock_out_a_new_peer() {
    let root = rules_root(RULES);
    // PINGs are allowed at any pace and connections stay open for a minute without calls:
    // only the cap's rule can let the newcomer in.
    let p = Process::start(
        &root,
        &[
            ("GRPC_MAX_CONNECTIONS", "16"),
            ("GRPC_IDLE_TIMEOUT", "60s"),
            ("GRPC_MIN_PING_INTERVAL", "0s"),
        ],
    );
    let mut hogs = Vec::new();
    for _ in 0..16 {
        hogs.push(tokio::spawn(pinger(
            HOG,
            p.grpc,
            Duration::from_millis(50),
            Duration::from_secs(60),
        )));
    }
    until(
        Duration::from_secs(10),
        "the hog holds every connection",
        || metric(&p.metrics(), "turnstile_grpc_connections_open").unwrap_or(0) >= 16,
    )
    .await;
    let mut newcomer = client_from(NEWCOMER, p.grpc).await;
    for i in 0..5 {
        let call = crate::support::req1("ops", &[("user", &format!("newcomer-{i}"))]);
        // A guard against a hang, not a measure: a locked-out call would never be answered.
        let answer = tokio::time::timeout(Duration::from_secs(5), newcomer.should_rate_limit(call))
            .await
            .expect("the newcomer's call was answered");
        assert!(answer.is_ok(), "call {i}: {answer:?}");
    }
    let closed = metric(
        &p.metrics(),
        "turnstile_grpc_connections_closed_total{reason=\"make_room\"",
    );
    assert!(
        closed >= Some(1),
        "one of the hog's connections made room: {closed:?}"
    );
    for hog in hogs {
        hog.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_over_its_part_is_refused_while_a_peer_within_it_is_answered() {
    let root = rules_root(RULES);
    // A limit of 4 decisions in flight that does not move.
    let p = Process::start(
        &root,
        &[
            ("GRPC_ADAPTIVE_CONCURRENCY", "true"),
            ("GRPC_ADAPTIVE_CONCURRENCY_MIN", "4"),
            ("GRPC_ADAPTIVE_CONCURRENCY_MAX", "4"),
        ],
    );
    let refused = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flood = Vec::new();
    // The flood: 4 connections from one peer, 64 callers each, calling without pause.
    for c in 0..4 {
        let client = client_from(HOG, p.grpc).await;
        for i in 0..64 {
            let (mut client, refused, stop) =
                (client.clone(), Arc::clone(&refused), Arc::clone(&stop));
            flood.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let call =
                        crate::support::req1("ops", &[("user", &format!("flood-{c}-{i}-{n}"))]);
                    n += 1;
                    if let Err(status) = client.should_rate_limit(call).await {
                        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                        if status.message().contains("over its part") {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
    }
    // The well-behaved peer: one call at a time, every one answered.
    let mut honest = client_from(NEWCOMER, p.grpc).await;
    for i in 0..200 {
        let call = crate::support::req1("ops", &[("user", &format!("honest-{i}"))]);
        let answer = honest.should_rate_limit(call).await;
        assert!(
            answer.is_ok(),
            "the peer within its part, call {i}: {answer:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        task.await.expect("flood caller");
    }
    let text = p.metrics();
    let shed = metric(
        &text,
        "turnstile_requests_shed_total{reason=\"peer_over_part\"",
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the flooding peer was refused over its part"
    );
    assert_eq!(
        shed,
        Some(refused.load(Ordering::Relaxed)),
        "every refusal counted by reason"
    );
}

/// At the cap in all, 600 connections from distinct addresses that never make a call close
/// each other to make room, never the honest peer's idle connection that made one (issue 51:
/// it was closed for room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_call_make_room_before_an_honest_idle_one() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[("GRPC_MAX_CONNECTIONS", "20"), ("GRPC_IDLE_TIMEOUT", "60s")],
    );
    let port = p.grpc;
    let dials = Arc::new(AtomicU64::new(0));
    let mut honest = client_dialling(NEWCOMER, port, Arc::clone(&dials)).await;
    let call = || crate::support::req1("ops", &[("user", "honest-idle")]);
    assert!(honest.should_rate_limit(call()).await.is_ok());
    let mut silent = Vec::new();
    for i in 0..600u32 {
        let from = IpAddr::V4(Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8));
        let tcp = tcp_from(from, port).await.expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("h2");
        silent.push((client, tokio::spawn(connection)));
    }
    // The server takes connections as they come: the count is awaited, not read at once. Not
    // all 600: under load some arrive while 20 handshakes already run and are closed at once.
    until(
        Duration::from_secs(10),
        "the silent connections made room for each other (at least 100 closed)",
        || {
            let series = "turnstile_grpc_connections_closed_total{reason=\"make_room\"";
            metric(&p.metrics(), series) >= Some(100)
        },
    )
    .await;
    assert!(honest.should_rate_limit(call()).await.is_ok());
    assert_eq!(
        dials.load(Ordering::Relaxed),
        1,
        "the honest peer's connection was kept (it never had to dial again)"
    );
}

/// One ShouldRateLimit request in gRPC's framing (the 5-byte prefix, then the message).
fn grpc_request(user: &str) -> bytes::Bytes {
    use prost::Message;
    let message = crate::support::req1("ops", &[("user", user)]).encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    framed.extend_from_slice(&message);
    bytes::Bytes::from(framed)
}

/// A peer opens 100 calls with a stream window of 0 (its answers cannot be sent), over its part
/// of 32 open: it is held at the door. Then it grants window (SETTINGS, a connection
/// WINDOW_UPDATE), behind its held requests: the control frames still reach the server, every
/// call is answered, and a new connection from the same address is served (issue 51: the held
/// connection was not read, so the window was never seen and the peer was locked out for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_held_at_the_door_is_answered_once_it_grants_window() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[("GRPC_FAIR_REQUESTS_OPEN", "32")]);
    let tcp = tcp_from(HOG, p.grpc).await.expect("connect");
    let (client, mut connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("h2");
    let (grant, granted) = tokio::sync::oneshot::channel::<()>();
    let driven = tokio::spawn(async move {
        let mut granted = std::pin::pin!(granted);
        let mut grant_seen = false;
        loop {
            tokio::select! {
                end = &mut connection => return end,
                _ = &mut granted, if !grant_seen => {
                    grant_seen = true;
                    connection.set_initial_window_size(1 << 20).expect("settings");
                    connection.set_target_window_size(1 << 20);
                }
            }
        }
    });
    let mut client = client.ready().await.expect("ready");
    let mut answers = Vec::new();
    for i in 0..100 {
        client = client.ready().await.expect("ready");
        let (answer, mut body) = super::open_stream(&mut client);
        body.send_data(grpc_request(&format!("held-{i}")), true)
            .expect("body");
        answers.push(answer);
    }
    until(
        Duration::from_secs(10),
        "the peer is held at the door",
        || metric(&p.metrics(), "turnstile_peer_reads_paused_total").unwrap_or(0) > 0,
    )
    .await;
    grant.send(()).expect("the connection task runs");
    let mut answered = 0;
    for answer in answers {
        // A guard against a hang, not a measure: a locked-out call is never answered.
        let whole = tokio::time::timeout(Duration::from_secs(10), async move {
            let response = answer.await.expect("response");
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.expect("data");
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            body.trailers().await.expect("trailers")
        })
        .await
        .expect("answered once the window was granted");
        let status = whole.as_ref().and_then(|t| t.get("grpc-status"));
        assert_eq!(status.map(|s| s.as_bytes()), Some(&b"0"[..]), "{whole:?}");
        answered += 1;
    }
    assert_eq!(answered, 100);
    drop(client);
    driven.abort();
    let mut again = client_from(HOG, p.grpc).await;
    let call = crate::support::req1("ops", &[("user", "after")]);
    let served = tokio::time::timeout(Duration::from_secs(5), again.should_rate_limit(call))
        .await
        .expect("a new connection from the same address is served");
    assert!(served.is_ok(), "{served:?}");
}
