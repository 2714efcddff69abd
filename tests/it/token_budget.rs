//! Token budgets behind a real Envoy (1.40) running `deploy/envoy/token-budget.yaml` on
//! loopback, in front of the Turnstile binary on memory, memcached and Redis: every request is
//! checked without being counted (hits_addend 0), and charged, when its stream is done, the
//! tokens its upstream reported (`x-llm-total-tokens`, put into dynamic metadata). A budget of
//! 1,000 tokens a minute at 300 a response admits 4 requests (the 4th completes and takes the
//! count past the budget) and refuses the 5th; `/counters` reads 1,200; `x-ratelimit-remaining`
//! shows the budget before the response's own charge. A refund (`is_negative_hits`) lowers the
//! count, never below zero, and a refused request charges nothing.

use std::time::Duration;

use serde_json::Value;

use crate::counters_api::call;
use crate::process::{Process, metric, rules_root};
use crate::support::envoy::envoy;
use crate::support::envoy::{header, request, start_envoy, wait_for};
use crate::support::redis_server::RedisProcess;
use crate::support::{Memcached, free_port, unique, wait};

const RULES: &str = "\
domain: tokens
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000 }
";

/// The tokens counted for `user` this minute, read through `/counters`.
fn counted(p: &Process, user: &str) -> u64 {
    let path = format!("/counters?domain=tokens&entry=user={user}");
    let (status, body) = call(p.debug, "GET", &path, &[]);
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).expect("JSON");
    json["limits"][0]["count"].as_u64().expect("a count")
}

/// ShouldRateLimit calls the service has answered.
fn calls(p: &Process) -> u64 {
    let series = "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"}";
    metric(&p.metrics(), series).unwrap_or(0)
}

fn budget(env: &[(&str, &str)]) {
    let Some(binary) = envoy() else { return };
    let turnstile = Process::start(&rules_root(RULES), env);
    let (listener, admin) = (free_port(), free_port());
    let mut proxy = start_envoy(
        &binary,
        "deploy/envoy/token-budget.yaml",
        turnstile.grpc,
        listener,
        admin,
    );
    proxy.wait_ready(admin);
    // The budget is per wall-clock minute: the scenario (a few seconds) starts with at least
    // 20 s of its minute left, so that no window ends inside it. The condition waited for is
    // the clock itself.
    wait::blocking(Duration::from_secs(21), "20 s left in the minute", || {
        wait::left_in_window(60) >= 20
    });

    let ann = unique("ann");
    let who = [("x-user", ann.as_str())];
    let mut remaining = Vec::new();
    for charged in 1..=4u64 {
        let (status, headers, _) = request(listener, "/v1/chat/completions", &who);
        assert_eq!(
            status, 200,
            "request {charged} is within the budget: {headers:?}"
        );
        assert_eq!(header(&headers, "x-llm-total-tokens"), Some("300"));
        remaining.push(header(&headers, "x-ratelimit-remaining").map(str::to_owned));
        // The charge is sent when the stream is done, after the response: wait for it.
        wait_for("the response's tokens charged", || {
            counted(&turnstile, &ann) == 300 * charged
        });
    }
    // The check happens before the response is known: what a response shows is the budget
    // before its own charge. The 4th took the count from 900 to 1,200 and completed.
    let shown: Vec<Option<&str>> = remaining.iter().map(Option::as_deref).collect();
    assert_eq!(shown, [Some("1000"), Some("700"), Some("400"), Some("100")]);
    let (status, headers, _) = request(listener, "/v1/chat/completions", &who);
    assert_eq!(status, 429, "the budget is spent: {headers:?}");
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        header(&headers, "x-ratelimit-limit").map(|l| l.starts_with("1000")),
        Some(true)
    );
    assert_eq!(
        counted(&turnstile, &ann),
        1_200,
        "4 responses of 300 tokens"
    );

    // A refund lowers the count, never below zero.
    let bob = unique("bob");
    let who = [("x-user", bob.as_str())];
    assert_eq!(request(listener, "/v1/chat/completions", &who).0, 200);
    wait_for("bob charged", || counted(&turnstile, &bob) == 300);
    let (status, headers, _) = request(listener, "/refund", &who);
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-llm-refund-tokens"),
        None,
        "removed by Envoy"
    );
    wait_for("200 refunded", || counted(&turnstile, &bob) == 100);
    assert_eq!(request(listener, "/refund", &who).0, 200);
    wait_for("refunded to zero", || counted(&turnstile, &bob) == 0);

    // Every call accounted for: ann 5 checks and 4 charges (the refused request sent no charge),
    // bob 3 checks and 3 charges or refunds.
    wait_for("15 calls answered", || calls(&turnstile) >= 15);
    assert_eq!(calls(&turnstile), 15, "no call beyond the ones counted");
    assert_eq!(
        counted(&turnstile, &ann),
        1_200,
        "the refused request charged nothing"
    );
    drop(proxy);
    turnstile.stop().expect("turnstile stops cleanly");
}

#[test]
fn token_budget_on_memory() {
    budget(&[]);
}

#[test]
fn token_budget_on_memcached() {
    let Some(mc) = Memcached::start() else { return };
    let addr = mc.addr();
    budget(&[("BACKEND_TYPE", "memcache"), ("MEMCACHE_HOST_PORT", &addr)]);
}

#[test]
fn token_budget_on_redis() {
    let Some(redis) = RedisProcess::start() else {
        return;
    };
    let addr = redis.addr();
    budget(&[
        ("BACKEND_TYPE", "redis"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &addr),
    ]);
}
