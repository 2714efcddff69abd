//! Certificates for the TLS tests, made in process with rcgen (ECDSA P-256) and written as PEM
//! files into a test's directory, where the real servers (memcached, redis-server, PostgreSQL,
//! Envoy, the service itself) read them: a CA is `<name>-ca.pem` with its key `<name>-ca.key`,
//! a leaf `<leaf>.pem` with `<leaf>.key`. A leaf is signed by a CA made earlier in the same
//! directory (its key read back), so a test can add leaves as it goes.
//!
//! Must not touch: servers, settings; what a test does with the files.

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};

/// What a leaf certificate may be used for (its extended key usage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A server's certificate (TLS web server authentication).
    Server,
    /// A client's certificate (TLS web client authentication).
    Client,
}

impl Usage {
    fn purpose(self) -> ExtendedKeyUsagePurpose {
        match self {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }
    }
}

/// The names a server leaf carries by default: `localhost` and `127.0.0.1`.
pub const LOCAL: &[&str] = &["localhost", "127.0.0.1"];

/// The subject `CN=<cn>`.
fn named(cn: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, cn);
    name
}

/// The CA `<name>-ca` as an issuer: its parameters are rebuilt (the subject and the usages are
/// all a signature takes from them) and its key read back from `<name>-ca.key`.
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = named(&format!("{name}-ca"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

fn write(dir: &Path, file: &str, pem: &str) {
    std::fs::write(dir.join(file), pem).unwrap_or_else(|e| panic!("write {file}: {e}"));
}

/// Makes the CA `<name>-ca.pem` with its key `<name>-ca.key` in `dir`.
pub fn ca(dir: &Path, name: &str) {
    let key = KeyPair::generate().expect("CA key");
    let cert = ca_params(name).self_signed(&key).expect("CA certificate");
    write(dir, &format!("{name}-ca.pem"), &cert.pem());
    write(dir, &format!("{name}-ca.key"), &key.serialize_pem());
}

/// A leaf `<leaf>.pem`/`<leaf>.key` signed by `<ca_name>-ca`: a server's for `localhost` and
/// `127.0.0.1`, or (`client`) a client's without names.
pub fn leaf(dir: &Path, ca_name: &str, leaf: &str, client: bool) {
    match client {
        true => leaf_with(dir, ca_name, leaf, &[], &[Usage::Client]),
        false => leaf_with(dir, ca_name, leaf, LOCAL, &[Usage::Server]),
    }
}

/// A leaf `<leaf>.pem`/`<leaf>.key` (CN `leaf`) signed by `<ca_name>-ca`, carrying `names` as
/// subject alternative names (an IP address or a DNS name each) and `usages`.
pub fn leaf_with(dir: &Path, ca_name: &str, leaf: &str, names: &[&str], usages: &[Usage]) {
    sign(dir, ca_name, leaf, leaf_params(leaf, names, usages));
}

/// As [`leaf_with`], but valid only on 2020-01-01: long expired.
pub fn expired_leaf(dir: &Path, ca_name: &str, leaf: &str, names: &[&str], usages: &[Usage]) {
    let mut params = leaf_params(leaf, names, usages);
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2020, 1, 2);
    sign(dir, ca_name, leaf, params);
}

fn leaf_params(leaf: &str, names: &[&str], usages: &[Usage]) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("subject alternative names");
    params.distinguished_name = named(leaf);
    params.extended_key_usages = usages.iter().map(|u| u.purpose()).collect();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params
}

fn sign(dir: &Path, ca_name: &str, leaf: &str, params: CertificateParams) {
    let ca_key = std::fs::read_to_string(dir.join(format!("{ca_name}-ca.key")))
        .unwrap_or_else(|e| panic!("the key of CA {ca_name} (made by `ca` first): {e}"));
    let ca_key = KeyPair::from_pem(&ca_key).expect("CA key");
    let issuer = Issuer::new(ca_params(ca_name), ca_key);
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, &issuer).expect("leaf certificate");
    write(dir, &format!("{leaf}.pem"), &cert.pem());
    write(dir, &format!("{leaf}.key"), &key.serialize_pem());
}

/// The service's settings to serve gRPC over TLS with `server.pem`/`server.key` of `dir` and
/// ask each client for a certificate signed by `<ca_name>-ca.pem`, with `more` settings.
pub fn mtls_server_env(
    dir: &Path,
    ca_name: &str,
    more: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let path = |name: &str| dir.join(name).display().to_string();
    let mut env = vec![
        ("GRPC_SERVER_USE_TLS", "true".to_owned()),
        ("GRPC_SERVER_TLS_CERT", path("server.pem")),
        ("GRPC_SERVER_TLS_KEY", path("server.key")),
        ("GRPC_CLIENT_TLS_CACERT", path(&format!("{ca_name}-ca.pem"))),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    env
}
