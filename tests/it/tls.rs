//! gRPC over TLS and mTLS against the real binary, checked with Python grpcio as the client, and
//! a server certificate renewed on disk (renamed over the old files) being served without a
//! restart. Certificates are made in process (`support::certs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::{Process, RULES, rules_root, temp_dir};
use crate::support::certs::{Usage, ca, leaf, leaf_with, mtls_server_env};
use crate::support::peers_venv;

fn check(p: &Process, args: &[&Path]) -> Option<String> {
    let venv = peers_venv()?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/tls_check.py");
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.arg(script)
        .arg(format!("127.0.0.1:{}", p.grpc))
        .args(args);
    let out = cmd.output().expect("python");
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn certs() -> Option<PathBuf> {
    if peers_venv().is_none() {
        crate::support::missing("the peer virtualenv (Python grpcio)");
        return None;
    }
    let dir = temp_dir("tls");
    ca(&dir, "one");
    leaf(&dir, "one", "server", false);
    leaf(&dir, "one", "client", true);
    ca(&dir, "two");
    leaf(&dir, "two", "server2", false);
    Some(dir)
}

#[test]
fn tls_mtls_and_certificate_reload() {
    let Some(dir) = certs() else { return };
    let root = rules_root(RULES);
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    let tls = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.to_str().expect("path")),
        ("GRPC_SERVER_TLS_KEY", key.to_str().expect("path")),
    ];
    let p = Process::start(&root, &tls);
    assert_eq!(
        check(&p, &[&dir.join("one-ca.pem")]).as_deref(),
        Some("ok"),
        "TLS with the right CA"
    );
    assert_eq!(
        check(&p, &[&dir.join("two-ca.pem")]).as_deref(),
        Some("error UNAVAILABLE"),
        "an unknown CA is refused"
    );

    // Renew: the new certificate (from another CA) is renamed over the old files.
    std::fs::copy(dir.join("server2.key"), dir.join("new.key")).expect("copy");
    std::fs::copy(dir.join("server2.pem"), dir.join("new.pem")).expect("copy");
    std::fs::rename(dir.join("new.key"), &key).expect("rename");
    std::fs::rename(dir.join("new.pem"), &cert).expect("rename");
    crate::support::wait::blocking(
        Duration::from_secs(10),
        "the renewed certificate served",
        || check(&p, &[&dir.join("two-ca.pem")]).as_deref() == Some("ok"),
    );
    assert_eq!(
        check(&p, &[&dir.join("one-ca.pem")]).as_deref(),
        Some("error UNAVAILABLE"),
        "the old CA no longer validates"
    );
    drop(p);

    // mTLS: a client certificate signed by GRPC_CLIENT_TLS_CACERT is required.
    leaf(&dir, "one", "server", false);
    let ca_file = dir.join("one-ca.pem");
    let mut mtls = tls.to_vec();
    mtls.push(("GRPC_CLIENT_TLS_CACERT", ca_file.to_str().expect("path")));
    let p = Process::start(&root, &mtls);
    let with_cert = check(
        &p,
        &[&ca_file, &dir.join("client.pem"), &dir.join("client.key")],
    );
    assert_eq!(
        with_cert.as_deref(),
        Some("ok"),
        "mTLS with a client certificate"
    );
    assert_eq!(
        check(&p, &[&ca_file]).as_deref(),
        Some("error UNAVAILABLE"),
        "no client certificate is refused"
    );
}

#[test]
fn a_client_certificate_must_carry_grpc_client_tls_san() {
    let Some(dir) = certs() else { return };
    let mesh = ["envoy.mesh.local"];
    leaf_with(&dir, "one", "named", &mesh, &[Usage::Client]);
    leaf_with(
        &dir,
        "one",
        "other",
        &["other.mesh.local"],
        &[Usage::Client],
    );
    leaf_with(&dir, "one", "server_usage", &mesh, &[Usage::Server]);
    let env = mtls_server_env(&dir, "one", &[("GRPC_CLIENT_TLS_SAN", "envoy.mesh.local")]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let p = Process::start(&rules_root(RULES), &env);
    let call = |client: &str| {
        let (cert, key) = (
            dir.join(format!("{client}.pem")),
            dir.join(format!("{client}.key")),
        );
        check(&p, &[&dir.join("one-ca.pem"), &cert, &key])
    };
    assert_eq!(call("named").as_deref(), Some("ok"), "the SAN is carried");
    for refused in ["other", "server_usage", "client"] {
        assert_eq!(
            call(refused).as_deref(),
            Some("error UNAVAILABLE"),
            "{refused}: another name, no client-auth usage, or no SAN"
        );
    }
}
