//! Listening on IPv6 as Istio's sample configures it: `::` (dual stack: IPv4 callers too) and
//! bracketed literals, for the gRPC, HTTP, debug and Prometheus listeners, each called over the
//! families it serves.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

use crate::process::{Process, RULES, rules_root};
use crate::support::req1;

/// `GET path` on `addr` (`host:port`, `[v6]:port`): the status.
fn status_at(addr: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    raw.split_whitespace().nth(1)?.parse().ok()
}

async fn grpc_answers(uri: String) -> bool {
    let Ok(mut client) = RateLimitServiceClient::connect(uri).await else {
        return false;
    };
    client
        .should_rate_limit(req1("ops", &[("user", "v6")]))
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_on_ipv6_and_dual_stack() {
    let root = rules_root(RULES);
    let p = Process::start(
        &root,
        &[
            ("GRPC_HOST", "::"),
            ("HOST", "[::]"),
            ("DEBUG_HOST", "::1"),
            ("PROMETHEUS_ADDR", "[::1]:0"),
        ],
    );
    for uri in [
        format!("http://127.0.0.1:{}", p.grpc),
        format!("http://[::1]:{}", p.grpc),
    ] {
        assert!(
            grpc_answers(uri.clone()).await,
            "gRPC on `::` answers {uri}"
        );
    }
    for addr in [format!("127.0.0.1:{}", p.http), format!("[::1]:{}", p.http)] {
        assert_eq!(
            status_at(&addr, "/healthcheck"),
            Some(200),
            "HTTP on `[::]` at {addr}"
        );
    }
    let debug = format!("[::1]:{}", p.debug);
    assert_eq!(status_at(&debug, "/rlconfig"), Some(200), "debug on `::1`");
    assert_eq!(
        status_at(&format!("127.0.0.1:{}", p.debug), "/rlconfig"),
        None,
        "`::1` is IPv6 loopback only"
    );
    let prometheus = format!("[::1]:{}", p.prometheus);
    assert_eq!(
        status_at(&prometheus, "/metrics"),
        Some(200),
        "Prometheus on `[::1]`"
    );
    p.stop().expect("stops");
}
