//! When the counter store stops being ready, the log says why (the server and what it said),
//! not only that readiness changed.

use crate::lifecycle::Binary;
use crate::support::redis_server::{RedisProcess, cli};
use crate::support::{free_port, missing};

#[test]
fn a_refused_memcached_connection_is_named_in_the_log() {
    // Nothing listens on this port.
    let port = free_port().to_string();
    let address = format!("127.0.0.1:{port}");
    let mut p = Binary::start(&[
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", &address),
        ("LOG_LEVEL", "warn"),
    ]);
    let line = p.wait_for_log("counter store readiness changed");
    assert!(line.contains(&address), "{line}");
    assert!(line.to_ascii_lowercase().contains("refused"), "{line}");
}

#[test]
fn a_redis_that_wants_a_password_is_named_in_the_log() {
    let Some(redis) = RedisProcess::start() else {
        return missing("redis-server");
    };
    cli(redis.port, &["CONFIG", "SET", "requirepass", "s3cret"]).expect("requirepass");
    let address = redis.addr();
    let mut p = Binary::start(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &address),
        ("LOG_LEVEL", "warn"),
    ]);
    let line = p.wait_for_log("counter store readiness changed");
    assert!(
        line.contains("NOAUTH") || line.contains("Authentication required"),
        "{line}"
    );
}
