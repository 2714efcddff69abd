//! Settings from a map instead of the process environment.

use super::*;
use std::collections::HashMap;

fn with(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    Settings::from_env(&move |k| map.get(k).cloned(), None)
}

#[test]
fn defaults_match_the_reference() {
    let s = with(&[]).expect("defaults");
    assert_eq!((s.grpc_host.as_str(), s.grpc_port), ("0.0.0.0", 8081));
    assert_eq!(
        s.config_dir,
        PathBuf::from("/srv/runtime_data/current/config")
    );
    assert_eq!(
        s.backend,
        Backend::Memory {
            max_keys: 1_000_000
        }
    );
    assert_eq!(s.header_names.limit, "RateLimit-Limit");
    let m = with(&[
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", "a:1, b:2"),
    ])
    .expect("memcached");
    let Backend::Memcached(m) = m.backend else {
        panic!("memcached backend expected");
    };
    assert_eq!(m.jitter_max_seconds, 300);
    assert_eq!(m.timeout, Duration::from_millis(100));
    assert_eq!(m.transport, MemcachedTransport::Pipelined);
    assert_eq!(
        m.servers,
        MemcachedServers::List(vec!["a:1".into(), "b:2".into()])
    );
}

#[test]
fn runtime_directories_compose() {
    let s = with(&[
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ])
    .expect("ok");
    assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
}

#[test]
fn bad_values_name_the_setting() {
    let e = with(&[("GRPC_PORT", "80x")]).expect_err("bad port");
    assert_eq!(e.name, "GRPC_PORT");
    let e = with(&[("SHADOW_MODE", "yes")]).expect_err("bad bool");
    assert_eq!(e.name, "SHADOW_MODE");
    let e = with(&[("BACKEND_TYPE", "memcache")]).expect_err("no servers");
    assert_eq!(e.name, "MEMCACHE_HOST_PORT");
}

#[test]
fn go_durations() {
    assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("10"), None);
}
