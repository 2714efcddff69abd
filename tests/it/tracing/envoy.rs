//! Through a real Envoy 1.40 with its OpenTelemetry tracer (`tests/fixtures/envoy-tracing.yaml`):
//! Envoy and Turnstile export to one OTLP receiver, and Turnstile's `ShouldRateLimit` span is
//! in Envoy's trace, its parent one of Envoy's spans (the rate-limit call's egress span, whose
//! context Envoy sent as `traceparent`).

use std::path::PathBuf;

use super::receiver::Receiver;
use crate::process::{Process, http_get, rules_root, temp_dir};
use crate::support::envoy::envoy;
use crate::support::envoy::{Envoy, request, wait_for};
use crate::support::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turnstiles_span_is_a_child_of_envoys_rate_limit_call() {
    let Some(binary) = envoy() else { return };
    let receiver = Receiver::grpc().await;
    let endpoint = format!("http://{}", receiver.addr);
    let p = Process::start(
        &rules_root(super::RULES),
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
        ],
    );
    let (listener, admin) = (free_port(), free_port());
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-tracing.yaml"),
    )
    .expect("fixture")
    .replace("ADMIN_PORT", &admin.to_string())
    .replace("LISTENER_PORT", &listener.to_string())
    .replace("TURNSTILE_PORT", &p.grpc.to_string())
    .replace("BACKEND_PORT", &p.http.to_string())
    .replace("OTLP_PORT", &receiver.addr.port().to_string());
    let config = temp_dir("envoy-tracing").join("envoy.yaml");
    std::fs::write(&config, text).expect("write");
    let _envoy = Envoy::spawn(&binary, &config);
    let ready = tokio::task::spawn_blocking(move || {
        wait_for("Envoy ready", || {
            http_get(admin, "/ready").map(|r| r.0) == Some(200)
        });
        (0..3)
            .map(|_| request(listener, "/healthcheck", &[("x-user", "dee")]).0)
            .collect::<Vec<u16>>()
    });
    let statuses = ready.await.expect("requests");
    assert_eq!(statuses, [200, 200, 429]);
    let spans = receiver
        .until(
            "Turnstile's three spans and Envoy's spans of the same traces",
            |s| {
                let ours: Vec<_> = s
                    .iter()
                    .filter(|g| g.name() == "ShouldRateLimit Execution")
                    .collect();
                ours.len() == 3
                    && ours.iter().all(|t| {
                        s.iter()
                            .any(|e| e.service == "envoy" && e.span_id() == t.parent_id())
                    })
            },
        )
        .await;
    for ours in spans
        .iter()
        .filter(|g| g.name() == "ShouldRateLimit Execution")
    {
        let parent = spans
            .iter()
            .find(|e| e.span_id() == ours.parent_id())
            .expect("the parent is in the receiver");
        assert_eq!(parent.service, "envoy");
        assert_eq!(parent.trace_id(), ours.trace_id(), "one trace");
        assert_eq!(ours.service, "RateLimit");
    }
    let verdicts: Vec<_> = spans
        .iter()
        .filter(|g| g.name() == "ShouldRateLimit Execution")
        .map(|g| g.attr("ratelimit.verdict").unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["OK", "OK", "OVER_LIMIT"]);
}
