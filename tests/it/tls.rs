//! gRPC over TLS and mTLS against the real binary, checked with Python grpcio as the client, and
//! a server certificate renewed on disk (renamed over the old files) being served without a
//! restart. Certificates are made with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::{Process, RULES, rules_root, temp_dir};
use crate::support::peers_venv;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes `<name>-ca.pem` and a leaf `<leaf>.pem`/`<leaf>.key` signed by it.
pub(crate) fn ca(dir: &Path, name: &str) {
    let (key, pem) = (format!("{name}-ca.key"), format!("{name}-ca.pem"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}-ca"),
        ],
    );
}

pub(crate) fn leaf(dir: &Path, ca_name: &str, leaf: &str, client: bool) {
    let ext = if client {
        "extendedKeyUsage=clientAuth\n"
    } else {
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    };
    leaf_with(dir, ca_name, leaf, ext);
}

/// A leaf's key `<leaf>.key`, its signing request `<leaf>.csr` (CN `leaf`) and its X.509
/// extensions `<leaf>.ext`.
fn key_and_request(dir: &Path, leaf: &str, ext: &str) {
    std::fs::write(dir.join(format!("{leaf}.ext")), ext).expect("ext");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{leaf}.key"),
            "-out",
            &format!("{leaf}.csr"),
            "-subj",
            &format!("/CN={leaf}"),
        ],
    );
}

/// A leaf `<leaf>.pem`/`<leaf>.key` signed by `<ca_name>-ca`, with the X.509 extensions `ext`.
pub(crate) fn leaf_with(dir: &Path, ca_name: &str, leaf: &str, ext: &str) {
    key_and_request(dir, leaf, ext);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{leaf}.csr"),
            "-CA",
            &format!("{ca_name}-ca.pem"),
            "-CAkey",
            &format!("{ca_name}-ca.key"),
            "-CAcreateserial",
            "-out",
            &format!("{leaf}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{leaf}.ext"),
        ],
    );
}

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
    let named = "subjectAltName=DNS:envoy.mesh.local\nextendedKeyUsage=clientAuth\n";
    leaf_with(&dir, "one", "named", named);
    let other = "subjectAltName=DNS:other.mesh.local\nextendedKeyUsage=clientAuth\n";
    leaf_with(&dir, "one", "other", other);
    let server_usage = "subjectAltName=DNS:envoy.mesh.local\nextendedKeyUsage=serverAuth\n";
    leaf_with(&dir, "one", "server_usage", server_usage);
    let path = |name: &str| dir.join(name).to_str().expect("path").to_owned();
    let (cert, key, ca_file) = (path("server.pem"), path("server.key"), path("one-ca.pem"));
    let p = Process::start(
        &rules_root(RULES),
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert),
            ("GRPC_SERVER_TLS_KEY", &key),
            ("GRPC_CLIENT_TLS_CACERT", &ca_file),
            ("GRPC_CLIENT_TLS_SAN", "envoy.mesh.local"),
        ],
    );
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

/// A leaf `<leaf>.pem`/`<leaf>.key` signed by `<ca_name>-ca` that expired on 2020-01-02 (the
/// `openssl ca` command sets past dates; `x509 -req` cannot).
pub(crate) fn expired_leaf(dir: &Path, ca_name: &str, leaf: &str, ext: &str) {
    key_and_request(dir, leaf, ext);
    let conf = "[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\n\
                default_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n";
    std::fs::write(dir.join("expired-ca.cnf"), conf).expect("ca config");
    std::fs::write(dir.join("index.txt"), "").expect("index");
    std::fs::write(dir.join("serial"), "01\n").expect("serial");
    let (csr, pem) = (format!("{leaf}.csr"), format!("{leaf}.pem"));
    let (ca_pem, ca_key) = (format!("{ca_name}-ca.pem"), format!("{ca_name}-ca.key"));
    let ext_file = format!("{leaf}.ext");
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-config",
            "expired-ca.cnf",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-in",
            &csr,
            "-out",
            &pem,
            "-cert",
            &ca_pem,
            "-keyfile",
            &ca_key,
            "-extfile",
            &ext_file,
            "-notext",
        ],
    );
}
