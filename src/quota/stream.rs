//! One RLQS stream: the domain it reports for, the buckets it has reported (bounded), each
//! bucket's recent demand and the assignment it holds. A report is folded into the shared
//! counters in ONE batched call per store, through the limiter's routing, so each counter is
//! where RLS counts it (per counted bucket: the allowed requests onto the window counter RLS
//! uses, the demand onto this window's demand counter, and the previous window's demand
//! counter; with `REDIS_PERSECOND`, a SECOND limit's three on the per-second store), then every
//! reported bucket gets an assignment. When a counted
//! bucket's window ends, `refresh` re-assigns it without a store call.
//!
//! Must not touch: protobuf types, tonic, the store's commands (`fold::plan` builds them).

use std::collections::HashMap;
use std::sync::Arc;

use super::fold::{Placed, Tracked, assign, merged, plan};
use super::usage::{GlobalUsage, Usage};
use super::{Assignment, BucketId, BucketIdBytes, Resolution, resolve};
use crate::clock::UnixMillis;
use crate::limiter::{Limiter, Operations, Window};
use crate::rules::RuleSet;
use crate::settings::RlqsSettings;
use crate::storage::{CounterStore, StorageError};

/// Why a report cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// The first report named no domain.
    #[error("domain: the first report of a stream must name the domain of its limits")]
    NoDomain,
    /// A later report named another domain.
    #[error(
        "domain: a stream reports for one domain; it began with {was:?} and now names {now:?} (open a new stream for another domain)"
    )]
    DomainChanged {
        /// The stream's domain.
        was: String,
        /// The domain the report named.
        now: String,
    },
    /// The stream would track more buckets than allowed.
    #[error(
        "bucket_quota_usages: this stream reports more than {max} buckets (RLQS_MAX_BUCKETS_PER_STREAM)"
    )]
    TooManyBuckets {
        /// The bound.
        max: usize,
    },
    /// The bucket ids of all streams together would pass their bound.
    #[error(
        "bucket_quota_usages: the bucket ids of all streams would hold more than {max} bytes (RLQS_MAX_BUCKET_BYTES); {used} bytes are held now"
    )]
    TooManyBucketBytes {
        /// The bound.
        max: usize,
        /// Bytes held when the report came.
        used: usize,
    },
    /// The counter store failed; no assignment was computed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// The assignment for one reported bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The bucket, as reported.
    pub bucket: BucketId,
    /// What the data plane is to do.
    pub assignment: Assignment,
    /// The global count behind it, for a counted bucket.
    pub usage: Option<GlobalUsage>,
}

/// The state of one stream.
#[derive(Debug)]
pub struct QuotaStream {
    settings: RlqsSettings,
    domain: Option<String>,
    buckets: HashMap<BucketId, Tracked>,
    /// The bound shared by every stream, and what this one has taken of it.
    held: Arc<BucketIdBytes>,
    held_here: usize,
}

impl QuotaStream {
    /// A new stream, before its first report, with a bound of its own
    /// (`settings.max_bucket_bytes`).
    pub fn new(settings: RlqsSettings) -> Self {
        let held = Arc::new(BucketIdBytes::new(settings.max_bucket_bytes));
        Self::sharing(settings, held)
    }

    /// A new stream whose bucket ids count against `held`, shared with every other stream.
    pub fn sharing(settings: RlqsSettings, held: Arc<BucketIdBytes>) -> Self {
        Self {
            settings,
            domain: None,
            buckets: HashMap::new(),
            held,
            held_here: 0,
        }
    }

    /// The settings the stream was opened with.
    pub fn settings(&self) -> &RlqsSettings {
        &self.settings
    }

    /// Bytes of the bucket ids this stream holds.
    pub fn held_bytes(&self) -> usize {
        self.held_here
    }

    /// Buckets this stream has reported.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Folds one report into the counters and assigns every reported bucket. `domain` may be
    /// empty after the first report. On an error nothing is assigned.
    pub async fn on_report<S: CounterStore>(
        &mut self,
        domain: &str,
        usages: Vec<Usage>,
        rules: &RuleSet,
        limiter: &Limiter<S>,
        now: UnixMillis,
    ) -> Result<Vec<Decided>, QuotaError> {
        let domain = self.check_domain(domain)?;
        let usages = merged(usages);
        let new_bytes = self.take_new(&usages)?;
        let resolved: Vec<Resolution<'_>> = usages
            .iter()
            .map(|u| resolve(rules, &domain, &u.bucket))
            .collect();
        let placed: Vec<Option<Placed>> = usages
            .iter()
            .zip(&resolved)
            .map(|(u, r)| match r {
                Resolution::Counted { period, .. } => {
                    let known = self.buckets.get(&u.bucket).map(Tracked::known);
                    Some(Placed::at(u, *period, now, known.unwrap_or_default()))
                }
                _ => None,
            })
            .collect();
        let (mut ops, slots) = plan(&domain, &resolved, &placed, limiter);
        if let Err(err) = apply(limiter, &mut ops).await {
            // The new buckets are not kept: their bytes go back.
            self.held.give_back(new_bytes);
            self.held_here -= new_bytes;
            return Err(err.into());
        }
        let shadow = limiter.shadow_mode();
        let mut out = Vec::with_capacity(usages.len());
        for (((u, r), placed), slots) in usages.iter().zip(resolved).zip(placed).zip(slots) {
            let bucket_counts = match (placed, slots) {
                (Some(placed), Some(slots)) => Some(slots.counts(placed, &ops)),
                _ => None,
            };
            let tracked = self.buckets.entry(u.bucket.clone()).or_default();
            tracked.heard(u, now);
            let (assignment, usage) =
                assign(&self.settings, tracked, r, bucket_counts, shadow, now);
            tracked.reported(assignment, now);
            let usage = usage.map(|g| GlobalUsage {
                denied: u.denied,
                ..g
            });
            out.push(Decided {
                bucket: u.bucket.clone(),
                assignment,
                usage,
            });
        }
        Ok(out)
    }

    /// Checks the buckets of `usages` this stream does not hold yet against both bounds and
    /// takes their bytes; returns how many bytes were taken.
    fn take_new(&mut self, usages: &[Usage]) -> Result<usize, QuotaError> {
        let (new, new_bytes) = usages
            .iter()
            .filter(|u| !self.buckets.contains_key(&u.bucket))
            .fold((0, 0), |(n, bytes), u| (n + 1, bytes + u.bucket.bytes()));
        if self.buckets.len() + new > self.settings.max_buckets_per_stream {
            return Err(QuotaError::TooManyBuckets {
                max: self.settings.max_buckets_per_stream,
            });
        }
        if !self.held.try_take(new_bytes) {
            return Err(QuotaError::TooManyBucketBytes {
                max: self.held.max(),
                used: self.held.used(),
            });
        }
        self.held_here += new_bytes;
        Ok(new_bytes)
    }

    /// When the next counted bucket's window ends: the moment [`QuotaStream::refresh`] has
    /// something to say without waiting for a report.
    pub fn next_window_end(&self) -> Option<UnixMillis> {
        self.buckets.values().filter_map(Tracked::window_end).min()
    }

    /// Re-assigns every counted bucket whose window has ended by `now`, as an empty report
    /// at the new window's start would, and returns the assignments that changed. A data plane
    /// reports every few seconds (Envoy 1.40: every 5 s), so without this a bucket denied for
    /// the rest of a window would stay denied into the next one, and a rate paced for a
    /// window's last seconds would run on into the next, until the next report.
    ///
    /// No store call: at a window's start nothing of it is used yet, and the previous window's
    /// demand is the one the stream last read (at most one report interval old), so every
    /// stream of every replica can do this at the same instant without a burst on the store.
    pub fn refresh(&mut self, rules: &RuleSet, shadow: bool, now: UnixMillis) -> Vec<Decided> {
        let Some(domain) = self.domain.as_deref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (bucket, tracked) in self.buckets.iter_mut() {
            if tracked.window_end().is_none_or(|end| end > now) {
                continue;
            }
            let resolution = resolve(rules, domain, bucket);
            let counts = match &resolution {
                Resolution::Counted { period, .. } => {
                    Some(tracked.carried_over(Window::at(*period, now)))
                }
                _ => None,
            };
            let held = tracked.held;
            let (assignment, usage) =
                assign(&self.settings, tracked, resolution, counts, shadow, now);
            tracked.refreshed_with(assignment);
            if held != Some(assignment) {
                out.push(Decided {
                    bucket: bucket.clone(),
                    assignment,
                    usage,
                });
            }
        }
        out
    }

    fn check_domain(&mut self, domain: &str) -> Result<String, QuotaError> {
        match &self.domain {
            None if domain.is_empty() => Err(QuotaError::NoDomain),
            None => {
                self.domain = Some(domain.to_owned());
                Ok(domain.to_owned())
            }
            Some(was) if domain.is_empty() || domain == was => Ok(was.clone()),
            Some(was) => Err(QuotaError::DomainChanged {
                was: was.clone(),
                now: domain.to_owned(),
            }),
        }
    }
}

impl Drop for QuotaStream {
    fn drop(&mut self) {
        self.held.give_back(self.held_here);
    }
}

/// Sends a report's operations (none may be needed).
async fn apply<S: CounterStore>(
    limiter: &Limiter<S>,
    ops: &mut Operations,
) -> Result<(), StorageError> {
    match ops.is_empty() {
        true => Ok(()),
        false => limiter.apply(ops).await,
    }
}
