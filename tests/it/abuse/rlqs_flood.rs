//! RLQS beside RLS (issue 52): a report in work counts in its client's requests open and waits
//! at its client's gate first, so one client's streams sending reports without pause get that
//! client's part (their next reports left unread meanwhile) while another client's
//! `ShouldRateLimit` calls are answered. Distinct peers are distinct loopback addresses.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use turnstile::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use turnstile::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

use super::peers::{a_well_behaved_peer_is_answered, channel_from};
use crate::backends::Backend;
use crate::process::{Process, metric, rules_root};
use crate::support::until;

const HOG: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// A report of one request allowed in the bucket `{user: value}`.
fn report(value: String) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "rlqs".into(),
        bucket_quota_usages: vec![BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user".to_owned(), value)].into(),
            }),
            time_elapsed: None,
            num_requests_allowed: 1,
            num_requests_denied: 0,
        }],
    }
}

/// The flood's tasks, aborted when dropped (before the service, also when the test fails):
/// a sender blocked on a full stream would keep its stream open, and the service drains open
/// streams when it stops.
struct Aborted(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Aborted {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rlqs_flood_waits_at_its_peers_gate_while_a_grpc_peer_is_answered() {
    // On memcached, so that a report stays in work over a round trip (on memory one is
    // assigned within one poll and few are open at once).
    let Some(store) = Backend::Memcached.env() else {
        return;
    };
    let root = rules_root(crate::rlqs::RULES);
    // The door's budget by count at its least, 16: the flooding peer's part is 32 requests
    // open, below its 64 streams each with a report in work.
    let mut env = store.pairs();
    env.push(("GRPC_FAIR_REQUESTS_OPEN", "16"));
    let p = Process::start(&root, &env);
    let client = RateLimitQuotaServiceClient::new(channel_from(HOG, p.grpc).await);
    let mut tasks = Aborted(Vec::new());
    for s in 0..64 {
        let (tx, rx) = mpsc::channel(16);
        let mut client = client.clone();
        let mut answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(rx))
            .await
            .expect("stream opened")
            .into_inner();
        tasks.0.push(tokio::spawn(async move {
            for n in 0u64.. {
                if tx
                    .send(report(format!("flood-{s}-{}", n % 100)))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }));
        tasks.0.push(tokio::spawn(async move {
            while let Ok(Some(_)) = answers.message().await {}
        }));
    }
    until(Duration::from_secs(20), "the RLQS flood under way", || {
        metric(&p.metrics(), "turnstile_rlqs_reports_total").unwrap_or(0) >= 2_000
    })
    .await;
    a_well_behaved_peer_is_answered(p.grpc, "rlqs").await;
    let metrics = p.metrics();
    drop(tasks);
    let paused = metric(&metrics, "turnstile_peer_reads_paused_total").unwrap_or(0);
    assert!(
        paused > 0,
        "the flood's reports waited at its gate: {paused}"
    );
    assert_eq!(
        metric(&metrics, "turnstile_rlqs_refused_total"),
        Some(0),
        "{metrics}"
    );
}
