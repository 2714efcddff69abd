//! `/debug/top` on memory, memcached and Redis: 1,000 users send 10 calls each (5 over their
//! limit) while one sends 2,000; the flooding value is first with its 1,995 refusals within
//! the stated error bound, near-limit values are listed apart, hostile values come back as the
//! client sent them (JSON-escaped) and as escaped labels under `TOP_LIMITED_SERIES`; with
//! `ADMIN_TOKEN_FILE` the page and its JSON need the token (Bearer or Basic).

use futures_util::StreamExt;
use serde_json::Value;

use super::RULES;
use crate::backends::Backend;
use crate::counters_api::call;
use crate::process::{Process, http_get, rules_root};
use crate::support::{req1, wait};

const FLOODER: &str = "mallory";
const HOSTILE: &str = "<script>alert(1)</script>\"\n";

/// 1,000 users × 10 calls, the flooder's 2,000 and the hostile value's 7, 32 at a time.
async fn flood(p: &Process) {
    let client = p.client().await;
    let mut users: Vec<String> = (0..1_000)
        .flat_map(|i| std::iter::repeat_n(format!("user-{i}"), 10))
        .collect();
    users.extend(std::iter::repeat_n(FLOODER.to_owned(), 2_000));
    users.extend(std::iter::repeat_n(HOSTILE.to_owned(), 7));
    let calls = futures_util::stream::iter(users).map(|user| {
        let mut client = client.clone();
        async move {
            client
                .should_rate_limit(req1("shop", &[("user", &user)]))
                .await
                .expect("a decision")
        }
    });
    let answered = calls.buffer_unordered(32).count().await;
    assert_eq!(answered, 12_007);
}

fn top(p: &Process) -> Value {
    let (status, body) = http_get(p.debug, "/debug/top?limit=5").expect("/debug/top");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

async fn scenario(env: &[(&str, &str)]) {
    let root = rules_root(RULES);
    let mut env = env.to_vec();
    env.push(("TOP_LIMITED_SERIES", "3"));
    let p = Process::start(&root, &env);
    // Counted per wall-clock hour: the flood (seconds) starts with a minute of its hour left,
    // so that no window ends inside it and every count below is exact.
    wait::window_left(3600, 60).await;
    flood(&p).await;
    let top = top(&p);
    let rule = &top["rules"][0];
    assert_eq!(rule["rule"], "shop.user", "{top}");
    // Every user past 5 is refused: 1,000 × 5, the flooder's 1,995 and the hostile value's 2.
    let refused = 5_000 + 1_995 + 2;
    assert_eq!(rule["refused"], refused, "{rule}");
    let first = &rule["over_limit"][0];
    assert_eq!(first["descriptor"]["entries"][0][1], FLOODER, "{rule}");
    let (count, error) = (first["count"].as_u64(), first["error"].as_u64());
    let (count, error) = (count.expect("count"), error.expect("error"));
    assert!(count >= 1_995 && count - error <= 1_995, "{first}");
    assert!(
        error <= refused / top["entries"].as_u64().expect("entries"),
        "{first}"
    );
    // Near the limit (above 80 % of 5: the 5th call) every user, once.
    assert_eq!(rule["near"], 1_002, "{rule}");
    // The hostile value: its text, exactly, after the JSON is read. Refused last, it is in the
    // current epoch's summary; the merged window lists up to EPOCHS × ENTRIES = 96 values (a
    // minute boundary inside the flood makes it more than 32), so ask for all of them.
    let (_, raw) = http_get(p.debug, "/debug/top?limit=96").expect("/debug/top");
    let all: Value = serde_json::from_str(&raw).expect("JSON");
    let listed = all["rules"][0]["over_limit"]
        .as_array()
        .expect("list")
        .clone();
    let hostile = listed
        .iter()
        .find(|v| v["descriptor"]["entries"][0][1] == HOSTILE);
    assert!(hostile.is_some(), "the hostile value is listed: {listed:?}");
    // TOP_LIMITED_SERIES=3: three series per kind, the flooder first, labels escaped.
    let metrics = p.metrics();
    let series: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("turnstile_top_limited_hits{") && l.contains("over_limit"))
        .collect();
    assert_eq!(series.len(), 3, "{series:?}");
    assert!(
        series[0].contains(r#"rank="1",descriptor="user=mallory""#),
        "{series:?}"
    );
    assert!(
        !metrics.contains("<script>alert(1)</script>\"\n"),
        "a raw quote and newline would break the exposition"
    );
    drop(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flooding_value_is_first_on_memory() {
    on(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flooding_value_is_first_on_memcached() {
    on(Backend::Memcached).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flooding_value_is_first_on_redis() {
    on(Backend::Redis).await;
}

/// The scenario on `backend`'s store.
async fn on(backend: Backend) {
    if let Some(store) = backend.env() {
        scenario(&store.pairs()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_json_need_the_admin_token_when_one_is_set() {
    let root = rules_root(RULES);
    let token = root.join("admin-token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let path = token.to_str().expect("path");
    let p = Process::start(&root, &[("ADMIN_TOKEN_FILE", path)]);
    for page in ["/", "/debug/status", "/debug/top"] {
        let (status, _) = call(p.debug, "GET", page, &[]);
        assert_eq!(status, 401, "{page} without the token");
        let (status, _) = call(p.debug, "GET", page, &[("Authorization", "Bearer nope")]);
        assert_eq!(status, 401, "{page} with a wrong token");
        let (status, body) = call(p.debug, "GET", page, &[("Authorization", "Bearer s3cret")]);
        assert_eq!(status, 200, "{page}: {body}");
        // What a browser sends once asked: any user, the token as the password.
        let basic = "Basic YWRtaW46czNjcmV0"; // admin:s3cret
        let (status, _) = call(p.debug, "GET", page, &[("Authorization", basic)]);
        assert_eq!(status, 200, "{page} with Basic authentication");
    }
    // The script and style hold no data: served to anyone, so the browser can ask for them.
    assert_eq!(http_get(p.debug, "/status.js").map(|r| r.0), Some(200));
}
