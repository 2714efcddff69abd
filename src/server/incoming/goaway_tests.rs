//! A connection closed for idleness while hyper is half-way through a response's header block
//! of more than 16 KiB (HEADERS, then CONTINUATION frames): a real tonic server on these
//! connections, a real HTTP/2 client (the `h2` crate), and a relay between them that stops
//! reading the server's bytes inside the block until the idle close has begun. The client must
//! get every header intact, then the GOAWAY: one written between HEADERS and its CONTINUATION
//! is a connection error for it (RFC 9113 section 4.3).
//!
//! Must not touch: anything outside this test.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::metrics::{OpenConnections, PeerReadings};
use crate::peers::{CloseReason, ConnectionLimits, Peers};
use crate::settings::GrpcLimits;

/// Headers in the response, each of `VALUE_LEN` bytes: about 200 KiB, twelve frames' worth.
const HEADERS: usize = 200;
const VALUE_LEN: usize = 1_000;
/// Server bytes the relay passes before it stops reading: past the first HEADERS frame's
/// start, far short of the block's end.
const PASS_FIRST: usize = 24 * 1024;

fn value(i: usize) -> String {
    // Distinct, hard-to-compress text, so HPACK cannot shrink the block below a frame.
    (0..VALUE_LEN)
        .map(|j| char::from(b'a' + u8::try_from((i * 31 + j * 7 + j / 13) % 26).unwrap_or(0)))
        .collect()
}

/// Answers every call with `HEADERS` big headers and `grpc-status: 0`, trailers-only.
#[derive(Clone)]
struct BigHeaders;

impl tonic::server::NamedService for BigHeaders {
    const NAME: &'static str = "test.BigHeaders";
}

impl tower::Service<http::Request<tonic::body::Body>> for BigHeaders {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
        let mut response = http::Response::new(tonic::body::Body::empty());
        let headers = response.headers_mut();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", http::HeaderValue::from_static("0"));
        for i in 0..HEADERS {
            let name = http::HeaderName::try_from(format!("x-big-{i}")).expect("name");
            headers.insert(name, http::HeaderValue::try_from(value(i)).expect("value"));
        }
        std::future::ready(Ok(response))
    }
}

/// The server on these connections (small send buffers, so a stalled reader stalls hyper),
/// closing a connection idle for 200 ms; its address and the readings of its closes.
async fn server() -> (std::net::SocketAddr, Arc<PeerReadings>) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_send_buffer_size(4_096).expect("send buffer");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = socket.listen(16).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let limits = GrpcLimits {
        idle_timeout: Duration::from_millis(200),
        ..GrpcLimits::default()
    };
    let readings = Arc::new(PeerReadings::default());
    let connections = ConnectionLimits {
        max: 10,
        per_peer: 10,
    };
    let peers = Peers::new(connections, 2, Arc::clone(&readings));
    let open = Arc::new(OpenConnections::default());
    let plain = |stream| std::future::ready(Some(stream));
    let incoming = super::accept(listener, limits, None, open, peers, plain);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(BigHeaders)
            .serve_with_incoming(incoming),
    );
    (addr, readings)
}

/// A relay to `server` that passes the client's bytes, and the server's first `PASS_FIRST`
/// then none until `resume` is notified, then the rest; its address.
async fn relay(
    server: std::net::SocketAddr,
    resume: Arc<tokio::sync::Notify>,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let front = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.expect("accept");
        let socket = TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4_096).expect("receive buffer");
        let upstream = socket.connect(server).await.expect("connect");
        let (mut client_read, mut client_write) = client.into_split();
        let (mut up_read, mut up_write) = upstream.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut client_read, &mut up_write).await });
        let mut passed = 0;
        let mut buf = vec![0; 4_096];
        loop {
            let room = if passed < PASS_FIRST {
                PASS_FIRST - passed
            } else {
                buf.len()
            };
            let n = up_read.read(&mut buf[..room.min(4_096)]).await.unwrap_or(0);
            if n == 0 || client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
            passed += n;
            if passed == PASS_FIRST {
                resume.notified().await;
            }
        }
        let _ = client_write.shutdown().await;
    });
    front
}

#[tokio::test]
async fn an_idle_close_waits_for_the_end_of_a_big_header_block() {
    let (server, readings) = server().await;
    let resume = Arc::new(tokio::sync::Notify::new());
    let front = relay(server, Arc::clone(&resume)).await;
    let tcp = TcpStream::connect(front).await.expect("connect");
    let (mut client, connection) = h2::client::Builder::new()
        .max_header_list_size(4 << 20)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .expect("handshake");
    let connection = tokio::spawn(connection);
    let request = http::Request::post("http://turnstile/test.BigHeaders/Call")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, _) = client.send_request(request, true).expect("send");
    // The relay holds the server's bytes inside the block until the idle close has begun.
    let mut waited = 0;
    while readings.closed_total(CloseReason::Idle) == 0 {
        assert!(waited < 1_000, "no idle close within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    resume.notify_one();
    let response = response
        .await
        .expect("the response reaches the client whole");
    assert_eq!(response.headers()["grpc-status"], "0");
    for i in 0..HEADERS {
        let got = &response.headers()[format!("x-big-{i}").as_str()];
        assert_eq!(got.as_bytes(), value(i).as_bytes(), "header {i}");
    }
    drop(client);
    match connection.await.expect("connection task") {
        Ok(()) => {}
        Err(e) => assert!(
            e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR),
            "the connection must end with the server's GOAWAY, not {e}"
        ),
    }
}
