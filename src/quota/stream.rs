//! One RLQS stream: the domain it reports for, the buckets it has reported (bounded), each
//! bucket's recent demand and the assignment it holds. A report is folded into the shared
//! counters in ONE batched store call (per counted bucket: the allowed requests onto the
//! window counter RLS uses, the demand onto this window's demand counter, and a read of the
//! previous window's), then every reported bucket gets an assignment.

use std::collections::HashMap;

use super::share::ShareInput;
use super::{Assignment, BucketId, Resolution, resolve};
use crate::limiter::Limiter;
use crate::rules::RuleSet;
use crate::settings::{RlqsSettings, Unmatched};
use crate::storage::{CounterStore, Hit, Op, StorageError};

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
    /// The counter store failed; no assignment was computed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// One bucket's usage since the stream's last report of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The bucket.
    pub bucket: BucketId,
    /// Requests the data plane allowed.
    pub allowed: u64,
    /// Requests the data plane denied.
    pub denied: u64,
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

/// A bucket's demand in its current and previous window, and the assignment it holds.
#[derive(Debug, Default)]
struct Tracked {
    held: Option<Assignment>,
    period: u64,
    window_start: u64,
    demand: (u64, u64),
}

impl Tracked {
    /// Adds `n` to the demand of the window of `period` starting at `start`.
    fn add_demand(&mut self, period: u64, start: u64, n: u64) {
        if (self.period, self.window_start) != (period, start) {
            let follows = self.period == period && start == self.window_start + period;
            self.demand = (0, if follows { self.demand.0 } else { 0 });
            self.period = period;
            self.window_start = start;
        }
        self.demand.0 = self.demand.0.saturating_add(n);
    }
}

/// The state of one stream.
#[derive(Debug)]
pub struct QuotaStream {
    settings: RlqsSettings,
    domain: Option<String>,
    buckets: HashMap<BucketId, Tracked>,
}

impl QuotaStream {
    /// A new stream, before its first report.
    pub fn new(settings: RlqsSettings) -> Self {
        Self {
            settings,
            domain: None,
            buckets: HashMap::new(),
        }
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
        now_ms: u64,
    ) -> Result<Vec<Decided>, QuotaError> {
        let domain = self.check_domain(domain)?;
        let usages = merged(usages);
        let new = usages
            .iter()
            .filter(|u| !self.buckets.contains_key(&u.bucket))
            .count();
        if self.buckets.len() + new > self.settings.max_buckets_per_stream {
            return Err(QuotaError::TooManyBuckets {
                max: self.settings.max_buckets_per_stream,
            });
        }
        let resolved: Vec<Resolution<'_>> = usages
            .iter()
            .map(|u| resolve(rules, &domain, &u.bucket))
            .collect();
        let hits = plan(&domain, &usages, &resolved, limiter, now_ms / 1_000);
        let counts = if hits.is_empty() {
            Vec::new()
        } else {
            limiter.store().hit(&hits).await?
        };
        let shadow = limiter.settings().shadow_mode;
        let mut counts = counts.chunks_exact(3);
        let mut out = Vec::with_capacity(usages.len());
        for (u, r) in usages.iter().zip(resolved) {
            let count = match r {
                Resolution::Counted { .. } => match counts.next() {
                    Some(&[used, current, previous]) => Some((used, current, previous)),
                    _ => return Err(StorageError::Protocol("fewer counts than hits".into()).into()),
                },
                _ => None,
            };
            let tracked = self.buckets.entry(u.bucket.clone()).or_default();
            let (assignment, usage) = assign(&self.settings, tracked, u, r, count, shadow, now_ms);
            tracked.held = Some(assignment);
            out.push(Decided {
                bucket: u.bucket.clone(),
                assignment,
                usage,
            });
        }
        Ok(out)
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

/// The store operations of a report: per counted bucket, the allowed requests onto the window
/// counter, the demand onto this window's demand counter, and a read of the previous window's.
fn plan<S: CounterStore>(
    domain: &str,
    usages: &[Usage],
    resolved: &[Resolution<'_>],
    limiter: &Limiter<S>,
    now_s: u64,
) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (u, r) in usages.iter().zip(resolved) {
        let Resolution::Counted {
            limit,
            period,
            entries,
            ..
        } = r
        else {
            continue;
        };
        let start = now_s - now_s % period;
        let end = start + period;
        let demand = |at| limiter.demand_key(domain, entries, limit, *period, at);
        hits.push(Hit {
            key: limiter.window_key(domain, entries, limit, *period, start),
            op: Op::Add(u.allowed),
            expires_at: end,
        });
        hits.push(Hit {
            key: demand(start),
            op: Op::Add(u.allowed.saturating_add(u.denied)),
            expires_at: end + period,
        });
        hits.push(Hit {
            key: demand(start.saturating_sub(*period)),
            op: Op::Add(0),
            expires_at: end,
        });
    }
    hits
}

/// One bucket's assignment; `count` is (used, demand now, demand before) for a counted bucket.
fn assign(
    settings: &RlqsSettings,
    tracked: &mut Tracked,
    usage: &Usage,
    resolution: Resolution<'_>,
    count: Option<(u64, u64, u64)>,
    shadow: bool,
    now_ms: u64,
) -> (Assignment, Option<GlobalUsage>) {
    let ttl_seconds = settings.assignment_ttl.as_secs().max(1);
    let (
        Resolution::Counted {
            limit,
            per_window,
            period,
            enforce,
            ..
        },
        Some((used, current, previous)),
    ) = (&resolution, count)
    else {
        return match resolution {
            Resolution::Unlimited => (Assignment::AllowAll { ttl_seconds }, None),
            _ => (unmatched(settings.unmatched, ttl_seconds), None),
        };
    };
    let now_s = now_ms / 1_000;
    let start = now_s - now_s % period;
    tracked.add_demand(*period, start, usage.allowed.saturating_add(usage.denied));
    let input = ShareInput {
        limit: *per_window,
        used,
        period_ms: period * 1_000,
        elapsed_ms: now_ms - start * 1_000,
        own_demand: tracked.demand,
        all_demand: (current, previous),
        min_share: settings.min_share,
        ttl_seconds,
    };
    let assignment = if *enforce && !shadow {
        input.assign(tracked.held.as_ref())
    } else {
        Assignment::AllowAll { ttl_seconds }
    };
    let global = GlobalUsage {
        rule: limit.full_key.clone(),
        used,
        limit: *per_window,
    };
    (assignment, Some(global))
}

fn unmatched(action: Unmatched, ttl_seconds: u64) -> Assignment {
    match action {
        Unmatched::Allow => Assignment::AllowAll { ttl_seconds },
        Unmatched::Deny => Assignment::DenyAll { ttl_seconds },
    }
}

/// One usage per bucket (a report naming a bucket twice adds the two), in first-seen order.
fn merged(usages: Vec<Usage>) -> Vec<Usage> {
    let mut out: Vec<Usage> = Vec::with_capacity(usages.len());
    let mut index: HashMap<BucketId, usize> = HashMap::with_capacity(usages.len());
    for u in usages {
        match index.get(&u.bucket) {
            Some(&i) => {
                out[i].allowed = out[i].allowed.saturating_add(u.allowed);
                out[i].denied = out[i].denied.saturating_add(u.denied);
            }
            None => {
                index.insert(u.bucket.clone(), out.len());
                out.push(u);
            }
        }
    }
    out
}
