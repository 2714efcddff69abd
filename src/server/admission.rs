//! Admission of `ShouldRateLimit` calls: an adaptive limit on the decisions in flight, so that
//! the work admitted can finish within its callers' deadlines, and a call that cannot is
//! answered `RESOURCE_EXHAUSTED` before its deadline instead of late (after Envoy's 20 ms
//! default timeout, when the work is wasted) or blamed on a healthy store. A call beyond the
//! limit waits for a place, parked, as long as the time left by its `grpc-timeout` allows.
//!
//! The limit is a gradient on latency, as Envoy's adaptive concurrency filter and Netflix's
//! Gradient2 are: every [`PERIOD`] the admitted calls' mean latency (admission to answer; a
//! call its caller gave up on counts with the time it had taken) is compared with the latency
//! of an unloaded call plus the tolerance. Above it the limit is multiplied by
//! `target / latency` (at most halved per period); at or below it, and while the limit is in
//! use, it grows by its square root. It starts at its minimum and doubles per round of calls
//! until latency first passes the target (slow start, as TCP's). The unloaded latency is the
//! fastest single call of the last [`BASELINE_SPAN`] (a fastest call is one that met no queue;
//! a windowed minimum, so it follows a store that moved, and does not drift up under sustained
//! load as a mean would).
//!
//! The runtime's scheduling delay (how long a stream waits to be polled before it reaches this
//! layer) is not part of the signal: the limit cannot shorten it, since refused calls queue
//! there as much as admitted ones (measured: with it in the signal, the limit fell to its
//! minimum under a closed-loop load while the queue stayed as long).
//!
//! Only `ShouldRateLimit` is limited: RLQS streams are long-lived (their reports are bounded by
//! the quota module), and health checks and reflection must answer under load.
//!
//! Must not touch: the decision, the stores, protocol conversion. Readings go to
//! [`AdmissionReadings`] for `metrics` to render.

mod controller;
mod deadline;
mod layer;
mod measuring;
mod places;

pub(super) use layer::AdmissionLayer;

use std::time::Duration;

#[cfg(doc)]
use crate::metrics::AdmissionReadings;

/// How often the limit is recomputed.
pub(super) const PERIOD: Duration = Duration::from_millis(100);

/// How far back the fastest single call is remembered as the unloaded latency.
pub(super) const BASELINE_SPAN: Duration = Duration::from_secs(30);
