//! The algorithms behind a real Envoy (1.40), running `deploy/envoy/algorithms.yaml` on
//! loopback in front of the Turnstile binary and memcached: a concurrency limit of 2 acquired
//! per request and released at stream end (`apply_on_stream_done` with a negative hit), with a
//! slow upstream; a token bucket per API key; a sliding window per user.

use crate::process::{Process, rules_root};
use crate::support::envoy::envoy;
use crate::support::envoy::{header, request, start_envoy, wait_for};
use crate::support::{Memcached, connect, desc, free_port, req};

const RULES: &str = r#"
domain: algorithms
descriptors:
  - key: upload
    rate_limit: { unit: minute, unit_multiplier: 10, requests_per_unit: 2, algorithm: concurrency }
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 2 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_window }
"#;

/// Requests in flight on the upload route, by a check-only call (hits_addend 0) to Turnstile.
fn in_flight(runtime: &tokio::runtime::Runtime, grpc: u16) -> u32 {
    runtime.block_on(async {
        let mut d = desc(&[("upload", "any")]);
        d.hits_addend = Some(0);
        let response = connect(grpc)
            .await
            .should_rate_limit(req("algorithms", vec![d]))
            .await
            .expect("check")
            .into_inner();
        2 - response.statuses[0].limit_remaining
    })
}

/// `n` simultaneous uploads; their statuses, in the order they were sent.
fn uploads(listener: u16, n: usize) -> Vec<u16> {
    let threads: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || request(listener, "/upload", &[]).0))
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("upload"))
        .collect()
}

#[test]
fn envoy_concurrency_token_bucket_and_sliding_window() {
    let Some(binary) = envoy() else { return };
    let Some(mc) = Memcached::start() else { return };
    let root = rules_root(RULES);
    let addr = mc.addr();
    let turnstile = Process::start(
        &root,
        &[("BACKEND_TYPE", "memcache"), ("MEMCACHE_HOST_PORT", &addr)],
    );
    let (listener, admin) = (free_port(), free_port());
    let mut envoy = start_envoy(
        &binary,
        "deploy/envoy/algorithms.yaml",
        turnstile.grpc,
        listener,
        admin,
    );
    envoy.wait_ready(admin);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // Concurrency 2, a 2 s upstream: of 3 simultaneous uploads 2 pass and 1 is refused (the
    // upstream holds the two, so the third finds both places taken).
    let mut first = uploads(listener, 3);
    first.sort_unstable();
    assert_eq!(first, vec![200, 200, 429], "two in flight at most");
    // Every stream has ended, the refused one included: Envoy's stream-done calls bring the
    // count back to 0 (they are sent after the response, so wait for them).
    wait_for("0 in flight after every request ended", || {
        in_flight(&runtime, turnstile.grpc) == 0
    });
    let mut again = uploads(listener, 2);
    again.sort_unstable();
    assert_eq!(again, vec![200, 200], "the capacity is back");
    wait_for("0 in flight again", || {
        in_flight(&runtime, turnstile.grpc) == 0
    });

    // Token bucket: 1 per minute plus a burst of 2: three at once, then 429.
    let key = [("x-api-key", "k1")];
    let statuses: Vec<u16> = (0..4).map(|_| request(listener, "/api", &key).0).collect();
    assert_eq!(statuses, vec![200, 200, 200, 429]);
    let (_, h, _) = request(listener, "/api", &key);
    assert_eq!(header(&h, "x-ratelimit-remaining"), Some("0"), "{h:?}");
    let reset: u64 = header(&h, "x-ratelimit-reset")
        .and_then(|r| r.parse().ok())
        .expect("reset");
    assert!(
        (1..=60).contains(&reset),
        "the next token within a minute: {h:?}"
    );

    // Sliding window: 3 per minute.
    let user = [("x-user", "ann")];
    let statuses: Vec<u16> = (0..4)
        .map(|_| request(listener, "/search", &user).0)
        .collect();
    assert_eq!(statuses, vec![200, 200, 200, 429]);
    // Close the check-only connections first: a stop drains open connections.
    drop(runtime);
    turnstile.stop().expect("turnstile stops cleanly");
}
