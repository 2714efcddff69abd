//! Whose clock expires a store's keys, and what a stalled test process does to a comparison
//! with the models. memcached and Redis expire keys on real time, with a margin of about a
//! second over what the models need; the models read the test clock, which stands still while
//! a loaded machine stalls the test process. A stall between two steps is made up for: the
//! test clock (the models' and the limiter's) moves on by the stalled time. A stall inside a
//! call (between reading the test clock and the store running the command) cannot be: a
//! difference that follows one, on a store that expires on real time, rejects the case as not
//! judgeable instead of failing it. Proptest fails the test when it rejects too many cases, so
//! a limiter that is always slow is still a failure, not a pass.

use std::time::{Duration, Instant};

use proptest::test_runner::TestCaseError;
use turnstile::clock::ManualClock;

/// A pause of the test process longer than this is a stall: well under the second of margin
/// that real-time expiry leaves over the models, well over a call on a loaded machine.
const STALL: Duration = Duration::from_millis(200);

/// Whose clock expires the store's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// The store expires on the injected clock (memory, PostgreSQL): concurrency leases live
    /// 5 s and the models check their expiry.
    TestClock,
    /// The store expires on real time (memcached, Redis): leases live an hour, beyond any case.
    RealTime,
}

impl Expiry {
    /// How long a concurrency lease lives in the rules under test, in ms.
    pub(super) fn lease_ms(self) -> u64 {
        match self {
            Expiry::TestClock => 5_000,
            Expiry::RealTime => 3_600_000,
        }
    }
}

/// The stalls seen during one case.
pub(super) struct Stalls {
    expiry: Expiry,
    last: Instant,
    inside_a_call: bool,
}

impl Stalls {
    pub(super) fn new(expiry: Expiry) -> Self {
        Stalls {
            expiry,
            last: Instant::now(),
            inside_a_call: false,
        }
    }

    /// Before a step: moves `clock` on by the time since the last step when that was a stall.
    pub(super) fn catch_up(&mut self, clock: &ManualClock) {
        let now = Instant::now();
        let passed = now.duration_since(self.last);
        if passed > STALL {
            clock.advance_millis(u64::try_from(passed.as_millis()).unwrap_or(u64::MAX));
        }
        self.last = now;
    }

    /// After a call that started at the last [`Stalls::catch_up`]: notes whether it stalled.
    pub(super) fn called(&mut self) {
        self.inside_a_call |= self.last.elapsed() > STALL;
    }

    /// What a difference from the models is: a failure, or (after a stall inside a call on a
    /// store that expires on real time) a case that cannot be judged.
    pub(super) fn difference(&self, what: String) -> TestCaseError {
        if self.expiry == Expiry::RealTime && self.inside_a_call {
            TestCaseError::reject(format!("stalled inside a call before: {what}"))
        } else {
            TestCaseError::fail(what)
        }
    }
}
