//! Rules over xDS with mutual TLS, as Envoy Gateway's control plane requires (TLS 1.3 and a
//! client certificate): the server name checked through `CONFIG_GRPC_XDS_SERVER_TLS_SAN`, and
//! a client certificate rotated on disk (renamed over the old files, as Kubernetes swaps a
//! Secret) presented from the next connection on, without a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use turnstile::pb::ratelimit::config::ratelimit::v3::RateLimitUnit;
use turnstile::settings::TlsSettings;

use super::server::{AdsServer, Shared};
use super::{codes, limit, loopback, ok_then_over, start, version_in_force};
use crate::process::{metric, temp_dir};
use crate::support::certs::{ca, leaf};
use crate::support::until;

/// An ADS server configuration trusting client certificates of `client_ca` only.
fn server_tls(dir: &Path, client_ca: &str) -> Arc<tokio_rustls::rustls::ServerConfig> {
    let (config, _cert) = turnstile::tls::server_config(
        (TlsSettings {
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            client_ca: Some(dir.join(format!("{client_ca}-ca.pem"))),
            client_san: None,
        })
        .server_files(),
    )
    .expect("server TLS");
    config
}

/// Replaces `client.pem`/`client.key` with `from`'s, each by a rename (never half-written).
fn install_client_cert(dir: &Path, from: &str) {
    for ext in ["pem", "key"] {
        let staged = dir.join(format!("staged.{ext}"));
        std::fs::copy(dir.join(format!("{from}.{ext}")), &staged).expect("stage");
        std::fs::rename(&staged, dir.join(format!("client.{ext}"))).expect("rename");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate_rotated_on_disk() {
    let dir = temp_dir("xds-tls");
    ca(&dir, "server");
    leaf(&dir, "server", "server", false);
    ca(&dir, "old");
    leaf(&dir, "old", "client-old", true);
    ca(&dir, "new");
    leaf(&dir, "new", "client-new", true);
    install_client_cert(&dir, "client-old");

    let shared = Shared::default();
    shared.set(
        "1",
        vec![limit("one", "tls", "user", RateLimitUnit::Hour, 2)],
    );
    let ads = AdsServer::start(loopback(), shared, Some(server_tls(&dir, "old")));
    let addr = ads.addr;
    let path = |name: &str| dir.join(name).display().to_string();
    let (cert, key, server_ca) = (
        path("client.pem"),
        path("client.key"),
        path("server-ca.pem"),
    );
    let p = start(
        addr,
        &[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert.as_str()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key.as_str()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", server_ca.as_str()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "localhost"),
        ],
    );
    assert_eq!(codes(&p, "tls", "ann", 3).await, ok_then_over(2));

    // The control plane restarts trusting only the new client CA: the old certificate is
    // refused, and the rules in force keep serving meanwhile.
    ads.kill();
    let shared = Shared::default();
    shared.set(
        "2",
        vec![limit("two", "tls", "user", RateLimitUnit::Hour, 1)],
    );
    let ads = AdsServer::start(addr, shared.clone(), Some(server_tls(&dir, "new")));
    until(
        Duration::from_secs(5),
        "the old certificate is refused twice",
        || shared.refused() >= 2,
    )
    .await;
    assert_eq!(
        metric(&p.metrics(), "turnstile_config_source_connected"),
        Some(0)
    );
    assert!(
        shared.seen().is_empty(),
        "the old certificate gets no stream"
    );
    assert_eq!(version_in_force(&p).as_deref(), Some("1"));
    assert_eq!(
        codes(&p, "tls", "ann", 1).await,
        vec![Code::OverLimit],
        "old rules serve"
    );

    // Kubernetes rotates the Secret: the next connection presents the new certificate.
    install_client_cert(&dir, "client-new");
    until(
        Duration::from_secs(10),
        "version 2 over the rotated certificate",
        || version_in_force(&p).as_deref() == Some("2"),
    )
    .await;
    assert_eq!(codes(&p, "tls", "bob", 2).await, ok_then_over(1));
    drop(ads);
}
