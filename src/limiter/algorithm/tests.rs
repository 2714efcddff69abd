//! Unit tests of `algorithm`.
use super::{Take, Window, sliding, token_bucket};
use crate::clock::UnixMillis;
use crate::rules::{Algorithm, PerUnit, Period, Unit};
use crate::storage::TokenAnswer;
use proptest::prelude::*;

proptest! {
    /// The stats split reads "over" from usage > limit: it must agree with the decision.
    #[test]
    fn usage_is_over_the_limit_exactly_when_refused(
        limit in 0u64..50, cur in 1u64..100, prev in 0u64..100, into in 0u64..60_000,
        burst in 0u32..10, debt in 0u128..2_000_000, admitted: bool, n in 1u64..5,
    ) {
        let window = Window::of(60, 600);
        let out = sliding(limit, cur, prev, window, UnixMillis::new(600_000 + into), true);
        prop_assert_eq!(out.over, out.used > limit);
        let rate = PerUnit {
            requests_per_unit: u32::try_from(limit.max(1)).unwrap_or(1),
            period: Period::one(Unit::Minute),
            algorithm: Algorithm::TokenBucket { burst },
        };
        let capacity = u128::from(rate.requests_per_unit) + u128::from(burst);
        let answer = TokenAnswer { admitted, tat: 1_000 * u128::from(rate.requests_per_unit) + debt };
        let out = token_bucket(rate, capacity, answer, Take::Take(n), UnixMillis::new(1_000));
        prop_assert_eq!(out.over, out.used > u64::from(rate.requests_per_unit));
    }
}
