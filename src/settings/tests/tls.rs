//! The TLS settings: memcached's, the gRPC server's client check, and the client certificate
//! and key that go together for every client.

use super::*;

#[test]
fn memcached_tls_is_for_the_pipelined_client_with_whole_files() {
    let base = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", "mc:11211"),
        ("MEMCACHE_TLS", "true"),
    ];
    let with_more = |more: &[(&str, &str)]| {
        let mut all = base.to_vec();
        all.extend_from_slice(more);
        with(&all)
    };
    let Backend::Memcached(m) = with_more(&[("MEMCACHE_TLS_CACERT", "/ca.pem")])
        .expect("TLS")
        .backend
    else {
        panic!("memcached backend expected");
    };
    let tls = m.tls.expect("TLS on");
    assert_eq!(tls.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
    assert!(tls.client.is_none() && !tls.skip_hostname_verification);
    let refused = |more: &[(&str, &str)], name: &str| {
        let errors = with_more(more).expect_err("refused").to_string();
        assert!(errors.contains(name), "{name} in {errors}");
    };
    refused(&[("MEMCACHE_CLIENT", "pool")], "MEMCACHE_TLS");
    refused(&[("MEMCACHE_CLASSIC_PROTOCOL", "true")], "MEMCACHE_TLS");
    refused(
        &[("MEMCACHE_TLS_CLIENT_CERT", "/c.pem")],
        "MEMCACHE_TLS_CLIENT_KEY",
    );
    refused(
        &[("MEMCACHE_TLS_CLIENT_KEY", "/c.key")],
        "MEMCACHE_TLS_CLIENT_CERT",
    );
}

#[test]
fn grpc_client_tls_san_needs_the_client_ca() {
    let tls = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/s.pem"),
        ("GRPC_SERVER_TLS_KEY", "/s.key"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.local"),
    ];
    let errors = with(&tls).expect_err("no CA").to_string();
    assert!(errors.contains("GRPC_CLIENT_TLS_SAN"), "{errors}");
    let mut with_ca = tls.to_vec();
    with_ca.push(("GRPC_CLIENT_TLS_CACERT", "/ca.pem"));
    let s = with(&with_ca).expect("with the CA");
    let server = s.tls.expect("TLS");
    assert_eq!(server.client_san.as_deref(), Some("envoy.local"));
}

/// Every client's certificate needs its key and the other way round, said in the same words.
#[test]
fn a_client_certificate_without_its_key_is_said_alike_for_every_client() {
    /// The settings that turn a client's TLS on, its certificate's variable and its key's.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            &[
                ("BACKEND_TYPE", "memcache"),
                ("MEMCACHE_HOST_PORT", "m:11211"),
                ("MEMCACHE_TLS", "true"),
            ],
            "MEMCACHE_TLS_CLIENT_CERT",
            "MEMCACHE_TLS_CLIENT_KEY",
        ),
        (
            &[
                ("BACKEND_TYPE", "redis"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_URL", "r:6379"),
                ("REDIS_TLS", "true"),
            ],
            "REDIS_TLS_CLIENT_CERT",
            "REDIS_TLS_CLIENT_KEY",
        ),
        (
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_URL", "cp:18000"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ],
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
        ),
        (
            &[("TRACING_ENABLED", "true")],
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        ),
    ];
    for (base, cert, key) in cases {
        for (set, missing) in [(cert, key), (key, cert)] {
            let mut vars = base.to_vec();
            vars.push((set, "/file.pem"));
            let errors = with(&vars).expect_err("refused").to_string();
            let said = format!("needed with {set}: a client certificate and its key go together");
            assert!(
                errors.contains(missing) && errors.contains(&said),
                "{set} alone: {errors}"
            );
        }
    }
}
