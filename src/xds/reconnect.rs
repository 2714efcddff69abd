//! The pauses between attempts to reach the ADS server: exponential after failed connections
//! (from `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, ×1.6 as gRPC's own backoff, up to
//! `XDS_CLIENT_BACKOFF_MAX_INTERVAL`), the fixed `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`
//! after a stream that was up; each pause spread by up to `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`
//! either way when `XDS_CLIENT_BACKOFF_JITTER` is on, so replicas do not reconnect in step. The
//! schedule and the spread are `crate::backoff`'s; this module owns when each applies.

use std::time::Duration;

use crate::backoff::{Schedule, spread};
use crate::settings::XdsBackoff;

/// gRPC's own growth between connection attempts.
const MULTIPLIER: f64 = 1.6;

#[derive(Debug)]
pub(super) struct Reconnect {
    settings: XdsBackoff,
    schedule: Schedule,
    /// Failed connections since the last one that succeeded.
    failures: u32,
}

impl Reconnect {
    pub(super) fn new(settings: XdsBackoff) -> Self {
        Self {
            schedule: Schedule::new(settings.initial, settings.max, MULTIPLIER),
            settings,
            failures: 0,
        }
    }

    /// A connection succeeded: the next failure starts again from the initial pause.
    pub(super) fn connected(&mut self) {
        self.failures = 0;
    }

    /// The pause after a failed connection; the one after it is longer.
    pub(super) fn after_failed_connection(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.spread(self.schedule.after(self.failures))
    }

    /// The pause after a stream that was up ended.
    pub(super) fn after_stream(&self) -> Duration {
        self.spread(self.settings.stream_retry)
    }

    fn spread(&self, pause: Duration) -> Duration {
        match self.settings.jitter {
            true => spread(pause, self.settings.random_factor),
            false => pause,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(jitter: bool) -> XdsBackoff {
        XdsBackoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            random_factor: 0.5,
            jitter,
            stream_retry: Duration::from_secs(3),
        }
    }

    #[test]
    fn failed_connections_back_off_to_the_maximum_and_start_over_when_connected() {
        let mut b = Reconnect::new(settings(false));
        let pauses: Vec<u64> = (0..6)
            .map(|_| b.after_failed_connection().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [10_000, 16_000, 25_600, 40_960, 60_000, 60_000]);
        b.connected();
        assert_eq!(b.after_failed_connection(), Duration::from_secs(10));
        assert_eq!(b.after_stream(), Duration::from_secs(3));
    }

    #[test]
    fn jitter_spreads_within_the_random_factor() {
        let b = Reconnect::new(settings(true));
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let pause = b.after_stream();
            assert!(
                pause >= Duration::from_millis(1500) && pause <= Duration::from_millis(4500),
                "{pause:?}"
            );
            seen.insert(pause.as_millis());
        }
        assert!(seen.len() > 20, "pauses are spread: {}", seen.len());
    }
}
