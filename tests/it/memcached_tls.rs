//! TLS to memcached (`MEMCACHE_TLS*`), against memcached 1.6 serving TLS only (`-Z`) with
//! certificates of a test CA: counting over TLS; a server certificate of an unknown CA, or one
//! for another name, refused with what TLS said; the name check skipped with
//! `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION` (the chain still checked); a client certificate
//! presented to a memcached that requires one.

use std::path::Path;

use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::process::{Process, RULES, rules_root, temp_dir};
use crate::support::certs::{Usage, ca, leaf, leaf_with};
use crate::support::memcached::Memcached;
use crate::support::req1;

/// memcached serving TLS only, with `<cert>.pem`/`.key` of `dir`, plus `more` options.
fn tls_memcached(dir: &Path, cert: &str, more: &str) -> Option<Memcached> {
    let path = |name: &str| dir.join(name).display().to_string();
    let options = format!(
        "ssl_chain_cert={},ssl_key={}{more}",
        path(&format!("{cert}.pem")),
        path(&format!("{cert}.key"))
    );
    Memcached::start_with(&["-Z", "-o", &options])
}

/// Turnstile on `mc` with `MEMCACHE_TLS=true` and `env`: the codes of three calls for one user
/// (the rules allow two a minute), or the first error's message.
async fn three_calls(mc: &Memcached, env: &[(&str, &str)]) -> Result<Vec<Code>, String> {
    let address = mc.addr();
    let mut all = vec![
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", address.as_str()),
        ("MEMCACHE_TLS", "true"),
    ];
    all.extend_from_slice(env);
    let p = Process::spawn(&rules_root(RULES), &all);
    let mut client = p.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = client
            .should_rate_limit(req1("ops", &[("user", "tls")]))
            .await
            .map_err(|status| status.message().to_owned())?;
        codes.push(answer.into_inner().overall_code());
    }
    Ok(codes)
}

const COUNTED: [Code; 3] = [Code::Ok, Code::Ok, Code::OverLimit];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_over_tls_and_what_tls_refuses() {
    let dir = temp_dir("memcached-tls");
    ca(&dir, "mc");
    ca(&dir, "stranger");
    leaf(&dir, "mc", "server", false);
    let other_name = ["memcached.internal"];
    leaf_with(&dir, "mc", "elsewhere", &other_name, &[Usage::Server]);
    let path = |name: &str| dir.join(name).display().to_string();
    let (mc_ca, stranger_ca) = (path("mc-ca.pem"), path("stranger-ca.pem"));

    let Some(mc) = tls_memcached(&dir, "server", "") else {
        return;
    };
    let trusted = [("MEMCACHE_TLS_CACERT", mc_ca.as_str())];
    assert_eq!(three_calls(&mc, &trusted).await, Ok(COUNTED.to_vec()));
    let untrusted = [("MEMCACHE_TLS_CACERT", stranger_ca.as_str())];
    let refused = three_calls(&mc, &untrusted).await.expect_err("unknown CA");
    assert!(refused.contains("UnknownIssuer"), "{refused}");

    let Some(elsewhere) = tls_memcached(&dir, "elsewhere", "") else {
        return;
    };
    let refused = three_calls(&elsewhere, &trusted).await.expect_err("name");
    assert!(
        refused.contains("not valid for name") && refused.contains("memcached.internal"),
        "{refused}"
    );
    let skip = [
        ("MEMCACHE_TLS_CACERT", mc_ca.as_str()),
        ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
    ];
    assert_eq!(three_calls(&elsewhere, &skip).await, Ok(COUNTED.to_vec()));
    let skip_untrusted = [
        ("MEMCACHE_TLS_CACERT", stranger_ca.as_str()),
        ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
    ];
    let refused = three_calls(&elsewhere, &skip_untrusted)
        .await
        .expect_err("the chain is still checked");
    assert!(refused.contains("UnknownIssuer"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_for_a_memcached_that_requires_one() {
    let dir = temp_dir("memcached-mtls");
    ca(&dir, "mc");
    leaf(&dir, "mc", "server", false);
    ca(&dir, "clients");
    leaf(&dir, "clients", "turnstile", true);
    let path = |name: &str| dir.join(name).display().to_string();
    // ssl_verify_mode=2: a client certificate is required.
    let require = format!(",ssl_ca_cert={},ssl_verify_mode=2", path("clients-ca.pem"));
    let Some(mc) = tls_memcached(&dir, "server", &require) else {
        return;
    };
    let (mc_ca, cert, key) = (
        path("mc-ca.pem"),
        path("turnstile.pem"),
        path("turnstile.key"),
    );
    let with_cert = [
        ("MEMCACHE_TLS_CACERT", mc_ca.as_str()),
        ("MEMCACHE_TLS_CLIENT_CERT", cert.as_str()),
        ("MEMCACHE_TLS_CLIENT_KEY", key.as_str()),
    ];
    assert_eq!(three_calls(&mc, &with_cert).await, Ok(COUNTED.to_vec()));
    let without = [("MEMCACHE_TLS_CACERT", mc_ca.as_str())];
    assert!(three_calls(&mc, &without).await.is_err(), "no certificate");
}
