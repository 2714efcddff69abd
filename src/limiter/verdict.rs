//! The result of a decision, in domain terms (not protobuf): one status per request descriptor
//! plus the overall code. Borrowed from the rule set that produced it.

use super::request::LimitOverride;
use crate::rules::{Limit, MetaValue, PerUnit, Period, Rate};

/// A descriptor's or the request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Let it through.
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit that applied to a descriptor.
#[derive(Debug, Clone, Copy)]
pub enum Applied<'r> {
    /// A configured limit.
    Rule(&'r Limit),
    /// A limit sent in the request (`descriptor.limit`).
    Override(LimitOverride),
}

impl<'r> Applied<'r> {
    /// What the limit allows when it is counted; `None` for an `unlimited` rule.
    pub fn rate(&self) -> Option<PerUnit> {
        match self {
            Applied::Rule(l) => match l.rate {
                Rate::Limited(rate) => Some(rate),
                Rate::Unlimited { .. } => None,
            },
            Applied::Override(o) => Some(PerUnit {
                requests_per_unit: o.requests_per_unit,
                period: Period::one(o.unit),
                algorithm: o.algorithm,
            }),
        }
    }

    /// `rate_limit.name` (empty for overrides).
    pub fn name(&self) -> &str {
        match self {
            Applied::Rule(l) => l.name.as_deref().unwrap_or(""),
            Applied::Override(_) => "",
        }
    }

    /// The rule, when the limit came from configuration.
    pub fn rule(&self) -> Option<&'r Limit> {
        match self {
            Applied::Rule(l) => Some(l),
            Applied::Override(_) => None,
        }
    }

    /// The rule's metadata, if any.
    pub fn metadata(&self) -> Option<&'r MetaValue> {
        self.rule().and_then(|l| l.metadata.as_ref())
    }
}

/// A limit that counts: where it came from and what it allows.
#[derive(Debug, Clone, Copy)]
pub struct Limited<'r> {
    /// The configured or requested limit.
    pub applied: Applied<'r>,
    /// Its rate (an applied limit that counts always has one).
    pub rate: PerUnit,
}

/// What happened to a descriptor's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Nothing was counted: no limit applies (unknown domain, no match, replaced), or the
    /// counter store failed and the fail-open policy answered.
    None,
    /// An `unlimited` limit matched: never counted.
    Unlimited,
    /// Counted in the store: `hits` added (0 for a refund or a check), `after` the count then.
    Counted {
        /// Take this request added.
        hits: u64,
        /// The counter after them.
        after: u64,
    },
    /// Answered OVER_LIMIT from the local over-limit cache, without counting.
    LocalCache {
        /// The hits the request would have added.
        hits: u64,
    },
}

impl Counting {
    /// The hits this request added or would have added (0 when nothing counts).
    pub fn hits(&self) -> u64 {
        match *self {
            Counting::Counted { hits, .. } | Counting::LocalCache { hits } => hits,
            Counting::None | Counting::Unlimited => 0,
        }
    }
}

/// One descriptor's answer.
#[derive(Debug, Clone)]
pub struct Status<'r> {
    /// OK or OVER_LIMIT (after per-rule shadow mode).
    pub code: Code,
    /// The limit reported as `current_limit`; `None` when no limit applies (unknown domain, no
    /// match, replaced) and for `unlimited` limits.
    pub limit: Option<Limited<'r>>,
    /// `limit_remaining`.
    pub remaining: u32,
    /// `duration_until_reset`, for counted limits (whole seconds for fixed windows).
    pub reset_in: Option<std::time::Duration>,
    /// What was counted.
    pub counting: Counting,
    /// The limit was over, but shadow mode (rule) answered OK.
    pub shadowed: bool,
    /// The descriptor counts in quota mode.
    pub quota: bool,
}

impl Status<'_> {
    /// A status for a descriptor no limit applies to.
    pub(crate) fn no_limit() -> Self {
        Status {
            code: Code::Ok,
            limit: None,
            remaining: 0,
            reset_in: None,
            counting: Counting::None,
            shadowed: false,
            quota: false,
        }
    }

    /// Marks the descriptor over its limit; a shadow-mode rule answers OK all the same.
    pub(crate) fn mark_over(&mut self) {
        let shadow = self
            .limit
            .and_then(|l| l.applied.rule().map(|r| r.shadow_mode))
            .unwrap_or(false);
        self.code = if shadow { Code::Ok } else { Code::OverLimit };
        self.shadowed = shadow;
        self.remaining = 0;
    }
}

/// The overall code: OVER_LIMIT if any non-quota descriptor is over, or if there are quota
/// descriptors and every one of them is over; then global shadow mode turns OVER_LIMIT into OK.
/// Returns the code and whether global shadow mode changed it.
pub(crate) fn overall(statuses: &[Status<'_>], global_shadow: bool) -> (Code, bool) {
    let mut overall = Code::Ok;
    let (mut quota_total, mut quota_over) = (0usize, 0usize);
    for status in statuses {
        if status.quota {
            quota_total += 1;
            quota_over += usize::from(status.code == Code::OverLimit);
        } else if status.code == Code::OverLimit {
            overall = Code::OverLimit;
        }
    }
    if quota_total > 0 && quota_total == quota_over {
        overall = Code::OverLimit;
    }
    if overall == Code::OverLimit && global_shadow {
        return (Code::Ok, true);
    }
    (overall, false)
}

/// The whole request's answer.
#[derive(Debug, Clone)]
pub struct Verdict<'r> {
    /// The overall code (after quota mode and global shadow mode).
    pub overall: Code,
    /// One status per request descriptor, in request order.
    pub statuses: Vec<Status<'r>>,
    /// Whether the request's domain is loaded.
    pub domain_found: bool,
    /// Global shadow mode turned an OVER_LIMIT overall code into OK.
    pub global_shadowed: bool,
    /// The counter store failed and the answer was OK by the fail-open policy.
    pub failed_open: bool,
}
