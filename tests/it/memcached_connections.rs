//! How many connections the pipelined memcached client holds to each server, counted in the
//! kernel's TCP table and by `turnstile_memcached_connections`: one per worker thread of the
//! runtime by default (at most four), `MEMCACHE_PIPELINED_CONNECTIONS` when it is set.

use crate::process::{Process, RULES, metric, rules_root};
use crate::support::{Memcached, req1, unique};

/// TCP connections established to `port` on 127.0.0.1, in the kernel's table (every process's;
/// the test's memcached is its own, on a fresh port). A connection that was opened and closed,
/// such as the probe that saw memcached start, is in `TIME_WAIT`, not counted.
fn established_to(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    let established = table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"01")
        })
        .count();
    u64::try_from(established).expect("a count")
}

/// Starts Turnstile on a runtime of `workers` threads on one fresh memcached with `env`, makes
/// eight calls (the client takes its connections round robin, so eight reach every one of
/// them), and returns how many connections to memcached are open and how many the metric says
/// Turnstile holds (`None` without memcached).
async fn connections_with(env: &[(&str, &str)], workers: usize) -> Option<(u64, Option<u64>)> {
    let mc = Memcached::start()?;
    let server = mc.addr();
    let mut all = vec![
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", &server),
    ];
    all.extend_from_slice(env);
    let p = Process::start_on(&rules_root(RULES), &all, workers);
    let mut client = p.client().await;
    let user = unique("conn");
    for _ in 0..8 {
        client
            .should_rate_limit(req1("ops", &[("user", &user)]))
            .await
            .expect("call answered");
    }
    let from_turnstile = established_to(mc.port);
    let series = format!("turnstile_memcached_connections{{server=\"{server}\"}}");
    Some((from_turnstile, metric(&p.metrics(), &series)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_per_runtime_worker_by_default_at_most_four() {
    for (workers, connections) in [(1, 1u64), (2, 2), (6, 4)] {
        let Some(got) = connections_with(&[], workers).await else {
            return;
        };
        assert_eq!(got, (connections, Some(connections)), "{workers} workers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_many_connections_as_set() {
    for n in [1u64, 3, 6] {
        let set = n.to_string();
        let Some(got) = connections_with(&[("MEMCACHE_PIPELINED_CONNECTIONS", &set)], 2).await
        else {
            return;
        };
        assert_eq!(got, (n, Some(n)), "MEMCACHE_PIPELINED_CONNECTIONS={n}");
    }
}
