//! The decision: match each descriptor, build its counter key and window, count every limited
//! descriptor in one batched store call, and turn the counts into a [`Verdict`] with the
//! reference's semantics (replaces, unlimited, shadow mode, quota mode, global shadow mode).
//!
//! The stages, each over its own type: descriptors → matched limits (`matched`, `replaced`) →
//! plans (`algorithm::plan`, keys from `key`) → operations queued in [`Operations`] (`ops`, the
//! one port to the stores, which routes each to its store and hands back a typed slot) →
//! outcomes read through the slots (`algorithm::decide`) → [`Verdict`].
//!
//! Must not touch: protobuf types, tonic, YAML, memcached crates. Uses storage only through the
//! [`CounterStore`] trait (called from `ops` alone) and time only through [`Clock`].

mod algorithm;
mod batch;
mod failure_modes;
mod hand_back;
mod key;
mod local_cache;
mod matching;
mod ops;
mod outage;
mod replicas;
mod request;
mod rule_keys;
mod verdict;
mod window;

pub use crate::rules::StoreFailure;
pub use key::{KeyLayout, counter_key};
pub use outage::OutageReadings;
pub use replicas::MARK_PERIOD;
pub use request::{Descriptor, Entry, LimitOverride, Request};
pub use verdict::{Applied, Code, Counting, Limited, Status, Verdict};
pub(crate) use window::Window;

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, UnixMillis};
use crate::rules::RuleSet;
use crate::storage::{CounterStore, StorageError, Take};
use batch::Batch;
use key::Keys;
use matching::{matched, replaced};
pub use ops::{CountSlot, Destination, Operations, StepSlot};

/// Process-wide limiter settings.
#[derive(Debug, Clone, Default)]
pub struct LimiterSettings {
    /// `CACHE_KEY_PREFIX`: prepended to every counter key.
    pub key_prefix: String,
    /// `SHADOW_MODE`: an OVER_LIMIT overall code becomes OK.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every limited descriptor counts in quota mode.
    pub quota_mode: bool,
    /// `BACKEND_FAILURE_MODE` (or `BACKEND_FAIL_OPEN`): what a descriptor whose rule does not
    /// say gets when its store fails.
    pub on_store_failure: StoreFailure,
    /// `BACKEND_LOCAL_REPLICAS`: the replicas sharing the store, pinned (`None`: learned from
    /// the replicas' marks in the store).
    pub local_replicas: Option<std::num::NonZeroU64>,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`: the local over-limit cache's budget (0 = off).
    pub local_cache_bytes: u64,
    /// Which bytes window counters are kept under (the reference's on Redis by default).
    pub key_layout: KeyLayout,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (Redis): fixed-window counters are read first;
    /// when a hit would take one over its limit (or the local cache refused a descriptor), only
    /// the counters that would go over are incremented and the others are only read.
    pub stop_increment_when_over_limit: bool,
}

/// The durable store (`POSTGRES_FROM_UNIT`) and the shortest period it counts.
#[derive(Debug)]
struct Durable<S> {
    store: S,
    from: Duration,
}

/// Decides requests against rules, counting in a store.
#[derive(Debug)]
pub struct Limiter<S> {
    store: S,
    /// `REDIS_PERSECOND`: where the counters of SECOND limits are kept instead.
    per_second: Option<S>,
    /// `POSTGRES_FROM_UNIT`: where the counters of long limits are kept instead.
    durable: Option<Durable<S>>,
    clock: Arc<dyn Clock>,
    settings: LimiterSettings,
    local_cache: Option<local_cache::OverLimitCache>,
    outage: outage::Outage,
}

impl<S: CounterStore> Limiter<S> {
    /// A limiter over `store`.
    pub fn new(store: S, clock: Arc<dyn Clock>, settings: LimiterSettings) -> Self {
        let local_cache = local_cache::OverLimitCache::new(settings.local_cache_bytes);
        let outage = outage::Outage::new(settings.local_replicas, clock.clone());
        if settings.on_store_failure == StoreFailure::Local {
            outage.want();
        }
        Self {
            store,
            per_second: None,
            durable: None,
            clock,
            settings,
            local_cache,
            outage,
        }
    }

    /// Point-in-time readings of every store (for `/metrics`); the stores themselves are
    /// reached only through the limiter's operations.
    pub fn gauges(&self) -> Vec<crate::storage::Gauge> {
        let mut gauges = self.store.gauges();
        if let Some(second) = &self.per_second {
            gauges.extend(second.gauges());
        }
        if let Some(durable) = &self.durable {
            gauges.extend(durable.store.gauges());
        }
        gauges
    }

    /// Keeps the counters of SECOND limits in `store` instead (`REDIS_PERSECOND`).
    pub fn with_per_second_store(mut self, store: S) -> Self {
        self.per_second = Some(store);
        self
    }

    /// Keeps the counters of limits at least `from_seconds` long in `store` instead
    /// (`POSTGRES_FROM_UNIT`).
    pub fn with_durable_store(mut self, store: S, from_seconds: u64) -> Self {
        self.durable = Some(Durable {
            store,
            from: Duration::from_secs(from_seconds),
        });
        self
    }

    /// Where `rate`'s operations go: the durable store for a period at least as long as
    /// `POSTGRES_FROM_UNIT`, else the per-second store for a SECOND limit (`REDIS_PERSECOND`),
    /// else the main store. RLS and RLQS route by this one rule.
    pub fn destination(&self, rate: &crate::rules::PerUnit) -> Destination {
        match &self.durable {
            Some(durable) if rate.period.length() >= durable.from => Destination::Durable,
            _ if self.per_second.is_some() && rate.unit() == crate::rules::Unit::Second => {
                Destination::PerSecond
            }
            _ => Destination::Main,
        }
    }

    /// Whether `rate` is counted in a durable store (PostgreSQL).
    pub fn is_durable(&self, rate: &crate::rules::PerUnit) -> bool {
        self.stores().durable_at(self.destination(rate))
    }

    /// Sends `ops`, each to its store (see [`Limiter::destination`]), every store at once;
    /// their answers are then read from `ops`. In the `local` mode a store that fails is
    /// answered from this replica's memory with its share.
    pub async fn apply(&self, ops: &mut Operations) -> Result<(), StorageError> {
        self.apply_or_local(ops).await
    }

    /// Whether every store can serve (readiness); if not, why.
    pub async fn ready(&self) -> Result<(), StorageError> {
        self.store.ready().await?;
        if let Some(second) = &self.per_second {
            second.ready().await?;
        }
        match &self.durable {
            Some(durable) => durable.store.ready().await,
            None => Ok(()),
        }
    }

    fn stores(&self) -> ops::Stores<'_, S> {
        ops::Stores {
            main: &self.store,
            per_second: self.per_second.as_ref(),
            durable: self.durable.as_ref().map(|durable| &durable.store),
        }
    }

    /// Decides one request, in stages: match each descriptor to its limit, drop the replaced
    /// ones, plan every counted descriptor's store operations into one batch, run it, and turn
    /// the answers into per-descriptor statuses and the overall code. When a store fails, each
    /// of its descriptors gets what its mode says (`failure_modes`).
    pub async fn check<'r>(
        &self,
        rules: &'r RuleSet,
        request: &Request<'_>,
    ) -> Result<Verdict<'r>, StorageError> {
        let mut statuses: Vec<Status<'r>> = request
            .descriptors
            .iter()
            .map(|_| Status::no_limit())
            .collect();
        let Some(domain) = rules.domain(&request.domain) else {
            return Ok(Verdict {
                overall: Code::Ok,
                statuses,
                domain_found: false,
                global_shadowed: false,
                failed_open: false,
            });
        };
        let applied = matched(domain, request);
        let replaced = replaced(&applied);
        let mut batch = Batch::at(self.clock.now(), request.descriptors.len());
        let mut keys = Keys::new();
        for (index, limit) in applied.iter().enumerate() {
            let Some(limit) = limit else { continue };
            if !limit.rule().is_some_and(|l| replaced.replaces(l)) {
                let status = &mut statuses[index];
                self.plan(request, index, limit, status, &mut batch, &mut keys);
            }
        }
        if let Err(failed) = self.run(&mut batch, &statuses).await {
            // Boxed: the rare path's state does not grow every request's future.
            return Box::pin(self.on_failure(failed, batch, statuses)).await;
        }
        for planned in &batch.planned {
            self.decide_one(&batch, planned, &mut statuses[planned.index], true);
        }
        Ok(self.counted(statuses, false))
    }

    /// Sends the batch: in one call per store on the common path; the rare ones (the
    /// hold-back of `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, the local mode's settling)
    /// boxed, so that their state does not grow every request's future.
    async fn run(
        &self,
        batch: &mut Batch,
        statuses: &[Status<'_>],
    ) -> Result<(), failure_modes::Failed> {
        if self.settings.stop_increment_when_over_limit || self.outage.settles() {
            return Box::pin(self.run_rare(batch, statuses)).await;
        }
        batch.ops.apply_each(&self.stores()).await
    }

    /// [`Limiter::run`]'s rare paths: with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, reads
    /// first and holds back the hits that would go over; in the local mode (or while
    /// something is owed), the answers settle what the local mode counted (`hand_back`).
    async fn run_rare(
        &self,
        batch: &mut Batch,
        statuses: &[Status<'_>],
    ) -> Result<(), failure_modes::Failed> {
        let stores = self.stores();
        if self.settings.stop_increment_when_over_limit {
            let cached_over = statuses
                .iter()
                .any(|s| matches!(s.counting, Counting::LocalCache { .. }));
            if let Err(e) = batch.hold_back(&stores, cached_over).await {
                let to = Destination::ALL.into_iter().filter(|to| batch.ops.has(*to));
                return Err(to.map(|to| (to, e.clone())).collect());
            }
        }
        match self.outage.settles() {
            true => self.send_settling(&mut batch.ops).await,
            false => batch.ops.apply_each(&stores).await,
        }
    }

    /// A counted descriptor's status from its store's answers (and, with `cache`, the local
    /// over-limit cache fed with a fixed window that went over).
    fn decide_one(
        &self,
        batch: &Batch,
        planned: &batch::Planned,
        status: &mut Status<'_>,
        cache: bool,
    ) {
        let outcome = algorithm::decide(
            planned.plan,
            planned.rate,
            planned.take,
            batch.now,
            &batch.ops,
        );
        status.counting = Counting::Counted {
            hits: match planned.take {
                Take::Take(n) => n,
                Take::Refund(_) => 0,
            },
            after: outcome.used,
        };
        status.reset_in = Some(outcome.reset_in);
        if outcome.over {
            status.mark_over();
            if let (true, Some(cache), algorithm::Plan::Fixed { counter, window }) =
                (cache, &self.local_cache, planned.plan)
            {
                let key = &batch.ops.op(counter).key;
                let limit = planned.rate.requests_per_unit;
                cache.insert(key, limit, window.end(), batch.now.secs());
            }
        } else {
            status.remaining = outcome.remaining;
        }
    }

    /// Plans one counted descriptor into the batch (or answers it at once: unlimited, a
    /// blocking token bucket, the local over-limit cache).
    fn plan<'r>(
        &self,
        request: &Request<'_>,
        index: usize,
        limit: &Applied<'r>,
        status: &mut Status<'r>,
        batch: &mut Batch,
        keys: &mut Keys,
    ) {
        let descriptor = &request.descriptors[index];
        let Some(rate) = limit.rate() else {
            status.counting = Counting::Unlimited;
            status.remaining = u32::MAX;
            return;
        };
        status.limit = Some(Limited {
            applied: *limit,
            rate,
        });
        status.quota = self.settings.quota_mode || limit.rule().is_some_and(|l| l.quota_mode);
        if self.mode_of(status) == StoreFailure::Local {
            self.outage.want();
        }
        let take = match (descriptor.refund, descriptor.hits) {
            (true, n) => Take::Refund(n),
            (false, n) => Take::Take(n),
        };
        self.start_keys(keys, &request.domain, descriptor, limit);
        let plan = algorithm::plan(&mut algorithm::PlanInput {
            rate,
            take,
            now: batch.now,
            keys,
        });
        if let (Some(cache), algorithm::Plan::Fixed { counter, window }) =
            (&self.local_cache, &plan)
        {
            match take {
                Take::Take(n)
                    if cache.contains(&counter.key, rate.requests_per_unit, batch.now.secs()) =>
                {
                    status.reset_in = Some(window.reset_in());
                    status.mark_over();
                    status.counting = Counting::LocalCache { hits: n };
                    return;
                }
                Take::Refund(_) => cache.remove(&counter.key),
                Take::Take(_) => {}
            }
        }
        let plan = plan.queue(&mut batch.ops, self.destination(&rate));
        batch.planned.push(batch::Planned {
            index,
            plan,
            rate,
            take,
        });
    }

    /// Now, by the limiter's clock.
    pub fn now(&self) -> UnixMillis {
        self.clock.now()
    }

    /// `SHADOW_MODE`: whether an OVER_LIMIT answer becomes OK (RLQS applies it to its
    /// assignments too).
    pub fn shadow_mode(&self) -> bool {
        self.settings.shadow_mode
    }
}
