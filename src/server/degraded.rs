//! What `/healthcheck` says while the process serves degraded: a counter store unreachable
//! while its calls are decided locally, or a store still deciding locally since it failed, in
//! words an operator reads (the share each limit is divided by, since when, why).
//!
//! Must not touch: readiness itself (the watcher in `server::mod` decides it), the local mode.

use std::time::Duration;

use crate::rls::ServiceState;
use crate::storage::CounterStore;

/// How the process is degraded, if it is: a store that fails while decisions are local.
pub(super) fn degraded<S: CounterStore>(
    state: &ServiceState<S>,
    ready: &Result<(), String>,
    down_since: Option<std::time::SystemTime>,
) -> Option<String> {
    let readings = state.limiter.outage_readings();
    let unreachable = match (ready, down_since) {
        (Err(why), Some(since)) if state.limiter.decides_locally() => Some((why.as_str(), since)),
        _ => None,
    };
    let first_local = readings
        .local_since
        .first()
        .map(|(store, since_ms)| (format!("{store:?}"), *since_ms));
    describe_degraded(unreachable, readings.replicas, first_local)
}

/// The words of [`degraded`]: the store unreachable since a time (with why) while calls are
/// decided locally, else the first store still deciding locally (its name, the Unix
/// millisecond it failed); `replicas`, the count each limit is shared by, if learned.
fn describe_degraded(
    unreachable: Option<(&str, std::time::SystemTime)>,
    replicas: Option<u64>,
    first_local: Option<(String, u64)>,
) -> Option<String> {
    let portion = match replicas {
        Some(n) => format!("this replica's share of each limit (1/{n})"),
        None => "(no replica count learned yet: calls fail)".to_owned(),
    };
    if let Some((why, since)) = unreachable {
        return Some(format!(
            "counter store unreachable since {} ({why}); deciding locally with {portion}",
            humantime::format_rfc3339_seconds(since)
        ));
    }
    first_local.map(|(store, since_ms)| {
        let since = std::time::UNIX_EPOCH + Duration::from_millis(since_ms);
        format!(
            "the {store} counter store failed at {}; deciding locally with {portion} \
             until it answers",
            humantime::format_rfc3339_seconds(since)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_readiness_says_how_it_decides_in_plain_words() {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let main = || Some(("Main".to_owned(), 1_796_000_000_000));
        let down = describe_degraded(Some(("connection refused", at)), Some(2), main());
        assert_eq!(
            down.as_deref(),
            Some(
                "counter store unreachable since 2026-11-30T00:53:20Z (connection refused); \
                 deciding locally with this replica's share of each limit (1/2)"
            )
        );
        let still = describe_degraded(None, Some(2), main());
        assert_eq!(
            still.as_deref(),
            Some(
                "the Main counter store failed at 2026-11-30T00:53:20Z; deciding locally with \
                 this replica's share of each limit (1/2) until it answers"
            )
        );
        let early = describe_degraded(None, None, main()).unwrap_or_default();
        assert!(early.ends_with("(no replica count learned yet: calls fail) until it answers"));
        assert_eq!(describe_degraded(None, Some(2), None), None);
    }
}
