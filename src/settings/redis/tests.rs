//! The Redis settings from a map: the reference's forms, refusals by name, TLS, the per-second
//! mirror.

use std::time::Duration;

use super::super::tests::with;
use super::super::{Backend, SettingsError};
use super::*;

fn redis(pairs: &[(&str, &str)]) -> Result<RedisSettings, SettingsError> {
    let mut all = vec![("BACKEND_TYPE", "redis")];
    all.extend_from_slice(pairs);
    match with(&all)?.backend {
        Backend::Redis(r) => Ok(r),
        other => panic!("redis backend expected, got {other:?}"),
    }
}

#[test]
fn redis_settings_take_the_references_forms() {
    let d = redis(&[]).expect("defaults");
    assert_eq!(
        d.target,
        RedisTarget::Unix("/var/run/nutcracker/ratelimit.sock".into())
    );
    assert_eq!((d.pool_size, d.timeout), (10, Duration::from_secs(10)));
    assert_eq!(d.key_layout, KeyLayout::Reference);
    let tcp = redis(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:6379"),
        ("REDIS_AUTH", "u:p"),
    ])
    .expect("tcp");
    assert_eq!(tcp.target, RedisTarget::Tcp("r:6379".into()));
    let auth = tcp.auth.expect("auth");
    assert_eq!(
        (auth.user.as_deref(), auth.password.as_str()),
        (Some("u"), "p")
    );
    assert!(
        !format!("{auth:?}").contains("\"p\""),
        "the password never reaches a log"
    );
    let cluster = redis(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", "a:1,b:2"),
    ])
    .expect("cluster");
    assert_eq!(
        cluster.target,
        RedisTarget::Cluster(vec!["a:1".into(), "b:2".into()])
    );
    let sentinel = redis(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "sentinel"),
        ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
        ("REDIS_SENTINEL_AUTH", "secret"),
    ])
    .expect("sentinel");
    let shown = format!("{sentinel:?}");
    assert!(!shown.contains("secret"), "a password in Debug: {shown}");
    let RedisTarget::Sentinel {
        master,
        sentinels,
        sentinel_auth,
    } = sentinel.target
    else {
        panic!("sentinel expected");
    };
    assert_eq!((master.as_str(), sentinels.len()), ("mymaster", 2));
    assert_eq!(sentinel_auth.map(|a| a.password), Some("secret".into()));
}

#[test]
fn unsupported_redis_settings_are_refused_by_name() {
    for (name, value) in [
        ("REDIS_PERSECOND", "maybe"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "maybe"),
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "maybe"),
        ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
        ("REDIS_TYPE", "ring"),
        ("REDIS_KEY_LAYOUT", "mine"),
    ] {
        let err = redis(&[(name, value)]).expect_err(name).to_string();
        assert!(err.contains(name), "{name}: {err}");
    }
    let err = redis(&[("REDIS_TYPE", "cluster")])
        .expect_err("unix cluster")
        .to_string();
    assert!(err.contains("REDIS_SOCKET_TYPE"), "{err}");
}

#[test]
fn tls_goes_with_every_tcp_topology_and_not_with_a_unix_socket() {
    for (kind, url) in [
        ("single", "r:6379"),
        ("cluster", "a:1,b:2"),
        ("sentinel", "mymaster,s1:26379"),
    ] {
        let tls = redis(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", kind),
            ("REDIS_URL", url),
            ("REDIS_TLS", "true"),
        ])
        .expect(kind);
        assert!(tls.tls.is_some(), "{kind}");
    }
    let err = redis(&[("REDIS_TLS", "true")])
        .expect_err("TLS over a unix socket")
        .to_string();
    assert!(
        err.contains("REDIS_TLS") && err.contains("REDIS_SOCKET_TYPE=unix"),
        "{err}"
    );
}

#[test]
fn stop_increment_and_active_connection_health_are_accepted() {
    assert!(!redis(&[]).expect("defaults").stop_increment_when_over_limit);
    let on = redis(&[
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true"),
    ])
    .expect("accepted");
    assert!(on.stop_increment_when_over_limit);
}

#[test]
fn the_per_second_redis_mirrors_the_settings() {
    assert_eq!(redis(&[]).expect("defaults").per_second, None);
    let both = redis(&[
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "main:6379"),
        ("REDIS_KEY_LAYOUT", "turnstile"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_TYPE", "cluster"),
        ("REDIS_PERSECOND_URL", "a:7000,b:7000"),
        ("REDIS_PERSECOND_AUTH", "user:pw"),
    ])
    .expect("both");
    let second = both.per_second.expect("a per-second Redis");
    assert_eq!(
        second.target,
        RedisTarget::Cluster(vec!["a:7000".into(), "b:7000".into()])
    );
    assert_eq!(second.auth.map(|a| a.password), Some("pw".into()));
    assert_eq!(second.key_layout, KeyLayout::Turnstile, "the main layout");
    let err = redis(&[
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_TYPE", "ring"),
    ])
    .expect_err("bad mirror")
    .to_string();
    assert!(err.contains("REDIS_PERSECOND_TYPE"), "{err}");
}
