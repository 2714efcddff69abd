//! Telling Turnstile's own saturation from a slow store when a deadline passes: the deadline's
//! timer fires when the runtime gets to it, so how late it fired is the runtime's scheduling
//! delay at that moment. A deadline that fired well after it was due means the answer may have
//! been waiting, unread, while the runtime was busy: that call is Turnstile's overload
//! (`RESOURCE_EXHAUSTED`), never evidence against the store. So does a runtime whose ready
//! tasks recently waited long to be polled (a sampler measures it): a reader task waits as long
//! before it reads an answer that has arrived. A deadline that fired on time on a runtime that
//! keeps up is the store's lateness (`UNAVAILABLE`).
//!
//! Must not touch: connections, server health (the backends decide what a late answer does to
//! it), error messages beyond the one this module builds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::runtime::Id;
use tokio::time::Instant;

/// A timer later than this shows a saturated runtime (tokio's timers are otherwise at most
/// about a millisecond late), or later than a tenth of the deadline when that is longer: a
/// deadline that fired a few milliseconds late on a busy machine is still the store's
/// lateness (an answer would rarely have come in those last few milliseconds); never more than
/// half the deadline.
const SATURATED: Duration = Duration::from_millis(5);

/// How often the sampler measures, and how long a measurement counts as recent.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);
const RECENT: Duration = Duration::from_millis(200);

/// The runtime's recent scheduling delay: a task that yields measures how long it waits to be
/// polled again, behind every other ready task (the wait a store's reader task has too).
#[derive(Debug)]
pub(crate) struct SchedulingDelay {
    /// Tokio's clock, so that a test on a paused runtime moves it.
    epoch: tokio::time::Instant,
    /// The worst delay of the current period (µs), and when that period began (ms since
    /// `epoch`).
    worst_us: AtomicU64,
    since_ms: AtomicU64,
    /// The worst delay of the period before (µs; 0 when that period was not the one just
    /// before): without it, a stall measured just before a period ends would be forgotten by
    /// the next measurement, milliseconds later, while a deadline it delayed is still running
    /// (a late answer then blamed on a healthy store, about one run in six of
    /// `overload_on_a_healthy_memcached_is_never_unavailable` under three CPU hogs).
    previous_us: AtomicU64,
    /// When the sampler last measured (ms since `epoch`; 0: never).
    sampled_ms: AtomicU64,
}

/// One measure per runtime (every store made on it reads it): the service has one runtime; a
/// test binary runs many side by side, and one busy runtime's delay says nothing about when
/// another reads its answers (with one measure for the process, a memcached 400 ms late once
/// passed for overload on a delay of 13 ms that may have been a parallel test's runtime's).
static SHARED: OnceLock<Mutex<HashMap<Option<Id>, Arc<SchedulingDelay>>>> = OnceLock::new();

/// A sampler that has not measured for this long is taken as gone (its runtime ended).
const SAMPLER_GONE_MS: u64 = 100;

impl SchedulingDelay {
    fn new() -> SchedulingDelay {
        SchedulingDelay {
            epoch: tokio::time::Instant::now(),
            worst_us: AtomicU64::new(0),
            since_ms: AtomicU64::new(0),
            previous_us: AtomicU64::new(0),
            sampled_ms: AtomicU64::new(0),
        }
    }

    /// The current runtime's measure, sampled by one task on it (started when no sampler has
    /// measured lately: one for the runtime, not one per store; none outside a runtime, and
    /// then it reads zero).
    pub(crate) fn shared() -> Arc<SchedulingDelay> {
        let runtime = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        let delay = {
            let measures = SHARED.get_or_init(Mutex::default);
            let mut measures = measures.lock().unwrap_or_else(PoisonError::into_inner);
            let measure = measures
                .entry(runtime)
                .or_insert_with(|| Arc::new(SchedulingDelay::new()));
            Arc::clone(measure)
        };
        delay.ensure_sampled();
        delay
    }

    /// Starts a sampler on the current runtime unless one measured lately.
    fn ensure_sampled(self: &Arc<Self>) {
        let now = self.now_ms().max(1);
        let last = self.sampled_ms.load(Ordering::Acquire);
        if last != 0 && now.saturating_sub(last) < SAMPLER_GONE_MS {
            return;
        }
        // One caller claims the start.
        let claimed = self
            .sampled_ms
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if let (true, Ok(runtime)) = (claimed, tokio::runtime::Handle::try_current()) {
            runtime.spawn(sample(Arc::clone(self)));
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn record(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        let recent = u64::try_from(RECENT.as_millis()).unwrap_or(u64::MAX);
        let age = now.saturating_sub(self.since_ms.load(Ordering::Relaxed));
        if age > recent {
            // A new period: the old worst becomes the previous one if that period just ended,
            // so a stall stays recent for at least `RECENT` (one sampler writes; no race).
            let previous = match age > 2 * recent {
                true => 0,
                false => self.worst_us.load(Ordering::Relaxed),
            };
            self.previous_us.store(previous, Ordering::Relaxed);
            self.since_ms.store(now, Ordering::Relaxed);
            self.worst_us.store(us, Ordering::Relaxed);
        } else {
            self.worst_us.fetch_max(us, Ordering::Relaxed);
        }
    }

    /// The worst scheduling delay measured recently (zero when none was).
    pub(crate) fn recent(&self) -> Duration {
        let stale = self
            .now_ms()
            .saturating_sub(self.since_ms.load(Ordering::Relaxed))
            > 2 * u64::try_from(RECENT.as_millis()).unwrap_or(u64::MAX);
        match stale {
            true => Duration::ZERO,
            false => Duration::from_micros(
                self.worst_us
                    .load(Ordering::Relaxed)
                    .max(self.previous_us.load(Ordering::Relaxed)),
            ),
        }
    }
}

/// Measures for as long as its runtime runs.
async fn sample(delay: Arc<SchedulingDelay>) {
    loop {
        let started = Instant::now();
        tokio::task::yield_now().await;
        delay.record(started.elapsed());
        delay
            .sampled_ms
            .store(delay.now_ms().max(1), Ordering::Release);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// When a call under `deadline`, started at `started`, timed out: the runtime's overload if the
/// deadline's timer fired late, or the runtime recently kept ready tasks waiting half the
/// deadline or more (the answer may have waited unread), with that delay; `None` otherwise
/// (the store's lateness).
pub(crate) fn saturated_runtime(
    started: Instant,
    deadline: Duration,
    scheduling: &Arc<SchedulingDelay>,
) -> Option<Duration> {
    // A store made on a runtime that has since ended starts a sampler on this one.
    scheduling.ensure_sampled();
    let late = started.elapsed().saturating_sub(deadline);
    let waited = scheduling.recent();
    let limit = SATURATED.max(deadline / 10).min(deadline / 2);
    (late >= limit || waited >= limit).then_some(late.max(waited))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{SchedulingDelay, saturated_runtime};

    #[test]
    fn a_deadline_that_fired_late_is_the_runtimes() {
        let deadline = Duration::from_millis(10);
        let idle = std::sync::Arc::new(SchedulingDelay::new());
        let on_time = Instant::now() - deadline;
        assert_eq!(saturated_runtime(on_time, deadline, &idle), None);
        let late = Instant::now() - Duration::from_millis(60);
        let by = saturated_runtime(late, deadline, &idle).expect("50 ms late");
        assert!(by >= Duration::from_millis(50));
    }

    #[test]
    fn a_few_milliseconds_late_on_a_long_deadline_is_the_stores() {
        let deadline = Duration::from_millis(200);
        let idle = std::sync::Arc::new(SchedulingDelay::new());
        let slightly = Instant::now() - deadline - Duration::from_millis(6);
        assert_eq!(
            saturated_runtime(slightly, deadline, &idle),
            None,
            "6 ms of 200"
        );
        let much = Instant::now() - deadline - Duration::from_millis(30);
        assert!(
            saturated_runtime(much, deadline, &idle).is_some(),
            "30 ms of 200"
        );
    }

    /// On a paused clock: a stall measured just before a period ends is still recent in the
    /// next period; a period that ended long before counts for nothing.
    #[tokio::test(start_paused = true)]
    async fn a_stall_just_before_a_period_ends_stays_recent() {
        let delay = SchedulingDelay::new();
        delay.record(Duration::from_millis(40));
        tokio::time::advance(super::RECENT + Duration::from_millis(1)).await;
        delay.record(Duration::from_micros(100));
        assert_eq!(
            delay.recent(),
            Duration::from_millis(40),
            "the 40 ms stall of the period just ended is still recent"
        );
        tokio::time::advance(3 * super::RECENT).await;
        delay.record(Duration::from_micros(100));
        assert_eq!(delay.recent(), Duration::from_micros(100));
        tokio::time::advance(3 * super::RECENT).await;
        assert_eq!(delay.recent(), Duration::ZERO, "nothing measured lately");
    }

    #[test]
    fn a_busy_runtime_is_seen_by_its_scheduling_delay() {
        let delay = std::sync::Arc::new(SchedulingDelay::new());
        delay.record(Duration::from_millis(8));
        let deadline = Duration::from_millis(10);
        let on_time = Instant::now() - deadline;
        assert_eq!(
            saturated_runtime(on_time, deadline, &delay),
            Some(Duration::from_millis(8)),
            "ready tasks waited 8 ms: an answer may have waited unread"
        );
    }
}
