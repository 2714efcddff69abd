//! The pipelined connection a single Redis's fixed-window hits travel on: it authenticates as
//! `REDIS_AUTH` says (a password, or an ACL user and password), speaks over a unix socket as
//! over TCP, and a refused password is said in Redis's words.

use turnstile::clock::{Clock, ManualClock, SystemClock};
use turnstile::storage::redis::{RedisAuth, RedisTarget};
use turnstile::storage::{Change, CounterKey, CounterOp, CounterStore};

use crate::support::redis_server::{RedisProcess, cli, redis_store_as};
use crate::support::unique;

fn add(key: &str, n: u64, expires_at: u64) -> CounterOp {
    CounterOp {
        key: CounterKey::checked(key).expect("key"),
        change: Change::Add(n),
        expires_at,
    }
}

/// Two adds and a read of one key, then the same key's count as Redis holds it.
async fn counts_through(target: RedisTarget, auth: Option<RedisAuth>, port: u16) {
    let clock = ManualClock::new(SystemClock.now_secs());
    let store = redis_store_as(target.clone(), auth, &clock);
    let key = unique("pipe");
    let until = clock.now_secs() + 60;
    let counts = store
        .apply_ops(&[
            add(&key, 2, until),
            add(&key, 0, until),
            add(&key, 3, until),
        ])
        .await
        .unwrap_or_else(|e| panic!("{target:?}: {e}"));
    assert_eq!(counts, vec![2, 2, 5], "{target:?}");
    let held = cli(
        port,
        &["--pass", "s3cret", "--no-auth-warning", "GET", &key],
    );
    assert_eq!(held.map(|v| v.trim().to_owned()), Some("5".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipe_authenticates_and_counts_over_tcp_and_a_unix_socket() {
    let socket = std::env::temp_dir().join(format!("{}.sock", unique("redis")));
    let socket_text = socket.to_string_lossy().into_owned();
    let Some(redis) = RedisProcess::start_with(&["--unixsocket", &socket_text]) else {
        return;
    };
    cli(redis.port, &["CONFIG", "SET", "requirepass", "s3cret"]).expect("requirepass");
    let acl = [
        "--pass",
        "s3cret",
        "--no-auth-warning",
        "ACL",
        "SETUSER",
        "limiter",
    ];
    cli(
        redis.port,
        &[&acl[..], &["on", ">pw", "~*", "+@all"]].concat(),
    )
    .expect("acl user");
    let password = RedisAuth::parse("s3cret");
    counts_through(RedisTarget::Tcp(redis.addr()), password.clone(), redis.port).await;
    counts_through(RedisTarget::Unix(socket_text), password, redis.port).await;
    let user = RedisAuth::parse("limiter:pw");
    counts_through(RedisTarget::Tcp(redis.addr()), user, redis.port).await;

    let clock = ManualClock::new(SystemClock.now_secs());
    let wrong = RedisAuth::parse("limiter:nope");
    let store = redis_store_as(RedisTarget::Tcp(redis.addr()), wrong, &clock);
    let refused = store
        .apply_ops(&[add(&unique("pipe"), 1, clock.now_secs() + 60)])
        .await
        .expect_err("a wrong password counts nothing");
    assert!(refused.to_string().contains("WRONGPASS"), "{refused}");
}

/// A Redis connection that stays open and answers nothing (a relay freezes every connection
/// open, new ones pass) is given up by the first call that times out on it with no reply read:
/// the next call dials a new one (issue 51: every call waited REDIS_TIMEOUT and failed, for
/// good). One caller, calls in a row: at most two fail (the pipe replaced within
/// 2 x `REDIS_TIMEOUT`), and every call after is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_pipe_is_closed_and_dialled_again() {
    use crate::support::process::{Process, rules_root};
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let relay = crate::support::proxy::Proxy::start(&redis.addr()).await;
    let rules = "domain: hung\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1000 }\n";
    let addr = relay.addr();
    let p = Process::start(
        &rules_root(rules),
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &addr),
            ("REDIS_TIMEOUT", "300ms"),
        ],
    );
    let mut client = p.client().await;
    let call = crate::support::req1("hung", &[("user", &unique("u"))]);
    assert!(client.should_rate_limit(call.clone()).await.is_ok());
    let before = relay.connections();
    relay.freeze_open();
    let mut failed = 0;
    loop {
        match client.should_rate_limit(call.clone()).await {
            Ok(_) => break,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                failed += 1;
                assert!(
                    failed <= 2,
                    "the hung connection was not replaced: {status:?}"
                );
            }
        }
    }
    eprintln!("hung Redis pipe: {failed} calls failed before it was replaced");
    assert!(relay.connections() > before, "a new connection was dialled");
    for _ in 0..20 {
        assert!(client.should_rate_limit(call.clone()).await.is_ok());
    }
}
