//! Who is limited, from RLQS: the requests Envoys report as denied land in `/debug/top` under
//! the rule their bucket matched, by bucket, beside what RLS refuses.

use std::net::SocketAddr;

use serde_json::Value;

use super::RULES;
use super::stream::Quotas;
use crate::process::{Process, http_get, rules_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_requests_reported_over_rlqs_are_listed_by_bucket() {
    let root = rules_root(RULES);
    let p = Process::start(&root, &[]);
    let mut q = Quotas::open(SocketAddr::from(([127, 0, 0, 1], p.grpc))).await;
    // mallory's data plane denies 40 and 30 over two reports, bob's 3; alice denies none.
    for report in [
        [("mallory", 2, 40), ("bob", 1, 3), ("alice", 1, 0)],
        [("mallory", 0, 30), ("bob", 0, 0), ("alice", 1, 0)],
    ] {
        let buckets: Vec<[(&str, &str); 1]> = report
            .iter()
            .map(|(user, _, _)| [("user", *user)])
            .collect();
        let usages: Vec<_> = report
            .iter()
            .zip(&buckets)
            .map(|((_, allowed, denied), bucket)| (&bucket[..], *allowed, *denied))
            .collect();
        q.report("rlqs", &usages).await.expect("an answer");
    }
    let (status, body) = http_get(p.debug, "/debug/top?limit=5").expect("/debug/top");
    assert_eq!(status, 200, "{body}");
    let top: Value = serde_json::from_str(&body).expect("JSON");
    let rule = &top["rules"][0];
    assert_eq!(rule["rule"], "rlqs.user", "{top}");
    assert_eq!(rule["refused"], 73, "{rule}");
    let listed: Vec<(String, u64)> = rule["over_limit"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            let value = v["descriptor"]["entries"][0][1].as_str().expect("value");
            (value.to_owned(), v["count"].as_u64().expect("count"))
        })
        .collect();
    let expected = [("mallory".to_owned(), 70), ("bob".to_owned(), 3)];
    assert_eq!(listed, expected, "alice denied nothing: {rule}");
}
