//! A TLS failure towards the control plane is said in the log as TLS said it: a certificate of
//! an unknown issuer, an expired one, and one valid for other names (with the names), never
//! only "transport error".

use std::path::Path;

use turnstile::settings::TlsSettings;

use super::server::{AdsServer, Shared};
use crate::lifecycle::Binary;
use crate::process::temp_dir;
use crate::support::certs::{LOCAL, Usage, ca, expired_leaf, leaf};

/// An ADS server presenting `<name>.pem`.
fn ads(dir: &Path, name: &str) -> AdsServer {
    let (config, _cert) = turnstile::tls::server_config(
        (TlsSettings {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
            client_ca: None,
            client_san: None,
        })
        .server_files(),
    )
    .expect("server TLS");
    AdsServer::start(super::loopback(), Shared::default(), Some(config))
}

/// The log line of the first failed connection of Turnstile trusting `trusted-ca.pem` and
/// expecting the server name `san`.
fn failure(dir: &Path, server: &AdsServer, san: &str) -> String {
    let ca_file = dir.join("trusted-ca.pem").display().to_string();
    let url = server.addr.to_string();
    let mut p = Binary::start(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", &url),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &ca_file),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", san),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ("LOG_LEVEL", "warn"),
    ]);
    p.wait_for_log("xDS: no stream")
}

#[test]
fn unknown_issuer_expired_and_wrong_name_are_said_as_tls_said_them() {
    let dir = temp_dir("xds-tls-errors");
    ca(&dir, "trusted");
    ca(&dir, "stranger");
    leaf(&dir, "stranger", "unknown-issuer", false);
    expired_leaf(&dir, "trusted", "expired", LOCAL, &[Usage::Server]);
    leaf(&dir, "trusted", "valid", false);

    let line = failure(&dir, &ads(&dir, "unknown-issuer"), "localhost");
    assert!(line.contains("UnknownIssuer"), "{line}");
    let line = failure(&dir, &ads(&dir, "expired"), "localhost");
    assert!(line.contains("expired"), "{line}");
    let line = failure(&dir, &ads(&dir, "valid"), "control-plane.example");
    assert!(
        line.contains("not valid for name")
            && line.contains("control-plane.example")
            && line.contains("localhost"),
        "{line}"
    );
}
