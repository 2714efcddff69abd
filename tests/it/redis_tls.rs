//! TLS to Redis (`REDIS_TLS` and its files), end to end through the service's settings: one
//! server requiring a client certificate, and a master and replica behind a Sentinel that all
//! speak TLS (the service is given TLS ports only, the sentinel's too), including a failover. A CA that did not sign
//! the server's certificate is refused (UNAVAILABLE naming Redis), never downgraded.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::process::{Process, http_get, rules_root, temp_dir};
use crate::support::certs::{Usage, ca, leaf, leaf_with};
use crate::support::redis_server::{RedisProcess, RedisSentinel, SENTINEL_MASTER, TlsFiles, cli};
use crate::support::req1;
use turnstile::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use turnstile::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;

const RULES: &str = "domain: cut\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

/// A directory with CA `one` (signing `server` and `client`) and CA `two` (signing nothing
/// here).
fn certificates() -> PathBuf {
    let dir = temp_dir("redis-tls");
    ca(&dir, "one");
    leaf(&dir, "one", "server", false);
    leaf(&dir, "one", "client", true);
    ca(&dir, "two");
    dir
}

/// The service's settings for Redis at `url` (`REDIS_TYPE` `kind`) over TLS trusting `ca`.
fn tls_env(dir: &std::path::Path, kind: &str, url: &str, ca: &str) -> Vec<(&'static str, String)> {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    vec![
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_TYPE", kind.to_owned()),
        ("REDIS_URL", url.to_owned()),
        ("REDIS_TLS", "true".to_owned()),
        ("REDIS_TLS_CACERT", file(ca)),
        ("REDIS_TLS_CLIENT_CERT", file("client.pem")),
        ("REDIS_TLS_CLIENT_KEY", file("client.key")),
        ("REDIS_TIMEOUT", "2s".to_owned()),
    ]
}

fn as_env<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// One redis-server over TLS with the certificate `<server>.pem` of `dir` (signed by CA `one`),
/// requiring the client certificate; `None` where redis-server has no TLS.
fn tls_redis(dir: &std::path::Path, server: &str) -> Option<RedisProcess> {
    RedisProcess::start_tls(
        &dir.join(format!("{server}.pem")),
        &dir.join(format!("{server}.key")),
        &dir.join("one-ca.pem"),
        (&dir.join("client.pem"), &dir.join("client.key")),
    )
}

/// A runtime for the test's client calls.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt")
}

/// `user`'s one hit on domain `cut` through the service at `grpc`.
fn call(
    runtime: &tokio::runtime::Runtime,
    grpc: u16,
    user: &str,
) -> Result<RateLimitResponse, tonic::Status> {
    runtime.block_on(async {
        crate::support::connect(grpc)
            .await
            .should_rate_limit(req1("cut", &[("user", user)]))
            .await
            .map(tonic::Response::into_inner)
    })
}

/// TLS to Redis (`REDIS_TLS`), with a client certificate (the server requires one): the service
/// counts over TLS; a CA that did not sign the server's certificate is refused (UNAVAILABLE
/// naming Redis), never silently downgraded to plain text.
#[test]
fn counts_over_tls_with_a_client_certificate() {
    let dir = certificates();
    let Some(redis) = tls_redis(&dir, "server") else {
        return;
    };
    let url = format!("127.0.0.1:{}", redis.port);
    let root = rules_root(RULES);
    let runtime = runtime();
    let env = tls_env(&dir, "single", &url, "one-ca.pem");
    let good = Process::start(&root, &as_env(&env));
    let first = call(&runtime, good.grpc, "tls")
        .expect("counted over TLS")
        .statuses[0]
        .clone();
    assert_eq!(first.limit_remaining, 4);
    let second = call(&runtime, good.grpc, "tls").expect("again").statuses[0].clone();
    // The second call counts on the first, unless a minute's end came between them (its reset
    // is then further off than the first's): a new window, whose first call it is.
    let reset = |s: &DescriptorStatus| s.duration_until_reset.map_or(0, |d| d.seconds);
    let new_window = reset(&second) > reset(&first);
    assert_eq!(second.limit_remaining, if new_window { 4 } else { 3 });

    let env = tls_env(&dir, "single", &url, "two-ca.pem");
    let wrong = Process::spawn(&root, &as_env(&env));
    let refused = call(&runtime, wrong.grpc, "tls").expect_err("an untrusted server certificate");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    assert!(refused.message().contains("redis"), "{}", refused.message());
    assert_ne!(http_get(wrong.http, "/healthcheck").map(|r| r.0), Some(200));
    // Close the client connections first: a stop drains open connections.
    drop(runtime);
    good.stop().expect("stops");
    wrong.stop().expect("stops");
}

/// `REDIS_TYPE=sentinel` with `REDIS_TLS`: the service asks the sentinel (over TLS, with its
/// client certificate) for the master, counts on the master over TLS, and after the master is
/// killed follows the sentinel's failover to the replica, over TLS again, without a restart. A
/// CA that did not sign the certificates is refused, naming Redis.
#[test]
fn sentinel_over_tls_counts_and_follows_a_failover() {
    let dir = certificates();
    let tls = TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        ca: dir.join("one-ca.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    };
    let Some(mut set) = RedisSentinel::start_tls(&tls) else {
        return;
    };
    let url = format!("{SENTINEL_MASTER},127.0.0.1:{}", set.sentinel.data_port());
    let root = rules_root(RULES);
    let runtime = runtime();
    let env = tls_env(&dir, "sentinel", &url, "one-ca.pem");
    let p = Process::start(&root, &as_env(&env));
    let answer = call(&runtime, p.grpc, "alice").expect("counted over TLS");
    assert_eq!(answer.statuses[0].limit_remaining, 4);
    // The count is on the master (its plain port is the test's own view).
    let key_count = cli(set.master.port, &["DBSIZE"]).expect("dbsize");
    assert_eq!(key_count.trim(), "1", "one counter on the master");

    let killed = Instant::now();
    set.master.kill();
    let mut unavailable = 0;
    let recovered = crate::support::wait::blocking_some(
        Duration::from_secs(30),
        "a new master over TLS",
        || match call(&runtime, p.grpc, "bob") {
            Ok(answer) => Some(answer),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status}");
                unavailable += 1;
                None
            }
        },
    );
    eprintln!(
        "sentinel over TLS: counting again on the new master {:?} after the kill, {unavailable} \
         UNAVAILABLE answers in between",
        killed.elapsed()
    );
    assert_eq!(recovered.statuses[0].limit_remaining, 4);
    let role = cli(set.replica.port, &["ROLE"]).expect("role");
    assert!(
        role.starts_with("master"),
        "the replica was promoted: {role}"
    );

    let env = tls_env(&dir, "sentinel", &url, "two-ca.pem");
    let wrong = Process::spawn(&root, &as_env(&env));
    let refused =
        call(&runtime, wrong.grpc, "carol").expect_err("an untrusted sentinel certificate");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    assert!(refused.message().contains("redis"), "{}", refused.message());
    assert_ne!(http_get(wrong.http, "/healthcheck").map(|r| r.0), Some(200));
    drop(runtime);
    p.stop().expect("stops");
    wrong.stop().expect("stops");
}

/// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION` on Turnstile's own connection (the one a request's
/// counters go over), as the reference reads it: a server whose certificate names another host
/// is refused without it and accepted with it, while its chain is still checked (a CA that did
/// not sign it is refused even then).
#[test]
fn skipping_the_hostname_still_checks_the_chain() {
    let dir = certificates();
    leaf_with(
        &dir,
        "one",
        "elsewhere",
        &["elsewhere.example"],
        &[Usage::Server],
    );
    let Some(redis) = tls_redis(&dir, "elsewhere") else {
        return;
    };
    let url = format!("127.0.0.1:{}", redis.port);
    let root = rules_root(RULES);
    let runtime = runtime();
    let with = |ca: &str, skip: bool| {
        let mut env = tls_env(&dir, "single", &url, ca);
        env.push(("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", skip.to_string()));
        Process::spawn(&root, &as_env(&env))
    };

    let strict = with("one-ca.pem", false);
    let refused = call(&runtime, strict.grpc, "skip").expect_err("a certificate for another host");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    assert!(refused.message().contains("redis"), "{}", refused.message());

    let skipping = with("one-ca.pem", true);
    let counted = call(&runtime, skipping.grpc, "skip").expect("the chain is good, not the name");
    assert_eq!(counted.statuses[0].limit_remaining, 4);

    let untrusted = with("two-ca.pem", true);
    let refused = call(&runtime, untrusted.grpc, "skip").expect_err("a chain no CA here signed");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused}");
    assert!(refused.message().contains("redis"), "{}", refused.message());
    drop(runtime);
    for process in [strict, skipping, untrusted] {
        process.stop().expect("stops");
    }
}
