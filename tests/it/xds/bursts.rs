//! A control plane that pushes without waiting for ACKs: the pushes are coalesced (only the
//! newest waiting one is compiled and answered), the last version is in force and ACKed with
//! its own nonce, and the superseded pushes are counted.

use std::time::Duration;

use turnstile::pb::ratelimit::config::ratelimit::v3::RateLimitUnit;

use super::server::{AdsServer, Shared};
use super::{codes, limit, loopback, ok_then_over, start, version_in_force};
use crate::process::metric;
use crate::support::until;

const PUSHES: u32 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_faster_than_reloads_are_coalesced_and_the_newest_is_acked() {
    let shared = Shared::default();
    shared.set(
        "v0",
        vec![limit("first", "burst", "user", RateLimitUnit::Hour, 1)],
    );
    let ads = AdsServer::start(loopback(), shared.clone(), None);
    let p = start(ads.addr, &[]);
    assert_eq!(codes(&p, "burst", "ann", 2).await, ok_then_over(1));

    // Version vN allows N + 1 calls an hour, so the version in force is seen in the answers.
    let snapshots = (1..=PUSHES)
        .map(|n| {
            let config = limit("push", "burst", "user", RateLimitUnit::Hour, n + 1);
            (format!("v{n}"), vec![config])
        })
        .collect();
    shared.burst(snapshots);
    let last = format!("v{PUSHES}");
    until(Duration::from_secs(10), "the last push is in force", || {
        version_in_force(&p).as_deref() == Some(last.as_str())
    })
    .await;
    assert_eq!(
        codes(&p, "burst", "bob", PUSHES as usize + 2).await,
        ok_then_over(PUSHES as usize + 1),
        "the last push's limit counts"
    );

    // The newest push is ACKed with its own nonce; far fewer pushes were compiled than sent.
    let (last_nonce, _) = shared.sent().last().cloned().expect("pushes sent");
    until(Duration::from_secs(5), "the last push is ACKed", || {
        shared
            .seen()
            .iter()
            .any(|r| r.nonce == last_nonce && r.version == last && r.error.is_none())
    })
    .await;
    let text = p.metrics();
    let compiled = metric(&text, "turnstile_config_source_updates_total").expect("updates");
    let superseded = metric(&text, "turnstile_config_source_superseded_total").expect("superseded");
    assert!(
        compiled < u64::from(PUSHES) / 4,
        "{compiled} of {PUSHES} pushes compiled"
    );
    assert_eq!(
        compiled - 1 + superseded,
        u64::from(PUSHES),
        "every push after v0 was either compiled or superseded"
    );
    let answered = shared.seen().iter().filter(|r| !r.nonce.is_empty()).count();
    assert!(
        answered < PUSHES as usize / 4,
        "{answered} answers to {PUSHES} pushes"
    );
}
