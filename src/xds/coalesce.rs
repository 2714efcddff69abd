//! Pushes coalesced: every state-of-the-world response is the whole rule set, so of the responses
//! that arrive while one is compiled (or within [`MIN_RELOAD_INTERVAL`] of the last reload) only
//! the newest is compiled, and only it is answered, with its nonce (ACK with its version, or NACK).
//! The superseded ones are not answered: their nonces are stale once a newer response is sent,
//! and a management server ignores requests that carry a stale nonce (go-control-plane does).
//! A control plane that pushes without waiting for ACKs then costs at most ten reloads (and
//! their log lines) a second, not one per push.
//!
//! Must not touch: compiling, ACK/NACK contents (the parent module's).

use std::time::Duration;

use tokio::time::Instant;
use tonic::Streaming;

use crate::pb::envoy::service::discovery::v3::DiscoveryResponse;

/// The least time between two reloads of pushed rules.
pub(super) const MIN_RELOAD_INTERVAL: Duration = Duration::from_millis(100);

/// The newest response: `first`, or one that arrived after it before `ready_at` (or that was
/// already waiting); with how many it replaced. `Err` when the stream ended or failed.
pub(super) async fn newest(
    responses: &mut Streaming<DiscoveryResponse>,
    mut newest: DiscoveryResponse,
    ready_at: Instant,
) -> Result<(DiscoveryResponse, u64), Option<tonic::Status>> {
    let mut superseded = 0;
    loop {
        // `message` is cancel safe: a response is either taken here or stays for the next call.
        tokio::select! {
            biased;
            next = responses.message() => match next {
                Ok(Some(response)) => {
                    newest = response;
                    superseded += 1;
                }
                Ok(None) => return Err(None),
                Err(status) => return Err(Some(status)),
            },
            () = tokio::time::sleep_until(ready_at) => return Ok((newest, superseded)),
        }
    }
}
