//! Seeing who is limited, from outside: `/debug/top` and `TOP_LIMITED_SERIES` under a flood of
//! one value beside a thousand others on every store and from RLQS reports (`top`), and the
//! status page at `/` of the debug port in a real headless browser (`browser`).

mod browser;
mod top;

/// The rules of these tests: one value per user, five an hour.
pub(crate) const RULES: &str = "\
domain: shop
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 5 }
";
