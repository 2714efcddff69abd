//! What a stream reports of a bucket, and what the counters say of its rule afterwards: the
//! types the report's fold and the stream share.
//!
//! Must not touch: anything but these plain types.

use super::BucketId;

/// One bucket's usage since the stream's last report of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The bucket.
    pub bucket: BucketId,
    /// Requests the data plane allowed.
    pub allowed: u64,
    /// Requests the data plane denied.
    pub denied: u64,
    /// The time these requests arrived over, up to the report (ms; Envoy's `time_elapsed`);
    /// 0 when unknown, which counts them all in the report's window.
    pub elapsed_ms: u64,
}

/// A counted bucket's global state after a report (for metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalUsage {
    /// The rule's full key (bounded by the configuration, not by bucket values).
    pub rule: String,
    /// Allowed requests counted in the current window, every replica and stream.
    pub used: u64,
    /// The limit per window.
    pub limit: u64,
    /// Requests of this bucket the reporting data plane denied since its last report.
    pub denied: u64,
}
