//! Global quotas for the Rate Limit Quota Service: usage reports in, assignments out.
//!
//! A data plane (Envoy's `rate_limit_quota` filter) groups requests into buckets, each named by
//! an unordered set of key/value pairs, and reports per bucket how many requests it allowed and
//! denied. Here a bucket is matched onto the domain's descriptor tree (`bucket_id`), every report
//! is folded into the shared counters through the [`CounterStore`](crate::storage::CounterStore)
//! (the very fixed-window counters RLS counts in, plus a demand counter), and each stream gets
//! per bucket an assignment computed from the global count (`share`). Per-stream state lives in
//! [`QuotaStream`] (`stream`), dropped with the stream.
//!
//! Must not touch: protobuf types, tonic, YAML, store crates. Time comes in as an argument, so a
//! simulation drives this with an injected clock and the in-process store.

mod bucket_id;
mod describe;
mod fold;
mod id_bytes;
pub mod share;
mod stream;
mod usage;

pub use bucket_id::{BucketId, MAX_BUCKET_PAIRS, Resolution, resolve};
pub use describe::describe;
pub use id_bytes::BucketIdBytes;
pub use stream::{Decided, QuotaError, QuotaStream};
pub use usage::{GlobalUsage, Usage};

use std::time::Duration;

use crate::clock::millis_of;

/// What a data plane is told to do with one bucket's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// Allow every request (no limit, shadow mode, or an unmatched bucket by default).
    AllowAll {
        /// Seconds the assignment lives without a renewal.
        ttl_seconds: u64,
    },
    /// Deny every request (the window's budget is spent, or unmatched with `deny`).
    DenyAll {
        /// Seconds the assignment lives without a renewal.
        ttl_seconds: u64,
    },
    /// A local token bucket: at most `max_tokens` at once, refilled continuously at
    /// `tokens_per_fill` per `fill_interval_seconds`.
    TokenBucket {
        /// Capacity (Envoy's bucket starts full).
        max_tokens: u32,
        /// Tokens added per fill interval.
        tokens_per_fill: u32,
        /// The fill interval (whole seconds).
        fill_interval_seconds: u32,
        /// Seconds the assignment lives without a renewal.
        ttl_seconds: u64,
    },
}

impl Assignment {
    /// `allow_all`, `deny_all` or `token_bucket` (metrics and logs).
    pub fn kind(&self) -> &'static str {
        match self {
            Assignment::AllowAll { .. } => "allow_all",
            Assignment::DenyAll { .. } => "deny_all",
            Assignment::TokenBucket { .. } => "token_bucket",
        }
    }

    /// The most requests a data plane holding this assignment can allow in `ms` milliseconds
    /// from when it was sent: none under `DenyAll`, a token bucket's capacity and its refill;
    /// `None` when there is no bound (`AllowAll`, or past the TTL, where the data plane's own
    /// fallback applies).
    pub fn admits_at_most(&self, ms: u64) -> Option<u64> {
        let ttl = Duration::from_secs(self.ttl_seconds());
        if Duration::from_millis(ms) > ttl {
            return None;
        }
        match *self {
            Assignment::AllowAll { .. } => None,
            Assignment::DenyAll { .. } => Some(0),
            Assignment::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
                ..
            } => {
                let interval = Duration::from_secs(u64::from(fill_interval_seconds).max(1));
                let interval_ms = millis_of(interval);
                let refill = u64::from(tokens_per_fill)
                    .saturating_mul(ms)
                    .div_ceil(interval_ms);
                Some(u64::from(max_tokens).saturating_add(refill))
            }
        }
    }

    /// Seconds the assignment lives without a renewal.
    pub fn ttl_seconds(&self) -> u64 {
        match *self {
            Assignment::AllowAll { ttl_seconds }
            | Assignment::DenyAll { ttl_seconds }
            | Assignment::TokenBucket { ttl_seconds, .. } => ttl_seconds,
        }
    }
}
